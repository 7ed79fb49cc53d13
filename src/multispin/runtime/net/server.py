"""The edge server loop: one target model, K devices over a ZeroMQ ROUTER socket.

`EdgeServer` owns the clock and the order of a round: it feeds the frames its transport
(`multispin.runtime.net.transport`, the ZeroMQ socket) receives to the sans-I/O `ServerProtocol`
(handshake, admission, what each connection owes), sends what that queues, and drives the `RoundEngine` (the round's token math and bookkeeping, shared with the
in-process loop): PLAN to every active device, DRAFTs within the round timeout, one batched
verify, VERDICTs to the rejected devices, UL/DL corrections, then the round's commit: durable in
the journal first, COMMITs after, each carrying the device's PLAN of the next round when the
server already knows it (`_plan_next`), so a device starts drafting on the message that ends
its round. Faults stay local: a malformed message, a stall or a crash drops that one session
with a logged reason and the round completes for the rest; a device that reconnects resumes from
the server's record, so no token is lost or duplicated, and a server restarted on its journal
resumes every session.

Security plugs in here: with per-device keys (the default) the transport is a CurveZMQ server
whose authenticator admits only allowed keys (watched for changes by
`multispin.runtime.security.key_watch`), and the protocol binds each HELLO's device id to its
sender's key; `secret` alone is the plaintext debugging mode.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multispin.errors import ConfigError, ProtocolError
from multispin.models.base import BatchedLM, LoadedPair
from multispin.runtime.net.jsonlog import JsonlLog
from multispin.runtime.net.server_config import DEFAULT_MAX_PENDING, ServerConfig
from multispin.runtime.net.transport import ServerTransport
from multispin.runtime.round.engine import (
    DraftLengthPolicy,
    ModePolicy,
    PolicyPair,
    RoundEngine,
    RoundOutcome,
    RoundPolicy,
)
from multispin.runtime.round.local import UniformDraftLength, mode_policy
from multispin.runtime.round.roles import Draft, VerifierServer
from multispin.runtime.security.auth import resolve_secret
from multispin.runtime.security.key_watch import FAILED, NO_DESCRIPTORS, KeyWatch
from multispin.runtime.security.keys import AllowedKeys, ServerKeys, load_server_keys
from multispin.runtime.security.limits import ConnectionLimits, RefusalLog
from multispin.runtime.store.journal import DeviceRound, Journal, SessionRecord
from multispin.runtime.wire import messages as P
from multispin.runtime.wire.records import DeviceRecord, RoundEvent, ServerSummary
from multispin.runtime.wire.server_protocol import (
    HANDSHAKE_TYPES,
    SESSION_TYPES,
    Connection,
    ConnState,
    ServerProtocol,
)
from multispin.speculative.codecs import exactness_by_mode, make_codec
from multispin.system.payload import WirePayload

log = logging.getLogger("multispin.server")

_POLL_SLICE_S = 0.05
_HOUSEKEEPING_S = 0.01  # how often the time-driven checks run while every connection has a session
OUT_OF_DESCRIPTORS = "out of file descriptors"


# --------------------------------------------------------------------------------------------
# Server state
# --------------------------------------------------------------------------------------------


@dataclass
class _RoundIO:
    """What one round's message traffic produced besides the engine's outcome."""

    conns: dict[int, Connection]  # the devices active at the round's start
    dropped: dict[int, str] = field(default_factory=dict)  # device -> why its session ended
    draft_s: dict[int, float] = field(default_factory=dict)  # reported in DRAFT
    correction_s: dict[int, float] = field(default_factory=dict)  # reported in CORRECTION (DL)
    payload_bytes: dict[int, int] = field(default_factory=dict)  # codec bytes of the distribution


class EdgeServer:
    """Edge server process: target model, authentication, rounds, logs. Call `run()` (blocking)
    in the thread that owns it; `request_stop()` from anywhere (a signal handler, another
    thread) drains the current round and shuts down cleanly. `journal`: a path, or a Journal
    the caller opened (and so checked, or repaired) itself; `request_key_reload()` re-reads the
    allowed keys."""

    def __init__(
        self,
        config: ServerConfig,
        pair: LoadedPair,
        secret: str | bytes | None = None,
        *,
        keys: ServerKeys | str | Path | None = None,
        journal: str | Path | Journal | None = None,
        policy: RoundPolicy | None = None,
        draft_lengths: DraftLengthPolicy | None = None,
        modes: ModePolicy | None = None,
        log_path: str | Path | None = None,
        on_round: Callable[[RoundEvent], None] | None = None,
        before_commit: Callable[[RoundOutcome], None] | None = None,
        on_event: Callable[[dict], None] | None = None,
        target_lm: BatchedLM | None = None,
    ):
        self.config = config
        self.pair = pair
        if keys is None and secret is None:
            raise ConfigError(
                "keys: the server needs its key folder (make it with `multispin keys "
                "server DIR`), or a shared secret for a plaintext --insecure run"
            )
        self.keys = keys if isinstance(keys, ServerKeys) or keys is None else load_server_keys(keys)
        self.allowed = AllowedKeys(self.keys.allowed_dir) if self.keys is not None else None
        self._secret = resolve_secret(secret) if self.keys is None else None
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
        if policy is not None and (draft_lengths is not None or modes is not None):
            raise ConfigError("policy: give a round policy or draft_lengths/modes, not both")
        # draft_lengths/modes: the policies that learn nothing, with the config's defaults
        self.policy: RoundPolicy = policy or PolicyPair(
            draft_lengths or UniformDraftLength(min(config.draft_len, config.gamma_max)),
            modes or mode_policy(config.mode, config.seed),
        )
        self.on_round = on_round
        # called with the round's outcome (its cost included) once the round is durable and the policy observed it, before
        # its COMMITs (and the next PLANs in them) go out: the testbed's link emulation sleeps the
        # round's airtime here, so that no device drafts the next round during it
        self.before_commit = before_commit
        self._next: RoundOutcome | None = None  # the next round, planned at this one's commit
        self._next_sent = 0.0  # when the COMMITs carrying its PLANs went out: where its wall time starts
        self.log = JsonlLog(log_path, on_event)
        self._init_bounds(config)
        self.ready = threading.Event()
        self.endpoint: str | None = None
        self._stop, self._stop_reason = threading.Event(), "signal"
        self._events: list[RoundEvent] = []
        self.proto = self._make_protocol()
        # The bits of every message of a round, from the codecs and the pair in use.
        self.wire = WirePayload.from_codecs(self.ul_codec, self.dl_codec, self.vocab_size, config.gamma_max)
        self.engine = RoundEngine(self.verifier, self.policy, config.max_new_tokens, self.eos_ids, self.wire)
        self.transport = ServerTransport(
            self.transport_limit_bytes,
            config.handshake_timeout_s,
            lambda cause, now, reason: self.refusals.refused(cause, now, peer=reason),
        )
        self._next_housekeeping = 0.0
        self.journal: Journal | None = None
        self.recovered: list[int] = []  # devices restored from the journal at start
        self._jobs_due: set[int] = set()  # successors of jobs that finished (job_slots), not joined yet
        if journal is not None:
            self.journal = journal if isinstance(journal, Journal) else Journal(journal)  # opened: checked
            self._recover()

    def _init_bounds(self, config: ServerConfig) -> None:
        """What keeps peers' repetitions bounded in the log, and the allowed keys current."""
        self.refusals = RefusalLog(config.refusal_log_interval_s, emit=self._log_refusals)
        # drops and resumes, per device and cause: one valid key can make them at will
        self.churn = RefusalLog(config.refusal_log_interval_s, emit=self._log_refusals, label="churn")
        # draft deadlines missed and stragglers told to back off: what slow devices cost the others
        # (held_at_most_s: the deadlines waited out; the others' loss is at most that)
        self.stragglers: dict[str, float] = {"missed": 0, "backed_off": 0, "held_at_most_s": 0.0}
        self.key_watch = KeyWatch(self.allowed) if self.allowed is not None else None
        self._check_revoked = False

    def _make_protocol(self) -> ServerProtocol:
        cfg = self.config
        welcome = dict(
            pair=self.pair.name[: P.MAX_NAME_CHARS],
            vocab_size=self.vocab_size,
            gamma_max=cfg.gamma_max,
            seed=cfg.seed,
            temperature=float(cfg.temperature),
            top_k=cfg.top_k,
            top_p=float(cfg.top_p),
            ul_codec=self.ul_codec.name,
            dl_codec=self.dl_codec.name,
            max_new_tokens=cfg.max_new_tokens,
            max_prompt_tokens=cfg.max_prompt_tokens,
            eos_ids=self.eos_ids,
        )
        max_connections = cfg.max_connections or cfg.max_devices + (cfg.max_pending or DEFAULT_MAX_PENDING)
        # only the default adapts to max_connections; a max_pending given larger is refused (ConnectionLimits)
        max_pending = cfg.max_pending or min(DEFAULT_MAX_PENDING, max_connections)
        return ServerProtocol(
            self._secret,
            self.limits,
            self.verifier.records,
            self._open_device,
            welcome,
            max_devices=cfg.max_devices,
            handshake_timeout_s=cfg.handshake_timeout_s,
            check_claim=self._check_claim if self.allowed is not None else None,
            connections=ConnectionLimits(max_connections, max_pending, cfg.handshake_timeout_s),
            history=cfg.history,
            max_replacements=cfg.max_replacements_per_min,
        )

    # ---------------------------------------------------------------- journal and keys

    def _recover(self) -> None:
        """Restore every session of the journal (prompt + committed tokens) and the next round;
        a journal whose run ended with every device done is set aside and a fresh one started."""
        assert self.journal is not None
        if self.journal.repaired is not None:
            log.warning("%s", self.journal.repaired.describe())
        rec = self.journal.recover()
        if rec.completed is not None:
            path = self.journal.path
            done = self.journal.set_aside(f"done-{time.strftime('%Y%m%d-%H%M%S')}")
            log.info("journal %s holds a finished run; kept as %s, starting a new one", path, done)
            self.journal = Journal(path, check=self.journal.check)
            return
        for d, s in sorted(rec.sessions.items()):
            ours = (self._session_params, self.ul_codec.name, self.dl_codec.name, self.config.seed)
            theirs = (dict(s.session.sampling), s.session.ul_codec, s.session.dl_codec, s.session.seed)
            for name, a, b in zip(("settings", "UL codec", "DL codec", "seed"), theirs, ours):
                if a != b:
                    raise ConfigError(
                        f"journal: {self.journal.path} was written with {name} {a}, this "
                        f"server has {b}; restart with the same settings or another --journal"
                    )
            self.verifier.open(d, s.session.prompt_ids)
            self.verifier.commit(d, s.tokens)
            self.proto.restore(d, len(s.session.prompt_ids), self.engine.finished(d))
            if not self.engine.finished(d):
                self.recovered.append(d)
        self.proto.round_idx = rec.next_round
        if rec.sessions:
            log.info(
                "recovered %d session(s) from %s at round %d", len(rec.sessions), self.journal.path, rec.next_round
            )

    @property
    def _session_params(self) -> dict[str, Any]:
        """What every journal session must agree with for a restart to continue it exactly."""
        cfg = self.config
        return dict(
            pair=self.pair.name,
            temperature=float(cfg.temperature),
            top_k=cfg.top_k,
            top_p=float(cfg.top_p),
            max_new_tokens=cfg.max_new_tokens,
            gamma_max=cfg.gamma_max,
            policy=getattr(self.policy, "name", type(self.policy).__name__),
        )

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
        if change.kind == NO_DESCRIPTORS:
            self.refusals.refused(OUT_OF_DESCRIPTORS, now, peer=f"allowed keys not re-read ({change.reason})")
        elif change.kind == FAILED:
            log.warning("allowed keys not reloaded, the previous %d stay: %s", change.keys, change.reason)
            self.log.write("keys_reload_failed", reason=change.reason)
        else:
            added, removed = change.added, change.removed
            log.warning(
                "allowed keys reloaded: %d key(s)%s%s",
                change.keys,
                f", added device(s) {added}" if added else "",
                f", removed device(s) {removed}" if removed else "",
            )
            self.log.write("keys_reloaded", keys=change.keys, added=added, removed=removed)
            self._check_revoked = True

    def _end_revoked_sessions(self) -> None:
        """Between rounds: a session whose key is no longer allowed as its device ends (ERROR
        auth: the device does not retry; the transport would refuse its key anyway)."""
        if not self._check_revoked or self.allowed is None:
            return
        self._check_revoked = False
        for d, dev in sorted(self.proto.devices.items()):
            c = dev.conn
            if c is not None and c.alive and self.allowed.identity_for(c.peer) != d:
                self.proto.drop(c, "auth", f"device {d}'s key is no longer allowed (revoked)")
        self._flush()

    def _check_claim(self, key: str | None, d: int) -> str | None:
        owner = self.allowed.identity_for(key) if self.allowed is not None else None
        if owner is None:
            return f"the sender's key is not allowed (claimed device {d})"
        if owner != d:
            return f"device {owner}'s key claimed device id {d}"
        return None

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
    def transport_limit_bytes(self) -> int:
        """The transport's backstop: libzmq cuts a peer whose frame is larger before buffering it
        (the socket monitor then tells the loop); a frame between the protocol's limit and this
        one is read and refused with a logged reason."""
        return 4 * max(self.limits.max_bytes(t) for t in HANDSHAKE_TYPES + SESSION_TYPES) + 65536

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
                policy=getattr(self.policy, "name", type(self.policy).__name__),
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
            self._pump(_POLL_SLICE_S)
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
            self._pump(_POLL_SLICE_S)

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

        self._pump_until(
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
        io = _RoundIO({d: self.proto.devices[d].conn for d in active if self.proto.devices[d].conn})  # type: ignore[misc]
        for d in active:
            if d not in io.conns:
                io.dropped[d] = self._why_closed(d)
        for c in io.conns.values():
            if not self.proto.planned(c, r):  # a planned one was reset at the last round's end
                c.bytes_in = c.bytes_out = 0
        self.engine.verify(out, self._collect_drafts(out, io))
        waiting = self._send_verdicts(out, io)
        self._collect_corrections(out, io, waiting)
        self._commit_round(out, io)
        for d in active:
            if d not in out.records and d not in io.dropped and not io.conns[d].alive:
                io.dropped[d] = self._why_closed(d)
        for d in set(io.dropped) | set(out.finished):
            self.verifier.release(d)
        slots = self.config.job_slots
        if slots:
            self._jobs_due.update(d + slots for d in out.finished if d + slots < self.config.max_devices)
        event = RoundEvent(
            round=r,
            gammas=out.gammas,
            records=out.records,
            rejected=list(out.rejected),
            modes=dict(out.modes),
            dropped=io.dropped,
            verify_s=out.verify_s,
            server_correction_s=out.server_correction_s,
            draft_compute_s=io.draft_s,
            device_correction_s=io.correction_s,
            payload_bytes=io.payload_bytes,
            wire_bytes_up={d: c.bytes_in for d, c in io.conns.items()},
            wire_bytes_down={d: c.bytes_out for d, c in io.conns.items()},
            round_wall_s=time.perf_counter() - t0,
            cost=out.cost,
            expected_tokens={d: out.expected_tokens[d] for d in out.records if d in out.expected_tokens},
        )
        for c in io.conns.values():  # from here on, bytes count towards the next round
            c.bytes_in = c.bytes_out = 0
        if self.config.history:
            self._events.append(event)
        if self.log.active:  # a round's dict is most of a light round's bookkeeping: only if it goes somewhere
            self.log.write_record(event.to_dict())
        if self.on_round is not None:
            self.on_round(event)

    def _why_closed(self, d: int) -> str:
        """Why device d's session ended: its last drop's reason."""
        drops = self.proto.devices[d].drops
        return drops[-1] if drops else "gone"

    def _drop_in_round(self, io: _RoundIO, d: int, code: str, reason: str) -> None:
        io.dropped[d] = reason
        self.proto.drop(io.conns[d], code, reason)
        self._flush()

    def _collect_drafts(self, out: RoundOutcome, io: _RoundIO) -> dict[int, Draft]:
        """PLAN to every active device, then every DRAFT that arrives within the round timeout."""
        r, timeout = out.round, self.config.round_timeout_s
        for d, c in io.conns.items():
            if not self.proto.planned(c, r):  # else its last COMMIT carried this PLAN
                self.proto.plan(c, r, out.gammas[d])
        self._flush()
        # the connections still owing their DRAFT, fewer at each wake-up (a DRAFT taken or a
        # session ended stays so): a round's DRAFTs wake the loop up to K times, and each wake-up
        # looks at the ones left, not at all K
        owing = list(io.conns.values())

        def all_in() -> bool:
            owing[:] = [c for c in owing if c.alive and c.inbox is None]
            return not owing

        self._pump_until(all_in, time.monotonic() + timeout)
        drafts: dict[int, Draft] = {}
        for d, c in io.conns.items():
            if not c.alive:
                io.dropped.setdefault(d, self._why_closed(d))
                continue
            if c.inbox is None:
                self._skip_straggler(io, d, r)
                continue
            self.proto.drafted(d)
            msg = c.inbox
            assert isinstance(msg, P.DraftMsg)
            c.inbox = None
            drafts[d] = Draft(list(msg.tokens), msg.q_values)
            if msg.compute_s is not None:
                io.draft_s[d] = msg.compute_s
        return drafts

    def _skip_straggler(self, io: _RoundIO, d: int, r: int) -> None:
        """No DRAFT by the deadline: the round goes on without device d, whose record stays (it
        resumes at its next HELLO); at its max_draft_misses-th miss in a row it is told to back
        off, so one slow device costs the others at most that many deadlines per back-off."""
        cfg = self.config
        timeout = cfg.round_timeout_s
        backoff = cfg.straggler_backoff_s or 10 * cfg.max_draft_misses * timeout
        self.stragglers["missed"] += 1
        self.stragglers["held_at_most_s"] += timeout
        backed_off = self.proto.missed_draft(d, time.monotonic(), cfg.max_draft_misses, backoff)
        self.log.write(
            "straggler",
            device=d,
            round=r,
            waited_s=timeout,
            misses=self.proto.devices[d].draft_misses,
            backed_off=backed_off,
        )
        if backed_off:
            self.stragglers["backed_off"] += 1
            self._drop_in_round(
                io,
                d,
                "busy",
                f"no DRAFT within {timeout:g} s in round {r}, "
                f"{cfg.max_draft_misses} rounds in a row: back off for {backoff:g} s",
            )
        else:
            self._drop_in_round(io, d, "timeout", f"no DRAFT within {timeout:g} s in round {r}")

    def _send_verdicts(self, out: RoundOutcome, io: _RoundIO) -> dict[int, str]:
        """Accepted devices commit now (their COMMIT is their verdict); a rejected device gets its
        VERDICT, with p_j in DL. Returns the rejected devices whose correction is still owed,
        with their modes."""
        r, waiting = out.round, dict[int, str]()
        for d, v in out.verdicts.items():
            c = io.conns[d]
            if not c.alive:
                io.dropped.setdefault(d, self._why_closed(d))
                continue
            if not v.rejected:
                self.engine.commit(out, d, v.bonus_token)  # type: ignore[arg-type]  # sent with the round's commit
                continue
            mode = out.modes[d]
            p_payload = None
            if mode == "dl":
                p_payload = self.engine.p_payload(out, d)
                io.payload_bytes[d] = len(p_payload)
            self.proto.verdict(c, r, v.num_accepted, mode, p_payload)
            waiting[d] = mode
        self._flush()  # a VERDICT that could not be sent dropped its session: the wait sees it
        return waiting

    def _collect_corrections(self, out: RoundOutcome, io: _RoundIO, waiting: dict[int, str]) -> None:
        """Each rejected device commits as soon as its Q_PAYLOAD (UL) or CORRECTION (DL) arrives."""
        timeout = self.config.round_timeout_s
        deadline = time.monotonic() + timeout
        while waiting:
            for d in list(waiting):
                c = io.conns[d]
                if not c.alive:
                    waiting.pop(d)
                    io.dropped.setdefault(d, self._why_closed(d))
                elif c.inbox is not None:
                    msg, c.inbox = c.inbox, None
                    self._on_correction(out, io, d, waiting.pop(d), msg)
            if not waiting:
                break
            if time.monotonic() >= deadline:
                for d in list(waiting):
                    what = "Q_PAYLOAD" if waiting.pop(d) == "ul" else "CORRECTION"
                    self._drop_in_round(io, d, "timeout", f"no {what} within {timeout:g} s in round {out.round}")
                break
            self._pump(min(_POLL_SLICE_S * 4, max(0.0, deadline - time.monotonic())))

    def _on_correction(self, out: RoundOutcome, io: _RoundIO, d: int, mode: str, msg: P.Message) -> None:
        if mode == "ul":
            assert isinstance(msg, P.QPayloadMsg)
            io.payload_bytes[d] = len(msg.payload)
            try:
                final = self.engine.correct_remotely(out, d, msg.payload)
            except (ProtocolError, ConfigError) as exc:
                self._drop_in_round(io, d, "protocol", f"Q_PAYLOAD.payload: {exc}")
                return  # the COMMIT carries the correction to the device
        else:
            assert isinstance(msg, P.CorrectionMsg)
            final = msg.token
            if msg.compute_s is not None:
                io.correction_s[d] = msg.compute_s
        self.engine.commit(out, d, final)  # sent with the round's commit

    def _commit_round(self, out: RoundOutcome, io: _RoundIO) -> None:
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
        self._next = self._plan_next(out, io)
        gammas = self._next.gammas if self._next is not None else {}
        for d in out.records:
            self.proto.commit(
                io.conns[d],
                out.round,
                out.kept[d],
                out.records[d],
                d in out.finished,
                gammas.get(d) if io.conns[d].alive else None,
            )
        self._flush()
        self._next_sent = time.perf_counter()

    def _plan_next(self, out: RoundOutcome, io: _RoundIO) -> RoundOutcome | None:
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

    # ---------------------------------------------------------------- transport

    def _send(self, conn: Connection, msg: P.Message) -> bool:
        """Send one message now; False when the connection is closed or the send failed."""
        if not self.proto.send(conn, msg):
            return False
        self._flush()
        return conn.alive

    def _flush(self) -> None:
        """Send what the protocol queued and log what it recorded; a connection that cannot take
        its message is dropped."""
        proto, send = self.proto, self.transport.send
        while proto.outbox or proto.events:
            outbox, proto.outbox = proto.outbox, []
            for identity, conn, msg in outbox:
                if conn is not None and not conn.alive and msg.TYPE != "ERROR":
                    continue
                raw = P.encode_message(msg)
                failed = send(identity, raw)
                if failed is not None:
                    if conn is not None:
                        proto.drop(conn, "internal", f"send {msg.TYPE} failed: {failed}", notify=False)
                    continue
                if conn is not None:
                    conn.bytes_out += len(raw)
            events, proto.events = proto.events, []
            for rec in events:
                self._log_event(rec)

    def _log_event(self, rec: dict) -> None:
        kind, d = rec["event"], rec.get("device")
        if kind in ("refused", "auth_refused"):
            # refusals are what a flood makes: counted, one line per cause per interval
            who = f"device {d}: " if d is not None else ""
            self.log.notify(**rec)
            self.refusals.refused(rec["code"], time.monotonic(), peer=f"{who}{rec['reason']}")
            return
        if kind in ("drop", "resume") and d is not None:
            # so are drops and resumes of one device (one valid key, many HELLOs): the first of a
            # device and cause in an interval is written whole, the rest counted
            cause = f"device {d} {'dropped (' + rec['code'] + ')' if kind == 'drop' else 'resumed'}"
            if not self.churn.refused(cause, time.monotonic(), peer=rec.get("reason"), announce=False):
                self.log.notify(**rec)
                return
        self.log.write(**rec)
        if kind == "drop":
            log.warning("dropped device %d: %s", d, rec["reason"])

    def _log_refusals(self, line: str) -> None:
        log.warning("%s", line)
        self.log.write("refusals", summary=line)

    def _pump_until(self, done: Callable[[], bool], deadline: float) -> None:
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._pump(min(left, _POLL_SLICE_S * 4))

    def _pump(self, timeout_s: float) -> None:
        """Wait up to timeout_s for traffic, then handle everything queued."""
        transport, proto = self.transport, self.proto
        transport.poll(timeout_s)
        for identity, frames, key in transport.receive(self.keys is not None, proto.conns):
            proto.receive(identity, frames, time.monotonic(), key)
            if proto.outbox or proto.events:
                self._flush()
        # only now: every frame a closed connection delivered before its close has been read
        for lost in transport.take_lost():
            proto.connection_lost(
                lost,
                "connection lost: the device closed it, or the "
                f"transport cut it for a frame over {self.transport_limit_bytes} bytes",
            )
        now = time.monotonic()
        # the time-driven checks (handshake deadlines, connection bounds, log intervals, the key
        # folder) at most every _HOUSEKEEPING_S: a round's traffic wakes the loop several times
        # per device, and the connection bounds walk every connection
        if now >= self._next_housekeeping or proto.pending or transport.peers.connections > len(proto.conns):
            self._next_housekeeping = now + _HOUSEKEEPING_S
            proto.expire(now)
            transport.cut_idle(now, proto.conns.__contains__, proto.budget.limits)
            self.refusals.tick(now)
            self.churn.tick(now)
            self._watch_keys(now)
        self._flush()

    # ---------------------------------------------------------------- shutdown

    def _shutdown(self, stop_reason: str, wall_s: float) -> ServerSummary:
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
                        self._flush()
                deadline = time.monotonic() + self.config.bye_timeout_s
                self._pump_until(
                    lambda: not any(c.state is ConnState.AWAIT_BYE for c in self.proto.conns.values()), deadline
                )
        except Exception as exc:  # never lose the summary and the log over a goodbye
            log.warning("shutdown: %s", exc)
        devices = {}
        for d, dev in sorted(self.proto.devices.items()):
            server_digest = dev.digest.digest()
            rec = DeviceRecord(
                device_id=d,
                draft=dev.draft,
                num_prompt=dev.num_prompt,
                tokens=list(self.verifier.records[d]),
                finished=dev.finished,
                sessions=dev.sessions,
                drops=list(dev.drops),
                rounds=list(dev.rounds),
                num_rounds=dev.num_rounds,
                digest=server_digest.hex(),
                client_digest=dev.client_digest.hex() if dev.client_digest else None,
                digest_match=None if dev.client_digest is None else dev.client_digest == server_digest,
            )
            devices[d] = rec
            self.log.write(
                "device",
                device=d,
                tokens=len(rec.tokens),
                generated=len(rec.generated),
                finished=rec.finished,
                sessions=rec.sessions,
                drops=rec.drops,
                digest=rec.digest,
                device_digest=rec.client_digest,
                match=rec.digest_match,
            )
        self.refusals.flush(time.monotonic())
        self.churn.flush(time.monotonic())
        refused = self.proto.refused + self.transport.refused
        summary = ServerSummary(
            self.round_idx,
            stop_reason,
            wall_s,
            devices,
            refused,
            list(self._events),
            dict(self.refusals.totals),
            dict(self.churn.totals),
            dict(self.stragglers),
        )
        self.log.write(
            "shutdown",
            reason=stop_reason,
            rounds=self.round_idx,
            refused=refused,
            refusals=self.refusals.totals,
            churn=self.churn.totals,
            stragglers=self.stragglers,
            wall_s=wall_s,
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

    def handler(signum: int, frame: Any) -> None:
        server.request_stop(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    if hasattr(signal, "SIGHUP"):  # re-read the allowed keys (they are also watched for changes)
        signal.signal(signal.SIGHUP, lambda signum, frame: server.request_key_reload())


__all__ = ["EdgeServer", "ServerConfig", "install_signal_handlers"]
