"""Device pools: many devices of the networked testbed in one process.

Each pooled device is a `DeviceClient` exactly as a lone one (`multispin.runtime.net.device`): its
own DEALER socket, key pair (or the shared secret), `DeviceProtocol` state, draft state,
reconnect-with-resume and fault hooks, on a thread of its own. The pool shares two things only:

- the draft models: devices that hold the same draft are sequences of one `BatchedLM`
  (`PooledSequence`), so the pool loads each draft once;
- the forward passes: a `DraftBatcher` gathers the draft requests of a round (the server's PLANs
  reach every device at once) and drafts them with `roles.draft_all`, one batched forward per step
  and draft model, as the in-process loop does.

The server cannot tell a pooled device from a lone one: the messages are the same bytes, and a
device's tokens come from its own random stream (seed, device, position), whoever shares its
batch. A padded batch can change the last bits of a float32 logit (up to 8e-6 in q̂(x) measured
on SmolLM2-135M's draft at batch 8), so on float32 models a pooled device's token can, rarely,
differ from a lone one's, the output law being exact either way; on the tiny pair's float64
models nothing changes, and the tests compare pooled and lone runs byte for byte.

Pools on several hosts join one server as lone devices do, each with its own device ids; a pool
runs as a Ray actor (`ray_pool_actor`) where a cluster should place it.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from multispin.errors import ConfigError, Interrupted
from multispin.models.base import BatchedLM, BatchedSequence, LoadedPair
from multispin.models.prompts import encode_prompt
from multispin.models.registry import resolve_pair
from multispin.runtime.net.device import (
    DeviceClient,
    DeviceOutcome,
    normalise_endpoint,
    resolve_credentials,
    shared_context,
)
from multispin.runtime.round.roles import Draft, DraftDevice, draft_all
from multispin.runtime.security.limits import MAX_SERVED_DEVICES
from multispin.runtime.wire import messages as P
from multispin.vocabulary import COUPLED, STANDARD, VerifyRule

log = logging.getLogger("multispin.pool")

# How long a draft request waits for the pool's other members after the latest request. Every
# member the server planned asks within milliseconds (one flush sends a round's PLANs), so the wait
# ends as soon as all have asked; it runs out only when a member was not planned (a stalled or
# crashed peer, a device that joined mid-round). Long, so that a loaded host's slow thread still
# joins its batch: the batches, and with them the logits' float rounding, do not depend on timing.
GATHER_S = 2.0
# How long a stopped pool waits for its devices to leave (each leaves at its next message boundary,
# polled every 0.2 s) before it reports the partial texts it holds: well inside the command line's
# stop grace, so that the texts and --result are written before the process is ended.
STOP_JOIN_S = 2.0


def _device_id(digits: str) -> int:
    """A device id from its digits, refused beyond P.MAX_DEVICE_ID (a 5,000-digit number included)."""
    if len(digits) > len(str(P.MAX_DEVICE_ID)) or int(digits) > P.MAX_DEVICE_ID:
        raise ConfigError(f"devices: ids must lie in [0, {P.MAX_DEVICE_ID}] (got {digits[:20]})")
    return int(digits)


def parse_device_ids(spec: str) -> list[int]:
    """'0-19' or '0-3,8,10-11' → the ids, in order; a one-line ConfigError otherwise. Every bound
    and the total count are checked on the parsed numbers before any id list is built: a range
    such as 0-2147483647 is refused in microseconds instead of filling the memory."""
    bounds: list[tuple[int, int]] = []
    for part in str(spec).split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m:
            raise ConfigError(f"devices: expected ids and ranges such as 0-19 or 0-3,8 (got {spec[:80]!r})")
        lo, hi = _device_id(m.group(1)), _device_id(m.group(2) if m.group(2) is not None else m.group(1))
        if hi < lo:
            raise ConfigError(f"devices: range {lo}-{hi} runs backwards")
        bounds.append((lo, hi))
    count = sum(hi - lo + 1 for lo, hi in bounds)
    if count > MAX_SERVED_DEVICES:
        raise ConfigError(
            f"devices: a pool holds at most {MAX_SERVED_DEVICES} devices, what one server serves (got {count})"
        )
    ids = [i for lo, hi in bounds for i in range(lo, hi + 1)]
    if len(set(ids)) != len(ids):
        raise ConfigError("devices: an id appears twice")
    return ids


class PooledSequence(BatchedSequence):
    """A device's sequence of a draft `BatchedLM` the pool shares; every call holds the pool's
    model lock, since devices commit (roll their caches back) on their own threads while the
    batcher drafts."""

    def __init__(self, batched: BatchedLM, seq_id: int, lock: threading.RLock):
        self.lock = lock
        with lock:
            super().__init__(batched, seq_id)

    @property
    def length(self) -> int:
        with self.lock:
            return self.batched.length(self.seq_id)

    def reset(self) -> None:
        with self.lock:
            super().reset()

    def extend(self, token_ids):
        with self.lock:
            return super().extend(token_ids)

    def extend_last(self, token_ids):
        with self.lock:
            return super().extend_last(token_ids)

    def rollback(self, length: int) -> None:
        with self.lock:
            super().rollback(length)

    def close(self) -> None:
        """Free the sequence's cache (its device's job is over)."""
        with self.lock:
            self.batched.close(self.seq_id)


# a request's draft and the batch's drafting time, or what the batch raised
DraftResult = tuple[Draft, float] | Exception


class DraftBatcher:
    """The pool's drafter (`DeviceClient(drafter=...)`): a device thread hands in its draft request
    and blocks until a batch containing it has run. A batch runs once every member (a device in
    a session: `DeviceClient` enters and leaves around each) has asked, or `gather_s` after the latest request: a member that the
    server did not plan this round costs that wait, no more. In a run without faults every live
    member is planned in every round, so each batch is every live member, whatever the timing. The first thread to find the batch
    due runs it (no thread of its own); the compute seconds each device reports are its batch's."""

    def __init__(self, lock: threading.RLock, gather_s: float = GATHER_S):
        self._lock = lock
        self._gather_s = gather_s
        self._cv = threading.Condition()
        self._members = 0
        self._pending: dict[object, tuple[DraftDevice, int, VerifyRule]] = {}
        self._done: dict[object, DraftResult] = {}
        self._running = False
        self._last = 0.0
        self.batch_sizes: list[int] = []  # devices per batch, for tests and benchmarks

    def enter(self) -> None:
        with self._cv:
            self._members += 1

    def leave(self) -> None:
        with self._cv:
            self._members -= 1
            self._cv.notify_all()

    def __call__(self, dev: DraftDevice, gamma: int, rule: VerifyRule = STANDARD) -> tuple[Draft, float]:
        ticket = object()
        with self._cv:
            self._pending[ticket] = (dev, gamma, rule)
            self._last = time.monotonic()
            self._cv.notify_all()
            while ticket not in self._done:
                if self._running or not self._pending:
                    self._cv.wait()
                    continue
                wait = self._gather_s - (time.monotonic() - self._last)
                if len(self._pending) >= self._members or wait <= 0:
                    self._run_batch()
                else:
                    self._cv.wait(wait)
            result = self._done.pop(ticket)
        if isinstance(result, BaseException):
            raise result
        return result

    def _run_batch(self) -> None:
        """Draft every pending request together; called holding the condition, released meanwhile."""
        batch, self._pending = self._pending, {}
        self._running = True
        self._cv.release()
        try:
            devices = {dev.device_id: dev for dev, _, _ in batch.values()}
            gammas = {dev.device_id: g for dev, g, _ in batch.values()}
            coupled = [dev.device_id for dev, _, rule in batch.values() if rule == COUPLED]
            t0 = time.perf_counter()
            try:
                with self._lock:
                    drafts = draft_all(devices, gammas, coupled)
                seconds = time.perf_counter() - t0
                results: dict[object, DraftResult] = {
                    t: (drafts[dev.device_id], seconds) for t, (dev, _, _) in batch.items()
                }
            except Exception as exc:  # each device's thread raises it (its session resumes)
                # said here once: the server only sees the devices' connections end
                log.warning("draft batch of %d devices failed: %s: %s", len(batch), type(exc).__name__, exc)
                results = dict.fromkeys(batch, exc)
        finally:
            self._cv.acquire()
            self._running = False
        self._done.update(results)
        self.batch_sizes.append(len(batch))
        self._cv.notify_all()


