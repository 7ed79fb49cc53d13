"""The edge server loop: one target model, K devices, and the order of each round.

`EdgeServer` owns the clock and the order of a round, and drives the `RoundEngine` (the round's
token math and bookkeeping, shared with the in-process loop): PLAN to every active device, DRAFTs
within the round timeout, one batched verify, VERDICTs to the rejected devices, UL/DL
corrections, then the round's commit: durable in the journal first, COMMITs after, each carrying
the device's PLAN of the next round when the server already knows it (`_plan_next`), so a device
starts drafting on the message that ends its round. Faults stay local: a malformed message, a
stall or a crash drops that one session with a logged reason and the round completes for the
rest; a device that reconnects resumes from the server's record, so no token is lost or
duplicated, and a server restarted on its journal resumes every session (`server_recovery`).

What each message does to a connection is the sans-I/O `ServerProtocol`'s (`plan`, `verdict`,
`commit`, `bye`); waiting for a round's DRAFTs and corrections, and skipping stragglers, is
`RoundMessages`' (`round_messages`); moving frames, cutting peers and logging what they did is
the `ServerLink`'s (`server_link`), and the allowed keys are watched by
`multispin.runtime.security.key_watch`. With per-device keys (the default) the transport is a
CurveZMQ server that admits only allowed keys, and the protocol binds each HELLO's device id to
its sender's key; `secret` alone is the plaintext debugging mode.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from multispin.errors import ConfigError
from multispin.models.base import BatchedLM, LoadedPair
from multispin.runtime.net.jsonlog import JsonlLog
from multispin.runtime.net.round_messages import RoundMessages
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.net.server_link import POLL_SLICE_S, ServerLink
from multispin.runtime.net.server_recovery import journal_policy_name, recover_sessions, session_settings
from multispin.runtime.net.server_summary import device_records, server_summary
from multispin.runtime.net.transport import ServerTransport
from multispin.runtime.round.engine import RoundEngine, RoundOutcome, RoundPolicy
from multispin.runtime.round.local import fixed_policy
from multispin.runtime.round.roles import VerifierServer
from multispin.runtime.security.auth import resolve_secret
from multispin.runtime.security.key_watch import NO_DESCRIPTORS, KeyWatch
from multispin.runtime.security.keys import AllowedKeys, ServerKeys, load_server_keys
from multispin.runtime.security.limits import RefusalLog
from multispin.runtime.store.journal import DeviceRound, Journal, SessionRecord
from multispin.runtime.wire import messages as P
from multispin.runtime.wire.records import RoundEvent, ServerSummary
from multispin.runtime.wire.server_protocol import ConnState, ServerProtocol
from multispin.speculative.codecs import exactness_by_mode, make_codec
from multispin.system.payload import WirePayload

log = logging.getLogger("multispin.server")

OUT_OF_DESCRIPTORS = "out of file descriptors"


class EdgeServer:
    """Edge server process: target model, authentication, rounds, logs. Call `run()` (blocking)
    in the thread that owns it; `request_stop()` from anywhere (a signal handler, another
    thread) drains the current round and shuts down cleanly. `policy` chooses each round's γ and
    the rejected devices' modes (default: `fixed_policy()`, γ = 4 and a fair coin); `journal`:
    a path, or a Journal the caller opened (and so checked, or repaired) itself;
    `request_key_reload()` re-reads the allowed keys."""

    def __init__(
        self,
        config: ServerConfig,
        pair: LoadedPair,
        secret: str | bytes | None = None,
        *,
        keys: ServerKeys | str | Path | None = None,
        journal: str | Path | Journal | None = None,
        policy: RoundPolicy | None = None,
        log_path: str | Path | None = None,
        on_round: Callable[[RoundEvent], None] | None = None,
        before_commit: Callable[[RoundOutcome], None] | None = None,
        on_event: Callable[[dict], None] | None = None,
        target_lm: BatchedLM | None = None,
    ):
        self.config = config
        self.pair = pair
        self._load_keys(keys, secret)
        self._load_verifier(target_lm)
        self.policy: RoundPolicy = policy or fixed_policy(seed=config.seed)
        self.on_round = on_round
        # called with the round's outcome (its cost included) once the round is durable and the
        # policy observed it, before its COMMITs (and the next PLANs in them) go out: the
        # testbed's link emulation sleeps the round's airtime here, so that no device drafts the
        # next round during it
        self.before_commit = before_commit
        self._next: RoundOutcome | None = None  # the next round, planned at this one's commit
        self._next_sent = 0.0  # when the COMMITs carrying its PLANs went out: where its wall time starts
        self.log = JsonlLog(log_path, on_event)
        # draft deadlines missed and stragglers told to back off: what slow devices cost the others
        # (held_at_most_s: the deadlines waited out; the others' loss is at most that)
        self.stragglers: dict[str, float] = {"missed": 0, "backed_off": 0, "held_at_most_s": 0.0}
        self.ready = threading.Event()
        self.endpoint: str | None = None
        self._stop, self._stop_reason = threading.Event(), "signal"
        self._events: list[RoundEvent] = []
        self.proto = self._make_protocol()
        self.link = ServerLink(
            self.proto,
            self.log,
            handshake_timeout_s=config.handshake_timeout_s,
            refusal_log_interval_s=config.refusal_log_interval_s,
            keyed=self.keys is not None,
            silent_per_key=config.max_silent_per_key,
            housekeeping=self._watch_keys,
        )
        # The bits of every message of a round, from the codecs and the pair in use.
        self.wire = WirePayload.from_codecs(self.ul_codec, self.dl_codec, self.vocab_size, config.gamma_max)
        self.engine = RoundEngine(self.verifier, self.policy, config.max_new_tokens, self.eos_ids, self.wire)
        self._jobs_due: set[int] = set()  # successors of jobs that finished (job_slots), not joined yet
        self._open_journal(journal)

    def _load_keys(self, keys: ServerKeys | str | Path | None, secret: str | bytes | None) -> None:
        """The server's key pair and the folder of allowed device keys (watched for changes), or
        the shared secret of a plaintext run."""
        if keys is None and secret is None:
            raise ConfigError(
                "keys: the server needs its key folder (make it with `multispin keys "
                "server DIR`), or a shared secret for a plaintext --insecure run"
            )
        self.keys = keys if isinstance(keys, ServerKeys) or keys is None else load_server_keys(keys)
        self.allowed = AllowedKeys(self.keys.allowed_dir) if self.keys is not None else None
        self.key_watch = KeyWatch(self.allowed) if self.allowed is not None else None
        self._secret = resolve_secret(secret) if self.keys is None else None

    def _load_verifier(self, target_lm: BatchedLM | None) -> None:
        """The session's sampling, codecs and vocabulary, the verifier over the target model (the
        pair's, unless one is given) and the message limits they imply."""
        config, pair = self.config, self.pair
        self.sampling = config.sampling
        self.ul_codec, self.dl_codec = make_codec(config.ul_codec), make_codec(config.dl_codec)
        self.vocab_size = pair.vocab_size
        self.eos_ids = tuple(pair.eos_token_ids)
        if len(self.eos_ids) > P.MAX_EOS_IDS:
            raise ConfigError(f"pair.eos_token_ids: at most {P.MAX_EOS_IDS} (got {len(self.eos_ids)})")
        if target_lm is None:
            from multispin.models.hf import HFBatchedLM

            pad_id = getattr(pair.tokenizer, "pad_token_id", None) or 0
            target_lm = HFBatchedLM(pair.target, pair.vocab_size, pad_id)
        self.verifier = VerifierServer(
            target_lm, self.sampling, self.ul_codec, self.dl_codec, config.seed, gamma_max=config.gamma_max
        )
        self.limits = P.Limits.for_session(
            self.vocab_size,
            config.gamma_max,
            self.ul_codec,
            self.dl_codec,
            config.max_prompt_tokens,
            config.max_new_tokens,
        )

    def _open_journal(self, journal: str | Path | Journal | None) -> None:
        """The journal (none: nothing is durable), and the sessions restored from it: a restart
        continues every device whose session agrees with this server's settings."""
        self.journal: Journal | None = None
        self.recovered: list[int] = []  # devices restored from the journal at start
        if journal is None:
            return
        opened = journal if isinstance(journal, Journal) else Journal(journal)  # opened: checked
        ours = (self._session_params, self.ul_codec.name, self.dl_codec.name, self.config.seed)
        recovery = recover_sessions(opened, ours, self.verifier, self.engine, self.proto)
        self.journal, self.recovered = recovery.journal, recovery.devices

    def _make_protocol(self) -> ServerProtocol:
        cfg = self.config
        return ServerProtocol(
            self._secret,
            self.limits,
            self.verifier.records,
            self._open_device,
            cfg.welcome(self.pair.name, self.vocab_size, self.ul_codec.name, self.dl_codec.name, self.eos_ids),
            max_devices=cfg.max_devices,
            handshake_timeout_s=cfg.handshake_timeout_s,
            check_claim=self.key_watch.check_claim if self.key_watch is not None else None,
            connections=cfg.connection_limits(),
            history=cfg.history,
            max_replacements=cfg.max_replacements_per_min,
        )

    @property
    def _session_params(self) -> dict[str, Any]:
        """What every journal session must agree with for a restart to continue it exactly."""
        return session_settings(self.pair.name, self.config, self.policy)

    def _open_device(self, d: int, prompt: tuple[int, ...], peer: str) -> None:
        """A new device: its session is durable in the journal before its WELCOME goes out."""
        if self.journal is not None:
            self.journal.open_session(
                SessionRecord(
                    d,
                    peer,
                    prompt,
                    self._session_params,
                    self.ul_codec.name,
                    self.dl_codec.name,
                    self.config.seed,
                    self.round_idx,
                )
            )
        self.verifier.open(d, prompt)

    # ---------------------------------------------------------------- keys

    def request_key_reload(self) -> None:
        """Re-read the allowed-keys folder at the loop's next step (SIGHUP; any thread)."""
        if self.key_watch is not None:
            self.key_watch.request()

    def _watch_keys(self, now: float) -> None:
        """Reload the allowed keys on request or when the folder changed (`KeyWatch`): an added
        key is let in by the transport at once; a removed one's session ends before the next
        round (`_end_revoked_sessions`)."""
        change = self.key_watch.poll(now) if self.key_watch is not None else None
        if change is None:
            return
        if change.kind == NO_DESCRIPTORS:  # a flood's doing: counted with the refusals
            self.refusals.refused(OUT_OF_DESCRIPTORS, now, peer=change.message)
            return
        log.warning("%s", change.message)
        self.log.write(**change.record)

    def _end_revoked_sessions(self) -> None:
        """Between rounds: a session whose key is no longer allowed as its device ends (ERROR
        auth: the device does not retry; the transport would refuse its key anyway)."""
        if self.key_watch is None:
            return
        devices = self.proto.devices
        live = ((d, dev.conn.peer) for d, dev in sorted(devices.items()) if dev.conn is not None and dev.conn.alive)
        for d in self.key_watch.revoked(live):  # read only after a reload
            self.proto.drop(devices[d].conn, "auth", f"device {d}'s key is no longer allowed (revoked)")  # type: ignore[arg-type]
        self.link.flush()

    # ---------------------------------------------------------------- public

    def request_stop(self, reason: str = "signal") -> None:
        """Finish the current round, say BYE to every device, flush the log, return from run()."""
        self._stop_reason = reason
        self._stop.set()

    @property
    def records(self) -> dict[int, list[int]]:
        return self.verifier.records

    @property
    def round_idx(self) -> int:
        return self.proto.round_idx

    @property
    def transport(self) -> ServerTransport:
        return self.link.transport

    @property
    def refusals(self) -> RefusalLog:
        return self.link.refusals

    @property
    def transport_limit_bytes(self) -> int:
        return self.link.limit_bytes

    def run(self, on_ready: Callable[[str], None] | None = None) -> ServerSummary:
        """Bind, serve until done or stopped, shut down; ``on_ready(endpoint)`` once bound (a
        banner saying "waiting" is only true after the bind succeeded)."""
        started = time.perf_counter()
        stop_reason = "error"
        try:
            self.endpoint = self.transport.open(self.config.bind_endpoint, self.keys, self.allowed)
            if self.transport.fd_budget < self.proto.budget.limits.max_connections:
                log.info(
                    "the descriptor limit allows %d connections at once (fewer than max_connections %d)",
                    self.transport.fd_budget,
                    self.proto.budget.limits.max_connections,
                )
            if self.journal is not None and self.journal.repaired is not None:
                self.log.write("journal_repaired", **self.journal.repaired.to_dict())
            self.log.write(
                "start",
                endpoint=self.endpoint,
                pair=self.pair.name,
                vocab_size=self.vocab_size,
                config=self.config.model_dump(),
                limits=self.limits.table(),
                policy=journal_policy_name(self.policy),
                exactness=self._exactness(),
                security="curve" if self.keys else "insecure",
                journal=str(self.journal.path) if self.journal else None,
                recovered=self.recovered,
                next_round=self.round_idx,
            )
            self.ready.set()
            if on_ready is not None:
                on_ready(self.endpoint)
            stop_reason = self._serve()
        finally:
            self.ready.set()
            summary = self._shutdown(stop_reason, time.perf_counter() - started)
        return summary

    def _exactness(self) -> dict[str, str]:
        """Whether each mode's codec keeps the output law exactly the target's (docs/system-model.md §4)."""
        out = {}
        for mode, verdict in exactness_by_mode(self.ul_codec, self.dl_codec, self.sampling, self.vocab_size).items():
            out[mode] = ("exact: " if verdict.exact else "NOT exact: ") + verdict.reason
            if not verdict.exact:
                codec = self.ul_codec if mode == "ul" else self.dl_codec
                log.warning("%s codec %s is not exact here: %s", mode.upper(), codec.name, verdict.reason)
        return out

    # ---------------------------------------------------------------- main loop

    def _serve(self) -> str:
        cfg = self.config
        deadline = time.monotonic() + cfg.join_timeout_s

        def waiting() -> bool:  # for K devices, and for every recovered session to resume
            return len(self.proto.devices) < cfg.expected_devices or any(
                self.proto.devices[d].conn is None for d in self.recovered
            )

        while waiting() and not self._stop.is_set() and time.monotonic() < deadline:
            self.link.pump(POLL_SLICE_S)
        if self.recovered:
            back = [d for d in self.recovered if self.proto.devices[d].conn is not None]
            self.log.write("recovered", devices=self.recovered, resumed=back, round=self.round_idx)
        if len(self.proto.devices) < cfg.expected_devices and not self._stop.is_set():
            self.log.write("join_timeout", joined=sorted(self.proto.devices), expected=cfg.expected_devices)
            log.warning(
                "only %d of %d devices joined within %.0f s",
                len(self.proto.devices),
                cfg.expected_devices,
                cfg.join_timeout_s,
            )
            if not self.proto.devices:
                return "no devices"
        idle_since: float | None = None
        while True:
            if self._stop.is_set():
                return self._stop_reason
            if cfg.rounds is not None and self.round_idx >= cfg.rounds:
                return "rounds"
            self._await_next_jobs()
            self._end_revoked_sessions()
            if self._next is not None or self._active():
                idle_since = None
                self._round(self.round_idx)
                self.proto.round_idx += 1
                continue
            if self.proto.devices and all(d.finished for d in self.proto.devices.values()):
                return "done"
            now = time.monotonic()
            idle_since = idle_since or now
            if now - idle_since > cfg.idle_timeout_s:
                unfinished = sorted(d for d, dev in self.proto.devices.items() if not dev.finished)
                self.log.write("idle_timeout", waiting_for=unfinished)
                return "idle"
            self.link.pump(POLL_SLICE_S)

    def _await_next_jobs(self, timeout_s: float | None = None) -> None:
        """Steady state (`job_slots`): before the next round, wait until the next job of every device
        whose job finished has joined, so that each round runs every device that still has work and
        the rounds do not depend on how fast a process reconnects. (At shutdown too, so that a job
        that was about to start is told BYE instead of finding the server gone.)"""
        if not self._jobs_due:
            return
        cfg = self.config
        timeout_s = cfg.join_timeout_s if timeout_s is None else timeout_s

        def joined(d: int) -> bool:
            dev = self.proto.devices.get(d)
            return dev is not None and dev.conn is not None and dev.conn.state is ConnState.IDLE

        self.link.pump_until(
            lambda: self._stop.is_set() or all(joined(d) for d in self._jobs_due), time.monotonic() + timeout_s
        )
        late = sorted(d for d in self._jobs_due if not joined(d))
        if late:
            self.log.write("job_timeout", waiting_for=late, round=self.round_idx)
            log.warning("next job of %d device(s) did not join within %.0f s", len(late), timeout_s)
        self._jobs_due.clear()

    def _active(self) -> list[int]:
        return [
            d
            for d, dev in sorted(self.proto.devices.items())
            if dev.conn is not None and not dev.finished and dev.conn.state is ConnState.IDLE
        ]

    # ---------------------------------------------------------------- one round

    def _round(self, r: int) -> None:
        """The engine's steps, with drafts and corrections arriving as messages."""
        t0 = time.perf_counter()
        out, self._next = self._next, None
        if out is None:
            out = self.engine.plan(r, self._active())
        else:  # its devices have been drafting since its PLANs left: so has the round
            t0 = self._next_sent
        # a round planned at the last commit runs the devices it planned (one that joined since
        # waits for the next round); a planned device whose session ended since is dropped here
        active = list(out.gammas)
        conns = {d: self.proto.devices[d].conn for d in active if self.proto.devices[d].conn}
        io = RoundMessages(out, conns, self.link, self.engine, self.config, self.log, self.stragglers)  # type: ignore[arg-type]
        for d in active:
            if d not in io.conns:
                io.closed(d)
        for c in io.conns.values():
            if not self.proto.planned(c, r):  # a planned one was reset at the last round's end
                c.bytes_in = c.bytes_out = 0
        self.engine.verify(out, io.collect_drafts())
        io.collect_corrections(io.send_verdicts())
        self._commit_round(out, io)
        for d in active:
            if d not in out.records and d not in io.dropped and not io.conns[d].alive:
                io.closed(d)
        for d in set(io.dropped) | set(out.finished):
            self.verifier.release(d)
        slots = self.config.job_slots
        if slots:
            self._jobs_due.update(d + slots for d in out.finished if d + slots < self.config.max_devices)
        event = io.event(round_wall_s=time.perf_counter() - t0)
        if self.config.history:
            self._events.append(event)
        if self.log.active:  # a round's dict is most of a light round's bookkeeping: only if it goes somewhere
            self.log.write_record(event.to_dict())
        if self.on_round is not None:
            self.on_round(event)

    def _commit_round(self, out: RoundOutcome, io: RoundMessages) -> None:
        """Make the round durable in the journal, close it (the policy observes it), plan the
        next round where that is safe, then COMMIT (and BYE when done) to each device, with its
        next PLAN: no device ever holds a token that a restart could take back."""
        if self.journal is not None:
            self.journal.commit_round(
                out.round,
                {
                    d: DeviceRound(tuple(out.kept[d]), rec.draft_len, rec.mode, rec.payload_bits)
                    for d, rec in out.records.items()
                },
            )
        self.engine.close(out)
        if self.before_commit is not None:
            self.before_commit(out)
        self._next = self._plan_next(out)
        gammas = self._next.gammas if self._next is not None else {}
        coupled = self._next.coupled if self._next is not None else frozenset()
        for d in out.records:
            self.proto.commit(
                io.conns[d],
                out.round,
                out.kept[d],
                out.records[d],
                d in out.finished,
                gammas.get(d) if io.conns[d].alive else None,
                d in coupled,
            )
        self.link.flush()
        self._next_sent = time.perf_counter()

    def _plan_next(self, out: RoundOutcome) -> RoundOutcome | None:
        """Round r + 1 planned now, so that its PLANs ride in round r's COMMITs; None where the
        next round is not this one's continuation: a stop was asked for, r was the last round, or
        a steady-state job finished (the next round waits for its successor, `_await_next_jobs`).
        Planned now or at the next round's start, the policy sees the same outcomes in the same
        order (plan(r + 1) after observe(r)) and the budget clip the same records."""
        cfg, r = self.config, out.round
        if self._stop.is_set() or (cfg.rounds is not None and r + 1 >= cfg.rounds):
            return None
        if cfg.job_slots and out.finished:
            return None
        active = [d for d in self._active() if d not in out.finished]
        return self.engine.plan(r + 1, active) if active else None

    # ---------------------------------------------------------------- shutdown

    def _shutdown(self, stop_reason: str, wall_s: float) -> ServerSummary:
        """BYE to every device still connected, a short wait for their BYEs, then the summary."""
        try:
            if self.transport.bound and stop_reason == "rounds":
                self._await_next_jobs(timeout_s=min(self.config.join_timeout_s, 10.0))
        except Exception as exc:  # never lose the summary and the log over a goodbye
            log.warning("shutdown: %s", exc)
        self.proto.closing = True
        try:
            if self.transport.bound:
                for _d, dev in sorted(self.proto.devices.items()):
                    c = dev.conn
                    if c is not None and c.alive and c.state is not ConnState.AWAIT_BYE:
                        self.proto.bye(c, "done" if dev.finished else stop_reason)
                        self.link.flush()
                deadline = time.monotonic() + self.config.bye_timeout_s
                self.link.pump_until(
                    lambda: not any(c.state is ConnState.AWAIT_BYE for c in self.proto.conns.values()), deadline
                )
        except Exception as exc:  # never lose the summary and the log over a goodbye
            log.warning("shutdown: %s", exc)
        devices = device_records(self.proto.devices, self.verifier.records, self.log)
        self.link.flush_logs()
        summary = server_summary(
            self.log,
            rounds=self.round_idx,
            stop_reason=stop_reason,
            wall_s=wall_s,
            devices=devices,
            refused=self.link.refused,
            events=self._events,
            refusals=self.link.refusals.totals,
            churn=self.link.churn.totals,
            stragglers=self.stragglers,
        )
        self.log.close()
        if self.journal is not None:
            if stop_reason == "done":
                self.journal.complete(stop_reason)
            self.journal.close()
        self.transport.close()
        return summary


def install_signal_handlers(server: EdgeServer) -> None:
    """SIGTERM / SIGINT: drain the current round, then shut down cleanly; SIGHUP: re-read the
    allowed keys (main thread only)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        server.request_stop(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    if hasattr(signal, "SIGHUP"):  # re-read the allowed keys (they are also watched for changes)
        signal.signal(signal.SIGHUP, lambda signum, frame: server.request_key_reload())


__all__ = ["EdgeServer", "ServerConfig", "install_signal_handlers"]
