"""The local testbed launcher: one `EdgeServer` (a thread of this process) and K devices on
127.0.0.1, as ``python -m multispin device`` subprocesses, forked processes, threads, or one
forked device pool (`multispin.runtime.net.pool`: every device in one process, drafting in
batched forwards); returns every device's tokens next to the server's records (`TestbedSummary`)."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from multispin.errors import ConfigError, ProtocolError
from multispin.lifeline import exit_with_parent
from multispin.models.base import LoadedPair
from multispin.models.prompts import default_prompts  # the built-in set ships with the package
from multispin.models.registry import resolve_pair
from multispin.runtime.net.device_job import job_description, run_jobs, write_result
from multispin.runtime.net.pool import DevicePool, PoolDevice
from multispin.runtime.net.server import EdgeServer
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.round.engine import RoundOutcome, RoundPolicy
from multispin.runtime.security.auth import resolve_secret
from multispin.runtime.security.keys import create_keyring
from multispin.runtime.wire.records import RoundEvent, ServerSummary, TestbedSummary

DeviceRunner = Literal["subprocess", "fork", "thread", "pool"]
DeviceProcess = subprocess.Popen | multiprocessing.process.BaseProcess  # a device's process, by runner
POOL_HANDLE = -1  # the pool runner's one handle (a forked process hosting every device)
_POOL_OPTIONS = ("resume", "reconnects", "server_timeout_s")  # device options a pool passes on
# the device processes of every LocalTestbed of this process, so that a hard stop (a second
# Ctrl-C, multispin.commands._interrupt) leaves none behind
_LIVE_DEVICES: weakref.WeakSet[DeviceProcess] = weakref.WeakSet()


def kill_device_processes() -> None:
    """Kill every device process a LocalTestbed of this process started (a hard stop)."""
    for proc in list(_LIVE_DEVICES):
        try:
            proc.kill()
        except Exception:
            pass


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _resolve_pair(pair: str | LoadedPair) -> LoadedPair:
    if isinstance(pair, LoadedPair):
        return pair

    return resolve_pair(pair)


@dataclass
class _DeviceHandle:
    device_id: int
    runner: str
    result_path: Path
    proc: DeviceProcess | None = None
    thread: threading.Thread | None = None
    client: Any = None  # DeviceClient (thread runner)
    outcome: dict | None = None

    def alive(self) -> bool:
        if self.thread is not None:
            return self.thread.is_alive()
        if isinstance(self.proc, subprocess.Popen):
            return self.proc.poll() is None
        return self.proc is not None and self.proc.is_alive()

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def join(self, timeout: float) -> None:
        if self.thread is not None:
            self.thread.join(timeout)
        elif isinstance(self.proc, subprocess.Popen):
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        elif self.proc is not None:
            self.proc.join(timeout)

    def kill(self) -> None:
        if self.thread is not None and self.client is not None:
            self.client.stop()
        elif self.proc is not None and self.alive():
            self.proc.kill()


def _remove_in_background(folder: Path) -> None:
    """Delete ``folder`` in a process of its own, which outlives this one (a steady-state run's
    key folder holds a key pair per job: thousands of files, seconds to delete on a busy disk)."""
    try:
        subprocess.Popen(
            ["rm", "-rf", str(folder)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)


def _fork_pool_main(
    server: str, pair: LoadedPair, slots: list, credentials: dict, options: dict, result_path: str, threads: int
) -> None:
    """Body of the forked pool process: every device's jobs, each outcome written as it ends (the
    launcher may end the process once the server stopped, as it ends a forked device)."""
    exit_with_parent()  # a killed launcher leaves no device process behind
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    path, done, lock = Path(result_path), [], threading.Lock()

    def on_job(outcome: dict) -> None:
        with lock:
            done.append(outcome)
            write_result(path, {"jobs": list(done)})

    code = 0
    try:
        import torch

        torch.set_num_threads(threads)

        DevicePool(server, pair, slots, on_job=on_job, **credentials, **options).run()
        payload: dict[str, Any] = {"jobs": done}
    except BaseException as exc:
        payload, code = {"jobs": done, "error": f"{type(exc).__name__}: {exc}"}, 1
    write_result(path, payload)
    os._exit(code)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _fork_device_main(jobs: Sequence[dict], result_path: str, threads: int) -> None:
    """Body of a forked device process (the pair is inherited from the parent). A terminal's
    Ctrl-C reaches the whole process group: the parent stops the session (the server says BYE),
    so the device ignores SIGINT instead of dying mid-frame."""
    exit_with_parent()  # a killed launcher leaves no device process behind
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler: a plain stop
    code = 0
    try:
        import torch

        torch.set_num_threads(threads)
        payload = run_jobs(jobs, Path(result_path))
    except BaseException as exc:  # report, then exit non-zero
        payload, code = {"error": f"{type(exc).__name__}: {exc}"}, 1
    write_result(Path(result_path), payload)
    os._exit(code)


def device_threads(runner: DeviceRunner, threads: int | None) -> int:
    """torch intra-op threads of each device process: as asked, else 1 for a process per device (K
    of them share the host's cores) and, for a pool, this process's own (torch's default, or
    `--threads`): the pool's devices draft in one batched forward while the server waits for
    their drafts, and the server verifies while they wait for its verdicts, so the two take turns
    on the cores. Measured on the 24-round K = 20 demo on 2 idle cores: 7 min 01 s at one thread,
    6 min 28 s at two (the CPU seconds rise 13%: the idle side's threads spin a while)."""
    if threads is not None:
        return threads
    if runner != "pool":
        return 1
    import torch

    return torch.get_num_threads()


@dataclass
class DeviceSetup:
    """The devices of a local testbed: how many, what each drafts with and on, and how they run.

    Drafts and prompts are cycled over the devices (defaults: the pair's drafts, the built-in
    prompts). Steady-state runs give each device a queue of prompts instead (`prompt_queues`; fork,
    thread and pool runners): device k's j-th prompt is a job of its own, device id k + K·j, started
    as soon as job j − 1 ends. `options` go to every `DeviceClient` (resume, reconnects,
    server_timeout_s); `faults` inject one fault into a device's first session (tests)."""

    count: int = 4
    drafts: Sequence[str] | None = None
    prompts: Sequence[str] | None = None
    prompt_queues: Sequence[Sequence[str]] | None = None
    runner: DeviceRunner = "subprocess"
    threads: int | None = None  # torch intra-op threads per device process (`device_threads`)
    faults: Mapping[int, str] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class ServerHooks:
    """What the caller sees of the server's run: `on_round` gets each round's `RoundEvent`
    (records, timings, bits, drops), `before_commit` each round's `RoundOutcome` (with its cost)
    once it is durable and before its COMMITs go out, `on_event` every log record."""

    on_round: Callable[[RoundEvent], None] | None = None
    before_commit: Callable[[RoundOutcome], None] | None = None
    on_event: Callable[[dict], None] | None = None


class LocalTestbed:
    """One `EdgeServer` (a thread of this process, holding the policy and the hooks) and K device
    processes/threads on 127.0.0.1. `start()`, optionally kill/restart devices, `wait()`.

    `server`: the server's settings (its address, the devices it expects and the job slots follow
    from `devices` and are set here); `policy`: the `RoundPolicy` (the optimiser-backed planner of
    `multispin testbed` plugs in there; default: the server's). Encrypted with throw-away keys
    unless a `secret` is given or `insecure` asked for. In a steady-state run the server waits for
    each finished job's successor before the next round (`job_slots`), so every round runs every
    device while its queue lasts."""

    def __init__(
        self,
        pair: str | LoadedPair = "tiny",
        server: ServerConfig | None = None,
        devices: DeviceSetup | None = None,
        *,
        policy: RoundPolicy | None = None,
        hooks: ServerHooks | None = None,
        secret: str | bytes | None = None,
        insecure: bool = False,
        log_path: str | Path | None = None,
        journal: str | Path | None = None,
        start_timeout_s: float | None = None,
    ):
        setup = devices or DeviceSetup()
        hooks = hooks or ServerHooks()
        settings = server or ServerConfig.make()
        num_devices = setup.count
        if setup.runner not in ("subprocess", "fork", "thread", "pool"):
            raise ConfigError(f"devices.runner: must be subprocess, fork, thread or pool (got {setup.runner!r})")
        if num_devices < 1:
            raise ConfigError(f"devices.count: must be >= 1 (got {num_devices})")
        self.pair = _resolve_pair(pair)
        self.num_jobs = self._check_queues(setup.prompt_queues, setup.prompts, num_devices, setup.runner)
        ids = num_devices * self.num_jobs  # job j of device k has id k + K·j
        self._tmp = Path(tempfile.mkdtemp(prefix="multispin-testbed-"))
        server_keys = self._make_security(secret, insecure, ids)
        self.num_devices = num_devices
        # the server thread's start (bind, warm-up): generous, and growing with the devices it
        # expects, so that a loaded host does not fail a healthy run; a dead server fails at once
        self.start_timeout_s = float(
            start_timeout_s or os.environ.get("MULTISPIN_SERVER_START_TIMEOUT_S") or 120.0 + 5.0 * num_devices
        )
        self.runner: DeviceRunner = setup.runner
        self.threads = device_threads(setup.runner, setup.threads)
        self.faults = dict(setup.faults)
        self.device_options = dict(setup.options)
        self.log_path = str(log_path) if log_path else None
        self.drafts, self.prompts = self._assign_jobs(setup, settings.seed)
        self.port = free_port() if setup.runner in ("fork", "pool") else 0
        self.server = EdgeServer(
            self._server_config(settings, ids),
            self.pair,
            self.secret,
            keys=server_keys,
            journal=journal,
            policy=policy,
            log_path=log_path,
            on_round=hooks.on_round,
            before_commit=hooks.before_commit,
            on_event=hooks.on_event,
        )
        self._init_run_state()

    def _init_run_state(self) -> None:
        """What `start`, `wait` and the device runners fill in: the device handles, the server
        thread and its outcome."""
        self._handles: dict[int, _DeviceHandle] = {}
        self._retired: list[_DeviceHandle] = []
        self._server_thread: threading.Thread | None = None
        # wait() waits on this, not on join(): a join that Ctrl-C interrupts can leave the thread
        # reported as stopped while it still runs (CPython before 3.13), and the summary unset
        self._server_done = threading.Event()
        self._summary: ServerSummary | None = None
        self._server_error: BaseException | None = None
        self._started = 0.0
        self._attempt = 0
        self._stopped = False

    def _assign_jobs(self, setup: DeviceSetup, seed: int) -> tuple[dict[int, str], dict[int, str]]:
        """The draft and the prompt of every job, keyed by device id (job j of device k is id
        k + K·j): drafts cycled over the devices, prompts from their queues, else cycled over the
        devices (default: the built-in set)."""
        num_devices = setup.count
        names = self.pair.check_drafts(list(setup.drafts or self.pair.drafts))
        prompts = setup.prompts
        if not prompts and not setup.prompt_queues:
            prompts = default_prompts(num_devices, seed)
        # prompts is set above whenever there are no queues
        queues = setup.prompt_queues or [[prompts[k % len(prompts)]] for k in range(num_devices)]  # type: ignore[index,arg-type]
        jobs = [(k, j, k + num_devices * j) for k in range(num_devices) for j in range(self.num_jobs)]
        return {d: names[k % len(names)] for k, _, d in jobs}, {d: queues[k][j] for k, j, d in jobs}

    def _server_config(self, settings: ServerConfig, ids: int) -> ServerConfig:
        """The caller's server settings on this host's port, expecting the devices (and, in a
        steady-state run, one job slot per device) and keeping each device's round records."""
        return ServerConfig.make(
            **{
                **settings.model_dump(),
                "host": "127.0.0.1",
                "port": self.port,
                "expected_devices": self.num_devices,
                "max_devices": ids,
                "job_slots": self.num_devices if self.num_jobs > 1 else None,
                "history": True,
            }
        )

    @staticmethod
    def _check_queues(
        queues: Sequence[Sequence[str]] | None, prompts: Sequence[str] | None, num_devices: int, runner: str
    ) -> int:
        """Jobs per device: 1 without queues, else the queues' common length (validated)."""
        if queues is None:
            return 1
        if prompts:
            raise ConfigError("devices.prompt_queues: give prompts or prompt_queues, not both")
        if len(queues) != num_devices or not all(queues):
            raise ConfigError(f"devices.prompt_queues: need one non-empty queue per device ({num_devices})")
        lengths = {len(q) for q in queues}
        if len(lengths) != 1:
            raise ConfigError(
                f"devices.prompt_queues: every device's queue must have the same length (got {sorted(lengths)})"
            )
        jobs = lengths.pop()
        if jobs > 1 and runner == "subprocess":
            raise ConfigError("devices.prompt_queues: several jobs per device need the fork or thread runner")
        return jobs

    def _make_security(self, secret: str | bytes | None, insecure: bool, num_devices: int) -> Path | None:
        """Throw-away per-device keys (encrypted, the default; returns the server's key folder), or
        plaintext with a shared secret when one is given or `insecure` asks for it."""
        self.insecure = insecure or secret is not None
        self.secret = resolve_secret(secret if secret is not None else os.urandom(24).hex()) if self.insecure else None
        self.device_keys: dict[int, Path] = {}
        if self.insecure:
            return None
        server_keys, self.device_keys = create_keyring(self._tmp / "keys", range(num_devices))
        return server_keys

    @property
    def endpoint(self) -> str:
        if self.server.endpoint is None:
            return f"tcp://127.0.0.1:{self.port}"
        return self.server.endpoint

    def start(self) -> LocalTestbed:
        self._started = time.perf_counter()
        if self.runner == "pool":  # forked before any thread of ours exists, as below
            self._start_pool()
            self._start_server()
        elif self.runner == "fork":
            # Fork before any thread of ours exists: a forked child inherits no locks in use.
            for k in range(self.num_devices):
                self.start_device(k)
            self._start_server()
        else:
            self._start_server()
            for k in range(self.num_devices):
                self.start_device(k)
        return self

    def _start_server(self) -> None:
        def body() -> None:
            try:
                self._summary = self.server.run()
            except BaseException as exc:  # surfaced by wait()
                self._server_error = exc
                self.server.ready.set()
            finally:
                self._server_done.set()

        self._server_thread = threading.Thread(target=body, name="multispin-server", daemon=True)
        self._server_thread.start()
        # short waits: a server thread that died is reported at once, and a Ctrl-C acts at once
        deadline = time.monotonic() + self.start_timeout_s
        while not self.server.ready.wait(0.2):
            if self._server_done.is_set():
                break
            if time.monotonic() > deadline:
                raise ProtocolError(
                    f"server: did not start within {self.start_timeout_s:g} s "
                    "(start_timeout_s; a loaded host may need more)"
                )
        if self._server_error is not None:
            raise self._server_error

    def device_kwargs(self, k: int, fault: str | None = None) -> dict[str, Any]:
        opts = dict(
            server=self.endpoint,
            device_id=k,
            secret=self.secret,
            keys=self.device_keys.get(k),
            pair=self.pair,
            draft=self.drafts[k],
            prompt=self.prompts[k],
            fault=fault,
        )
        opts.update(self.device_options)
        return opts

    def _start_pool(self) -> _DeviceHandle:
        """Every device in one forked pool process: device k's jobs are the pool's slot k."""

        self._attempt += 1
        handle = _DeviceHandle(POOL_HANDLE, "pool", self._tmp / f"pool-{self._attempt}.json")
        slots = [
            [
                PoolDevice(d, self.prompts[d], self.drafts[d], self.faults.pop(k, None) if j == 0 else None)
                for j in range(self.num_jobs)
                for d in [k + self.num_devices * j]
            ]
            for k in range(self.num_devices)
        ]
        credentials = {"secret": self.secret} if self.insecure else {"keys": dict(self.device_keys)}
        options = {key: self.device_options[key] for key in _POOL_OPTIONS if key in self.device_options}
        handle.proc = multiprocessing.get_context("fork").Process(
            target=_fork_pool_main,
            name="multispin-pool",
            daemon=True,
            args=(self.endpoint, self.pair, slots, credentials, options, str(handle.result_path), self.threads),
        )
        handle.proc.start()
        _LIVE_DEVICES.add(handle.proc)
        self._handles[POOL_HANDLE] = handle
        return handle

    def start_device(self, k: int, runner: DeviceRunner | None = None, fault: str | None = None) -> _DeviceHandle:
        """Start (or restart, resuming from the server's record) device k."""
        runner = runner or self.runner
        if runner == "pool":  # a pooled device restarts as a forked one: the pool process runs on
            runner = "fork"
        fault = fault if fault is not None else (self.faults.pop(k, None))
        self._attempt += 1
        result = self._tmp / f"device-{k}-{self._attempt}.json"
        old = self._handles.get(k)
        if old is not None:
            self._retired.append(old)
        handle = _DeviceHandle(k, runner, result)
        jobs = [self.device_kwargs(k + self.num_devices * j, fault if j == 0 else None) for j in range(self.num_jobs)]
        if runner == "thread":

            def body() -> None:
                try:
                    handle.outcome = run_jobs(jobs, on_client=lambda c: setattr(handle, "client", c))
                except BaseException as exc:
                    handle.outcome = {"error": f"{type(exc).__name__}: {exc}"}

            handle.thread = threading.Thread(target=body, name=f"multispin-device-{k}", daemon=True)
            handle.thread.start()
        elif runner == "fork":
            ctx = multiprocessing.get_context("fork")
            handle.proc = ctx.Process(
                target=_fork_device_main,
                args=(jobs, str(result), self.threads),
                name=f"multispin-device-{k}",
                daemon=True,
            )
            handle.proc.start()
            _LIVE_DEVICES.add(handle.proc)
        else:  # a fresh interpreter that reads its jobs from a file (the secret stays in the environment)
            job_file = self._tmp / f"device-{k}-{self._attempt}.job.json"
            job_file.write_text(json.dumps(job_description(self.pair.name, self.threads, result, jobs)))
            cmd = [sys.executable, "-m", "multispin.runtime.net.device_job", str(job_file)]
            env = dict(os.environ)
            env.pop("MULTISPIN_SECRET", None)
            if self.insecure:
                assert self.secret is not None  # set for every --insecure run
                env["MULTISPIN_SECRET"] = self.secret.decode()  # never in argv or on disk
            # SIGINT ignored, as in a forked device: a terminal's Ctrl-C is the parent's to handle
            handle.proc = subprocess.Popen(
                cmd,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=open(self._tmp / f"device-{k}-{self._attempt}.err", "w"),
                preexec_fn=_ignore_sigint,
            )
            _LIVE_DEVICES.add(handle.proc)
        self._handles[k] = handle
        return handle

    def stop(self) -> None:
        self._stopped = True
        self.server.request_stop("stop")

    def wait(self, timeout_s: float = 600.0) -> TestbedSummary:
        deadline = time.monotonic() + timeout_s
        assert self._server_thread is not None, "start() first"
        if not self._server_done.wait(max(0.0, deadline - time.monotonic())):
            self.server.request_stop("timeout")
            self._server_done.wait(30)
        # a steady-state runner still alive is at a job the stopped server will never admit
        longest = 30.0 if self.num_jobs == 1 else 1.0
        for h in list(self._handles.values()) + self._retired:
            h.join(max(1.0, min(longest, deadline - time.monotonic())))
            if h.alive():
                h.kill()
                h.join(5)
        if self._server_error is not None:
            raise self._server_error
        assert self._summary is not None
        devices: dict[int, dict] = {}
        for h in self._retired + list(self._handles.values()):
            out = h.outcome
            if out is None and h.result_path.exists():
                try:
                    out = json.loads(h.result_path.read_text())
                except ValueError:
                    out = None
            if out is not None and "jobs" in out:  # thread, fork and pool runners: one outcome per job
                if "error" in out:  # the pool process itself failed
                    devices[h.device_id] = {"device_id": h.device_id, "error": out["error"]}
                for job in out["jobs"]:
                    # a job the stopped server never admitted is no result; an error always is one
                    if job["device_id"] in self._summary.devices or "error" in job:
                        devices[job["device_id"]] = job
            elif out is not None and "error" not in out:
                devices[h.device_id] = out
            elif out is not None:
                devices.setdefault(h.device_id, out)
        consistent = all(
            "error" not in out and d in self._summary.devices and out["tokens"] == self._summary.devices[d].tokens
            for d, out in devices.items()
        ) and set(devices) >= {d for d, r in self._summary.devices.items() if r.finished}
        if self._stopped:  # Ctrl-C: the stop must not wait on deleting thousands of throw-away keys
            _remove_in_background(self._tmp)
        else:
            shutil.rmtree(self._tmp, ignore_errors=True)
        return TestbedSummary(self._summary, devices, consistent, time.perf_counter() - self._started, self.log_path)


def run_local_testbed(
    pair: str | LoadedPair = "tiny",
    server: ServerConfig | None = None,
    devices: DeviceSetup | None = None,
    *,
    timeout_s: float = 600.0,
    **options: Any,
) -> TestbedSummary:
    """Start a server and its devices on 127.0.0.1, run until every device is done (or the
    config's `rounds`), and return each device's tokens next to the server's records. `options`:
    `LocalTestbed`'s keyword arguments (policy, hooks, secret, log_path, …)."""
    bed = LocalTestbed(pair, server, devices, **options)
    bed.start()
    return bed.wait(timeout_s)


__all__ = ["DeviceRunner", "DeviceSetup", "LocalTestbed", "ServerHooks", "free_port", "run_local_testbed"]