# What a pooled device holds (tests/runtime/net/test_pool_descriptors.py measures it): its DEALER's
# TCP connection and mailbox and its monitor's two ends, 4 descriptors on the pool's one ZeroMQ
# context (a context of each device's own cost 9); counted as 5, for a reconnect's new socket beside
# the one still closing.
FDS_PER_DEVICE = 5
# descriptors of the process besides its devices (interpreter, torch, the models, the context)
FDS_BASE = 64


def ensure_descriptors(devices: int) -> int:
    """Make room for ``devices`` pooled devices: raise the soft RLIMIT_NOFILE towards the hard
    limit as far as needed, and refuse up front, in one line naming the number needed, a pool
    that cannot fit (it used to lose devices to "Too many open files" mid-run). Returns the
    descriptors needed."""
    needed = FDS_BASE + FDS_PER_DEVICE * devices
    try:
        import resource  # noqa: PLC0415  (POSIX only: guarded)
    except ImportError:  # not a POSIX host: nothing to check
        return needed
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < needed:
        raise ConfigError(
            f"devices: a pool of {devices} devices needs about {needed} file descriptors "
            f"({FDS_PER_DEVICE} per device + {FDS_BASE}); this process may open {soft} (ulimit -n, hard limit "
            f"{'unlimited' if hard == resource.RLIM_INFINITY else hard}): raise it or split the pool"
        )
    return needed


def limit_malloc_arenas(arenas: int = 2) -> None:
    """Cap glibc's malloc arenas for this process (no-op elsewhere). glibc gives threads that
    allocate arenas of their own (up to 8 per core) and keeps what is freed in each; the batch runs
    on whichever device thread found it due, so the drafts' tensors landed in a dozen arenas:
    peak ΣPSS 8.2 GB against 5.6 GB with two (SmolLM2-135M, K = 20, bench_pool.py)."""
    try:
        import ctypes  # noqa: PLC0415  (glibc only: guarded)

        ctypes.CDLL("libc.so.6").mallopt(-8, arenas)  # M_ARENA_MAX
    except (OSError, AttributeError):
        pass


@dataclass(frozen=True)
class PoolDevice:
    """One device of a pool: its id, prompt, draft and (tests only) fault."""

    device_id: int
    prompt: str | tuple[int, ...]  # text, or token ids as they are
    draft: str | None = None  # None: the pair's default draft
    fault: str | None = None


@dataclass
class JobError:
    """A pooled device that ended with an error instead of an outcome (refused, server gone)."""

    device_id: int
    error: str

    def to_dict(self) -> dict[str, Any]:
        return {"device_id": self.device_id, "error": self.error}


def _device_keys(keys: str | os.PathLike | dict | None, device_id: int):
    """Device `device_id`'s keys: keys[device_id] from a dict; a folder as every command reads it
    (`resolve_credentials`: KEYS/device-N, or KEYS itself)."""
    if keys is None or isinstance(keys, dict):
        return None if keys is None else keys.get(device_id)
    return keys


class DevicePool:
    """Devices of one pair in one process. `slots`: each slot runs its devices one after another
    (steady-state jobs, as the launcher's queues: the next starts when the previous finished);
    most pools have one device per slot. `run()` blocks until every slot is done."""

    def __init__(
        self,
        server: str,
        pair: str | LoadedPair,
        slots: Sequence[Sequence[PoolDevice]],
        *,
        secret: str | bytes | None = None,
        keys: str | os.PathLike | dict | None = None,
        resume: bool = True,
        reconnects: int = 5,
        server_timeout_s: float = 120.0,
        connect_timeout_s: float | None = None,
        gather_s: float = GATHER_S,
        on_job: Callable[[dict], None] | None = None,
        on_event: Callable[[dict], None] | None = None,
        draft_models: dict[str, BatchedLM] | None = None,
    ):
        self.server = normalise_endpoint(server)
        self.slots = [list(s) for s in slots if s]
        ids = [d.device_id for s in self.slots for d in s]
        if not ids:
            raise ConfigError("devices: a pool needs at least one device")
        if len(set(ids)) != len(ids):
            raise ConfigError("devices: an id appears twice in the pool")
        ensure_descriptors(len(self.slots))  # before any model loads: one line if the pool cannot fit
        # every device's credentials first: a missing key fails before any model loads
        self._credentials = {d: resolve_credentials(_device_keys(keys, d), secret, d) for d in ids}
        if isinstance(pair, LoadedPair):
            self.pair = pair
        else:
            self.pair = resolve_pair(pair)
        names = {d.device_id: d.draft or self.pair.default_draft for s in self.slots for d in s}
        self.pair.check_drafts(sorted(set(names.values())), "draft")
        self._draft_of = names
        self._options: dict[str, Any] = dict(
            resume=resume,
            reconnects=reconnects,
            server_timeout_s=server_timeout_s,
            connect_timeout_s=connect_timeout_s,
            on_event=on_event,
        )
        self.on_job = on_job
        self.lock = threading.RLock()
        # loading a draft and the tokenizer (a Rust tokenizer refuses concurrent calls) are not
        # for several slot threads at once
        self._setup = threading.Lock()
        self.batcher = DraftBatcher(self.lock, gather_s)
        self._shared: dict[str, BatchedLM] = dict(draft_models or {})  # else loaded from the pair
        self._clients: dict[int, DeviceClient] = {}
        self._stop = threading.Event()
        self._zmq: Any = None  # the devices' one ZeroMQ context (`shared_context`), while run() runs

    def _draft_model(self, name: str) -> BatchedLM:
        if name not in self._shared:
            from multispin.models.hf import draft_batched

            pad_id = getattr(self.pair.tokenizer, "pad_token_id", None) or 0
            self._shared[name] = draft_batched(self.pair, name, pad_id)
        return self._shared[name]

    def client(self, dev: PoolDevice) -> tuple[DeviceClient, PooledSequence]:
        """Device `dev` as a lone device would be, but drafting on the pool's shared model."""

        name = self._draft_of[dev.device_id]
        keys, secret = self._credentials[dev.device_id]
        with self._setup:
            lm = PooledSequence(self._draft_model(name), dev.device_id, self.lock)
            ids = encode_prompt(self.pair, dev.prompt) if isinstance(dev.prompt, str) else list(dev.prompt)
        client = DeviceClient(
            self.server,
            dev.device_id,
            secret,
            lm,
            ids,
            keys=keys,
            pair_name=self.pair.name,
            draft_name=name,
            fault=dev.fault,
            drafter=self.batcher,
            context=self._zmq,
            **self._options,
        )
        return client, lm

    def stop(self) -> None:
        """Every device leaves at its next message boundary."""
        self._stop.set()
        for c in list(self._clients.values()):
            c.stop()

    def _run_slot(self, slot: list[PoolDevice], results: list) -> None:
        for dev in slot:
            if self._stop.is_set():
                return
            lm = None
            try:
                client, lm = self.client(dev)
                self._clients[dev.device_id] = client
                outcome: DeviceOutcome | JobError = client.run()
            except Exception as exc:
                outcome = JobError(dev.device_id, f"{type(exc).__name__}: {exc}")
            finally:
                if lm is not None:
                    lm.close()
            if isinstance(outcome, DeviceOutcome) and self.pair.tokenizer is not None:
                with self._setup:
                    outcome.text = self.pair.tokenizer.decode(outcome.generated, skip_special_tokens=True)
            results.append(outcome)
            if self.on_job is not None:
                self.on_job(outcome.to_dict())
            if isinstance(outcome, JobError) or not outcome.finished:
                return

    def run(self) -> list[DeviceOutcome | JobError]:
        """Run every slot on a thread of its own; each device's outcome (or error), slot by slot."""
        limit_malloc_arenas()  # before the slot threads allocate anything
        self._zmq = shared_context(len(self.slots))
        per_slot: list[list] = [[] for _ in self.slots]
        threads = [
            threading.Thread(
                target=self._run_slot, args=(slot, per_slot[i]), daemon=True, name=f"multispin-pool-{slot[0].device_id}"
            )
            for i, slot in enumerate(self.slots)
        ]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.5)
        except KeyboardInterrupt as exc:
            raise Interrupted.after(
                exc, "interrupted: the pool's devices stopped", self._stopped(threads, per_slot)
            ) from None
        self._zmq.term()  # every device closed its sockets when its thread ended
        return [o for outcomes in per_slot for o in outcomes]

    def _stopped(self, threads: list[threading.Thread], per_slot: list[list]) -> list[DeviceOutcome | JobError]:
        """Every device's outcome after a stop: what the slots returned within STOP_JOIN_S (each
        device leaves at its next message boundary, within a poll), and for a device still busy
        (mid-draft) its partial text as it holds it; the server's record of each goes on."""
        self.stop()
        deadline = time.monotonic() + STOP_JOIN_S
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        outcomes = [o for slot in per_slot for o in slot]
        done = {o.device_id for o in outcomes}
        for d, client in list(self._clients.items()):
            if d not in done:
                outcome = client._outcome(False, "interrupted")
                if self.pair.tokenizer is not None and self._setup.acquire(timeout=1.0):
                    try:
                        outcome.text = self.pair.tokenizer.decode(outcome.generated, skip_special_tokens=True)
                    finally:
                        self._setup.release()
                outcomes.append(outcome)
        return sorted(outcomes, key=lambda o: o.device_id)


def run_pool(
    server: str,
    device_ids: Sequence[int],
    pair: str | LoadedPair,
    prompts: Sequence[str],
    *,
    drafts: Sequence[str] | None = None,
    **options: Any,
) -> list[DeviceOutcome | JobError]:
    """A pool of `device_ids`, one device per slot; prompts and drafts cycled over the devices."""
    if not prompts:
        raise ConfigError("prompt: a pool needs at least one prompt")
    devs = [
        [PoolDevice(d, prompts[i % len(prompts)], drafts[i % len(drafts)] if drafts else None)]
        for i, d in enumerate(device_ids)
    ]
    return DevicePool(server, pair, devs, **options).run()


class PoolActor:
    """A pool as a Ray actor's body: ``ray.remote(PoolActor).remote(server, ids, pair, prompts)``
    (or `ray_pool_actor`), then ``actor.run.remote()``; the outcomes come back as dicts. The pair
    is loaded where the actor runs, by name: models do not travel."""

    def __init__(self, server: str, device_ids: Sequence[int], pair: str, prompts: Sequence[str], **options: Any):
        self._args = (server, list(device_ids), pair, list(prompts))
        self._options = options

    def run(self) -> list[dict]:
        server, ids, pair, prompts = self._args
        return [o.to_dict() for o in run_pool(server, ids, pair, prompts, **self._options)]


def ray_pool_actor(num_cpus: float = 1.0, **actor_options: Any):
    """`PoolActor` as a Ray actor class (Ray is optional: ``pip install 'multispin[cluster]'``)."""
    try:
        import ray
    except ImportError:
        raise ConfigError("ray: not installed; install the cluster extra (pip install 'multispin[cluster]')") from None
    return ray.remote(num_cpus=num_cpus, **actor_options)(PoolActor)


__all__ = [
    "DevicePool",
    "DraftBatcher",
    "JobError",
    "PoolActor",
    "PoolDevice",
    "PooledSequence",
    "parse_device_ids",
    "ray_pool_actor",
    "run_pool",
]
