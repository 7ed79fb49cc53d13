"""The edge server of the networked testbed: one target model, K devices over ZeroMQ sockets.

`EdgeServer` binds a ROUTER socket (127.0.0.1 by default), authenticates devices
(challenge-response, `runtime/auth.py`), and runs Multi-SPIN rounds (SYSTEM_MODEL §1) with the
same `VerifierServer` the in-process loop uses, so the networked system runs the identical token
math: per round it plans γ with a draft-length policy, sends PLAN to every active device, waits
(per-round timeout) for their DRAFTs, verifies every draft that arrived in ONE
`VerifierServer.verify` call, picks modes for the rejected set with a mode policy, runs the UL/DL
corrections and COMMITs each device's new tokens.

The server is the source of truth for every device's text: a device that reconnects
(same id, authenticated) gets its committed tokens in WELCOME and rebuilds its draft state; a
device whose session ends mid-round simply gains nothing that round (its target cache is rolled
back to the record), so no token is lost or duplicated. Faults stay local: a malformed or
oversized message, a stall or a crash drops that one session, with a logged reason, and the
round completes for the rest.

Logs: one JSON object per line (``event`` = start, join, resume, auth_refused, refused, drop,
round, bye, device, shutdown, …), flushed line by line so a SIGTERM never loses one.

`LocalTestbed` / `run_local_testbed` start a server (in-process thread) and K devices
(subprocesses running ``multispin device``, forked processes or threads) on this machine and
return every device's tokens next to the server's records.
"""

from __future__ import annotations

import json
import logging
import math
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

import zmq
from pydantic import Field

from multispin.errors import ConfigError, ProtocolError
from multispin.models.base import BatchedLM, LoadedPair
from multispin.runtime import protocol as P
from multispin.runtime.auth import resolve_secret
from multispin.runtime.local import UniformDraftLength, mode_policy
from multispin.runtime.roles import Draft, VerifierServer
from multispin.runtime.round import DraftLengthPolicy, ModePolicy, RoundEngine, RoundOutcome, RoundRecord
from multispin.runtime.server_protocol import (
    HANDSHAKE_TYPES, SESSION_TYPES, Connection, ConnState, ServerProtocol,
)
from multispin.spec.codecs import make_codec
from multispin.spec.verify import DEFAULT_GAMMA_MAX
from multispin.spec.warp import SamplingFields, SamplingParams
from multispin.system.payload import WirePayload

log = logging.getLogger("multispin.server")

_POLL_SLICE_S = 0.05


# --------------------------------------------------------------------------------------------
# Configuration and policies
# --------------------------------------------------------------------------------------------


class ServerConfig(SamplingFields):
    """Everything the server needs besides the model pair, the secret and the policies."""

    host: str = "127.0.0.1"
    port: int = Field(5555, ge=0, le=65535, description="0 = any free port")
    expected_devices: int = Field(1, ge=1, le=4096, description="devices to wait for before round 0")
    max_devices: int = Field(256, ge=1, le=4096, description="distinct device ids this server serves")
    rounds: int | None = Field(None, ge=1, description="stop after this many rounds (None: when all done)")
    max_new_tokens: int = Field(32, ge=1, le=1 << 20)
    max_prompt_tokens: int = Field(4096, ge=1, le=1 << 20)
    gamma_max: int = Field(DEFAULT_GAMMA_MAX, ge=0, le=256)
    draft_len: int = Field(4, ge=0, le=256, description="γ of the default (uniform) draft-length policy")
    mode: Literal["ul", "dl", "mixed"] = "mixed"  # the default mode policy
    seed: int = Field(0, ge=0, le=P.MAX_SEED)
    ul_codec: str = "dense-fp32"
    dl_codec: str = "dense-fp32"
    round_timeout_s: float = Field(30.0, gt=0, description="longest wait for one phase (draft, correction) of a round")
    join_timeout_s: float = Field(120.0, gt=0, description="longest wait for expected_devices before round 0")
    handshake_timeout_s: float = Field(10.0, gt=0)
    idle_timeout_s: float = Field(60.0, gt=0, description="how long to wait for detached, unfinished devices")
    bye_timeout_s: float = Field(5.0, ge=0, description="how long to wait for devices' final BYE")

    @property
    def bind_endpoint(self) -> str:
        return f"tcp://{self.host}:{self.port if self.port else '*'}"


# --------------------------------------------------------------------------------------------
# What the server reports
# --------------------------------------------------------------------------------------------


@dataclass
class RoundEvent:
    """What happened in one round (the per-round hook's argument and the JSONL `round` line)."""

    round: int
    gammas: dict[int, int]  # γ sent in PLAN, every device active at the round's start
    records: dict[int, RoundRecord]  # devices that committed this round
    rejected: list[int]
    modes: dict[int, str]
    dropped: dict[int, str]  # device -> reason its session ended during this round
    verify_s: float  # the one batched VerifierServer.verify call
    server_correction_s: float  # residual sampling (UL) and p_j encoding (DL) at the server
    draft_compute_s: dict[int, float]  # as reported by each device in DRAFT
    device_correction_s: dict[int, float]  # DL residual sampling, as reported in CORRECTION
    payload_bytes: dict[int, int]  # codec bytes of the one distribution moved (UL or DL)
    wire_bytes_up: dict[int, int]  # every byte each device sent this round (msgpack frames)
    wire_bytes_down: dict[int, int]
    round_wall_s: float

    @property
    def model_compute_s(self) -> float:
        """Model compute on the round's critical path: the slowest draft, the batched verify, the
        server's corrections and the slowest device-side correction."""
        return (max(self.draft_compute_s.values(), default=0.0) + self.verify_s
                + self.server_correction_s + max(self.device_correction_s.values(), default=0.0))

    def to_dict(self) -> dict[str, Any]:
        def keyed(d: dict) -> dict[str, Any]:
            return {str(k): v for k, v in sorted(d.items())}

        recs = self.records
        return {
            "event": "round", "round": self.round, "gamma": keyed(self.gammas),
            "rejected": sorted(self.rejected), "modes": keyed(self.modes),
            "num_accepted": keyed({d: r.num_accepted for d, r in recs.items()}),
            "tokens_gained": keyed({d: r.tokens_gained for d, r in recs.items()}),
            "uplink_bits": keyed({d: r.uplink_bits for d, r in recs.items()}),
            "downlink_bits": keyed({d: r.downlink_bits for d, r in recs.items()}),
            "payload_bits": keyed({d: r.payload_bits for d, r in recs.items()}),
            "correction_bits": keyed({d: r.correction_bits for d, r in recs.items()}),
            "payload_bytes": keyed(self.payload_bytes),
            "wire_bytes_up": keyed(self.wire_bytes_up), "wire_bytes_down": keyed(self.wire_bytes_down),
            "dropped": keyed(self.dropped), "verify_s": self.verify_s,
            "server_correction_s": self.server_correction_s,
            "draft_compute_s": keyed(self.draft_compute_s),
            "device_correction_s": keyed(self.device_correction_s),
            "round_wall_s": self.round_wall_s,
        }


@dataclass
class DeviceRecord:
    """The server's view of one device at the end of a run."""

    device_id: int
    draft: str
    num_prompt: int
    tokens: list[int]  # prompt + committed tokens: the source of truth
    finished: bool
    sessions: int  # authenticated connections (1 + resumes)
    drops: list[str]  # why sessions ended early
    rounds: list[RoundRecord]
    digest: str
    client_digest: str | None  # from the device's final BYE
    digest_match: bool | None

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.num_prompt :]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["rounds"] = [r.to_dict() for r in self.rounds]
        out["generated"] = self.generated
        return out


@dataclass
class ServerSummary:
    rounds: int
    stop_reason: str
    wall_s: float
    devices: dict[int, DeviceRecord]
    refused: int  # connections refused (authentication or protocol) before a session
    events: list[RoundEvent] = field(default_factory=list)

    def to_dict(self, with_events: bool = False) -> dict[str, Any]:
        out = {"rounds": self.rounds, "stop_reason": self.stop_reason, "wall_s": self.wall_s,
               "refused": self.refused,
               "devices": {str(d): r.to_dict() for d, r in sorted(self.devices.items())}}
        if with_events:
            out["events"] = [e.to_dict() for e in self.events]
        return out


class JsonlLog:
    """Append-only JSON-lines log, flushed after every line; also forwards to a callback."""

    def __init__(self, path: str | Path | None, on_event: Callable[[dict], None] | None = None):
        self.path = Path(path) if path else None
        self._fh = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "a", encoding="utf-8")
        self._on_event = on_event
        self._t0 = time.monotonic()
        self._lock = threading.Lock()

    def write(self, event: str, **fields_: Any) -> None:
        rec = {"event": event, "t_s": round(time.monotonic() - self._t0, 6), **fields_}
        self.write_record(rec)

    def write_record(self, rec: dict) -> None:
        rec.setdefault("t_s", round(time.monotonic() - self._t0, 6))
        with self._lock:
            if self._fh is not None:
                self._fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
                self._fh.flush()
        if self._on_event is not None:
            self._on_event(rec)

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.flush()
                os.fsync(self._fh.fileno())
                self._fh.close()
                self._fh = None


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
    thread) drains the current round and shuts down cleanly."""

    def __init__(self, config: ServerConfig, pair: LoadedPair, secret: str | bytes | None, *,
                 draft_lengths: DraftLengthPolicy | None = None, modes: ModePolicy | None = None,
                 log_path: str | Path | None = None,
                 on_round: Callable[[RoundEvent], None] | None = None,
                 on_event: Callable[[dict], None] | None = None,
                 target_lm: BatchedLM | None = None):
        self.config = config
        self.pair = pair
        self._secret = resolve_secret(secret)
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
        self.verifier = VerifierServer(target_lm, self.sampling, self.ul_codec, self.dl_codec,
                                       config.seed, gamma_max=config.gamma_max)
        self.limits = P.Limits.for_session(self.vocab_size, config.gamma_max, self.ul_codec,
                                           self.dl_codec, config.max_prompt_tokens,
                                           config.max_new_tokens)
        self.draft_lengths: DraftLengthPolicy = draft_lengths or UniformDraftLength(
            min(config.draft_len, config.gamma_max))
        self.modes: ModePolicy = modes or mode_policy(config.mode, config.seed)
        self.on_round = on_round
        self.log = JsonlLog(log_path, on_event)
        self.ready = threading.Event()
        self.endpoint: str | None = None
        self._stop = threading.Event()
        self._stop_reason = "signal"
        self._events: list[RoundEvent] = []
        welcome = dict(pair=pair.name[: P.MAX_NAME_CHARS], vocab_size=self.vocab_size,
                       gamma_max=config.gamma_max, seed=config.seed, temperature=float(config.temperature),
                       top_k=config.top_k, top_p=float(config.top_p), ul_codec=self.ul_codec.name,
                       dl_codec=self.dl_codec.name, max_new_tokens=config.max_new_tokens,
                       max_prompt_tokens=config.max_prompt_tokens, eos_ids=self.eos_ids)
        self.proto = ServerProtocol(self._secret, self.limits, self.verifier.records, self.verifier.open,
                                    welcome, max_devices=config.max_devices,
                                    handshake_timeout_s=config.handshake_timeout_s)
        # The bits of every message of a round, from the codecs and the pair in use.
        self.wire = WirePayload.from_codecs(self.ul_codec, self.dl_codec, self.vocab_size, config.gamma_max)
        self.engine = RoundEngine(self.verifier, self.draft_lengths, self.modes, config.max_new_tokens,
                                  self.eos_ids, self.wire)
        self._recv_types_max = max(self.limits.max_bytes(t) for t in HANDSHAKE_TYPES + SESSION_TYPES)
        self._sock: zmq.Socket | None = None
        self._ctx: zmq.Context | None = None

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

    def run(self) -> ServerSummary:
        started = time.perf_counter()
        self._ctx = zmq.Context()
        sock = self._ctx.socket(zmq.ROUTER)
        self._sock = sock
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # sending to a vanished device raises, never blocks
        sock.setsockopt(zmq.LINGER, 1000)
        sock.setsockopt(zmq.SNDHWM, 10_000)
        sock.setsockopt(zmq.RCVHWM, 10_000)
        # Transport backstop: zmq disconnects a peer whose frame is far over any limit before it is
        # buffered; anything between the protocol limit and this is refused with a logged reason.
        sock.setsockopt(zmq.MAXMSGSIZE, 4 * self._recv_types_max + 65536)
        stop_reason = "error"
        try:
            try:
                sock.bind(self.config.bind_endpoint)
            except zmq.ZMQError as exc:
                raise ConfigError(f"port: cannot bind {self.config.bind_endpoint} ({exc})") from None
            self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
            self.log.write("start", endpoint=self.endpoint, pair=self.pair.name,
                           vocab_size=self.vocab_size, config=self.config.model_dump(),
                           limits=self.limits.table(),
                           draft_length_policy=type(self.draft_lengths).__name__,
                           mode_policy=type(self.modes).__name__, exactness=self._exactness())
            self.ready.set()
            stop_reason = self._serve()
        finally:
            self.ready.set()
            summary = self._shutdown(stop_reason, time.perf_counter() - started)
        return summary

    def _exactness(self) -> dict[str, str]:
        """Whether each mode's codec keeps the output law exactly the target's (SYSTEM_MODEL §4)."""
        out = {}
        for mode, codec in (("ul", self.ul_codec), ("dl", self.dl_codec)):
            verdict = codec.exactness(mode, self.sampling, self.vocab_size)
            out[mode] = ("exact: " if verdict.exact else "NOT exact: ") + verdict.reason
            if not verdict.exact:
                log.warning("%s codec %s is not exact here: %s", mode.upper(), codec.name, verdict.reason)
        return out

    # ---------------------------------------------------------------- main loop

    def _serve(self) -> str:
        cfg = self.config
        deadline = time.monotonic() + cfg.join_timeout_s
        while (len(self.proto.devices) < cfg.expected_devices and not self._stop.is_set()
               and time.monotonic() < deadline):
            self._pump(_POLL_SLICE_S)
        if len(self.proto.devices) < cfg.expected_devices and not self._stop.is_set():
            self.log.write("join_timeout", joined=sorted(self.proto.devices), expected=cfg.expected_devices)
            log.warning("only %d of %d devices joined within %.0f s", len(self.proto.devices),
                        cfg.expected_devices, cfg.join_timeout_s)
            if not self.proto.devices:
                return "no devices"
        idle_since: float | None = None
        while True:
            if self._stop.is_set():
                return self._stop_reason
            if cfg.rounds is not None and self.round_idx >= cfg.rounds:
                return "rounds"
            if self._active():
                idle_since = None
                self._round(self.round_idx)
                self.proto.round_idx += 1
                continue
            if self.proto.devices and all(d.finished for d in self.proto.devices.values()):
                return "done"
            now = time.monotonic()
            idle_since = idle_since or now
            if now - idle_since > cfg.idle_timeout_s:
                waiting = sorted(d for d, dev in self.proto.devices.items() if not dev.finished)
                self.log.write("idle_timeout", waiting_for=waiting)
                return "idle"
            self._pump(_POLL_SLICE_S)

    def _active(self) -> list[int]:
        return [d for d, dev in sorted(self.proto.devices.items())
                if dev.conn is not None and not dev.finished and dev.conn.state is ConnState.IDLE]

    # ---------------------------------------------------------------- one round

    def _round(self, r: int) -> None:
        """The engine's steps, with drafts and corrections arriving as messages."""
        t0 = time.perf_counter()
        active = self._active()
        io = _RoundIO({d: self.proto.devices[d].conn for d in active})  # type: ignore[misc]
        for c in io.conns.values():
            c.bytes_in = c.bytes_out = 0
        out = self.engine.plan(r, active)
        self.engine.verify(out, self._collect_drafts(out, io))
        waiting = self._send_verdicts(out, io)
        self._collect_corrections(out, io, waiting)
        self.engine.close(out)
        for d in active:
            if d not in out.records and d not in io.dropped and not io.conns[d].alive:
                io.dropped[d] = "gone"
        event = RoundEvent(
            round=r, gammas=out.gammas, records=out.records, rejected=list(out.rejected),
            modes=dict(out.modes), dropped=io.dropped, verify_s=out.verify_s,
            server_correction_s=out.server_correction_s, draft_compute_s=io.draft_s,
            device_correction_s=io.correction_s, payload_bytes=io.payload_bytes,
            wire_bytes_up={d: c.bytes_in for d, c in io.conns.items()},
            wire_bytes_down={d: c.bytes_out for d, c in io.conns.items()},
            round_wall_s=time.perf_counter() - t0,
        )
        self._events.append(event)
        self.log.write_record(event.to_dict())
        if self.on_round is not None:
            self.on_round(event)

    def _drop_in_round(self, io: "_RoundIO", d: int, code: str, reason: str) -> None:
        io.dropped[d] = reason
        self.proto.drop(io.conns[d], code, reason)
        self._flush()

    def _collect_drafts(self, out: RoundOutcome, io: "_RoundIO") -> dict[int, Draft]:
        """PLAN to every active device, then every DRAFT that arrives within the round timeout."""
        r, timeout = out.round, self.config.round_timeout_s
        for d, c in io.conns.items():
            self.proto.expect(c, ConnState.AWAIT_DRAFT, r, out.gammas[d])
            self._send(c, P.PlanMsg(r, out.gammas[d]))
        self._pump_until(lambda: all(not c.alive or c.inbox is not None for c in io.conns.values()),
                         time.monotonic() + timeout)
        drafts: dict[int, Draft] = {}
        for d, c in io.conns.items():
            if not c.alive:
                drops = self.proto.devices[d].drops
                io.dropped.setdefault(d, drops[-1] if drops else "gone")
                continue
            if c.inbox is None:
                self._drop_in_round(io, d, "timeout", f"no DRAFT within {timeout:g} s in round {r}")
                continue
            msg = c.inbox
            assert isinstance(msg, P.DraftMsg)
            c.inbox = None
            drafts[d] = Draft(list(msg.tokens), msg.q_values)
            if msg.compute_s is not None:
                io.draft_s[d] = msg.compute_s
        return drafts

    def _send_verdicts(self, out: RoundOutcome, io: "_RoundIO") -> dict[int, str]:
        """VERDICT to every verified device; accepted devices commit now, DL devices get p_j.
        Returns the rejected devices whose correction is still owed, with their modes."""
        r, waiting = out.round, {}
        for d, v in out.verdicts.items():
            c = io.conns[d]
            if not c.alive:
                io.dropped.setdefault(d, "gone")
                continue
            mode = out.modes.get(d)
            if not self._send(c, P.VerdictMsg(r, v.num_accepted, v.rejected, v.bonus_token, mode)):
                continue
            if not v.rejected:
                self._commit(out, io, d, v.bonus_token)  # type: ignore[arg-type]
                continue
            if mode == "ul":
                self.proto.expect(c, ConnState.AWAIT_Q, r)
            else:
                p_payload = self.engine.p_payload(out, d)
                io.payload_bytes[d] = len(p_payload)
                self.proto.expect(c, ConnState.AWAIT_CORRECTION, r)
                if not self._send(c, P.PPayloadMsg(r, p_payload)):
                    continue
            waiting[d] = mode
        return waiting

    def _collect_corrections(self, out: RoundOutcome, io: "_RoundIO", waiting: dict[int, str]) -> None:
        """Each rejected device commits as soon as its Q_PAYLOAD (UL) or CORRECTION (DL) arrives."""
        timeout = self.config.round_timeout_s
        deadline = time.monotonic() + timeout
        while waiting:
            for d in list(waiting):
                c = io.conns[d]
                if not c.alive:
                    waiting.pop(d)
                    io.dropped.setdefault(d, "gone")
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

    def _on_correction(self, out: RoundOutcome, io: "_RoundIO", d: int, mode: str, msg: P.Message) -> None:
        if mode == "ul":
            assert isinstance(msg, P.QPayloadMsg)
            io.payload_bytes[d] = len(msg.payload)
            try:
                final = self.engine.correct_remotely(out, d, msg.payload)
            except (ProtocolError, ConfigError) as exc:
                self._drop_in_round(io, d, "protocol", f"Q_PAYLOAD.payload: {exc}")
                return
            if not self._send(io.conns[d], P.CorrectionMsg(out.round, int(final))):
                return
        else:
            assert isinstance(msg, P.CorrectionMsg)
            final = msg.token
            if msg.compute_s is not None:
                io.correction_s[d] = msg.compute_s
        self._commit(out, io, d, final)

    def _commit(self, out: RoundOutcome, io: "_RoundIO", d: int, final: int) -> None:
        """Commit through the engine, then COMMIT (and BYE when done) to the device."""
        kept = self.engine.commit(out, d, final)
        self.proto.commit(io.conns[d], out.round, kept, out.records[d], d in out.finished)
        self._flush()

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
        proto = self.proto
        while proto.outbox or proto.events:
            outbox, proto.outbox = proto.outbox, []
            for identity, conn, msg in outbox:
                if conn is not None and not conn.alive and msg.TYPE != "ERROR":
                    continue
                raw = P.encode_message(msg)
                try:
                    self._sock.send_multipart([identity, raw], flags=zmq.NOBLOCK)  # type: ignore[union-attr]
                except zmq.ZMQError as exc:
                    if conn is not None:
                        proto.drop(conn, "internal", f"send {msg.TYPE} failed: {exc.strerror}", notify=False)
                    continue
                if conn is not None:
                    conn.bytes_out += len(raw)
            events, proto.events = proto.events, []
            for rec in events:
                self._log_event(rec)

    def _log_event(self, rec: dict) -> None:
        self.log.write(**rec)
        kind, d = rec["event"], rec.get("device")
        if kind in ("refused", "auth_refused"):
            log.warning("refused %s: %s", f"device {d}" if d is not None else "a connection", rec["reason"])
        elif kind == "drop":
            log.warning("dropped device %d: %s", d, rec["reason"])

    def _pump_until(self, done: Callable[[], bool], deadline: float) -> None:
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._pump(min(left, _POLL_SLICE_S * 4))

    def _pump(self, timeout_s: float) -> None:
        """Wait up to timeout_s for traffic, then handle everything queued."""
        sock = self._sock
        assert sock is not None
        if sock.poll(max(0, int(math.ceil(timeout_s * 1000))), zmq.POLLIN):
            while True:
                try:
                    frames = sock.recv_multipart(flags=zmq.NOBLOCK, copy=True)
                except zmq.Again:
                    break
                self.proto.receive(frames[0], frames[1:], time.monotonic())
                self._flush()
        self.proto.expire(time.monotonic())
        self._flush()

    # ---------------------------------------------------------------- shutdown

    def _shutdown(self, stop_reason: str, wall_s: float) -> ServerSummary:
        self.proto.closing = True
        try:
            if self._sock is not None and self.endpoint is not None:
                for d, dev in sorted(self.proto.devices.items()):
                    c = dev.conn
                    if c is not None and c.alive and c.state is not ConnState.AWAIT_BYE:
                        self.proto.bye(c, "done" if dev.finished else stop_reason)
                        self._flush()
                deadline = time.monotonic() + self.config.bye_timeout_s
                self._pump_until(lambda: not any(c.state is ConnState.AWAIT_BYE
                                                 for c in self.proto.conns.values()), deadline)
        except Exception as exc:  # never lose the summary and the log over a goodbye
            log.warning("shutdown: %s", exc)
        devices = {}
        for d, dev in sorted(self.proto.devices.items()):
            server_digest = dev.digest.digest()
            rec = DeviceRecord(
                device_id=d, draft=dev.draft, num_prompt=dev.num_prompt,
                tokens=list(self.verifier.records[d]), finished=dev.finished, sessions=dev.sessions,
                drops=list(dev.drops), rounds=list(dev.rounds), digest=server_digest.hex(),
                client_digest=dev.client_digest.hex() if dev.client_digest else None,
                digest_match=None if dev.client_digest is None else dev.client_digest == server_digest,
            )
            devices[d] = rec
            self.log.write("device", device=d, tokens=len(rec.tokens), generated=len(rec.generated),
                           finished=rec.finished, sessions=rec.sessions, drops=rec.drops,
                           digest=rec.digest, device_digest=rec.client_digest, match=rec.digest_match)
        summary = ServerSummary(self.round_idx, stop_reason, wall_s, devices, self.proto.refused,
                                list(self._events))
        self.log.write("shutdown", reason=stop_reason, rounds=self.round_idx, refused=self.proto.refused,
                       wall_s=wall_s)
        self.log.close()
        if self._sock is not None:
            self._sock.close(linger=500)
        if self._ctx is not None:
            self._ctx.term()
        return summary


# --------------------------------------------------------------------------------------------
# Local testbed: one server and K devices on this machine
# --------------------------------------------------------------------------------------------

DeviceRunner = Literal["subprocess", "fork", "thread"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _resolve_pair(pair: str | LoadedPair) -> LoadedPair:
    if isinstance(pair, LoadedPair):
        return pair
    from multispin.runtime.session import resolve_pair

    return resolve_pair(pair)


@dataclass
class _DeviceHandle:
    device_id: int
    runner: str
    result_path: Path
    proc: Any = None  # subprocess.Popen | multiprocessing.Process
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


@dataclass
class TestbedSummary:
    server: ServerSummary
    devices: dict[int, dict]  # each device's own outcome (its last run); missing if it never finished one
    consistent: bool  # every device outcome's tokens equal the server's record of that device
    wall_s: float
    log_path: str | None

    def tokens(self) -> dict[int, list[int]]:
        """Generated tokens per device, from the server's record (the source of truth)."""
        return {d: rec.generated for d, rec in self.server.devices.items()}

    def to_dict(self) -> dict[str, Any]:
        return {"server": self.server.to_dict(), "devices": {str(k): v for k, v in self.devices.items()},
                "consistent": self.consistent, "wall_s": self.wall_s, "log_path": self.log_path}


def _fork_device_main(kwargs: dict, result_path: str, threads: int) -> None:
    """Body of a forked device process (the pair is inherited from the parent)."""
    code = 0
    try:
        import torch

        torch.set_num_threads(threads)
        from multispin.runtime.device import run_device

        outcome = run_device(**kwargs)
        payload = outcome.to_dict()
    except BaseException as exc:  # report, then exit non-zero
        payload, code = {"error": f"{type(exc).__name__}: {exc}"}, 1
    Path(result_path).write_text(json.dumps(payload))
    os._exit(code)


class LocalTestbed:
    """One `EdgeServer` (a thread of this process, holding the policy objects and hooks) and K
    device processes/threads on 127.0.0.1. `start()`, optionally kill/restart devices, `wait()`.

    Hooks for a `multispin testbed` command: `draft_lengths` and `modes` are policy objects with
    the call signatures of runtime/local.py (an optimiser-backed planner plugs in there), and
    `on_round` receives a `RoundEvent` after every round (records, timings, bits, drops)."""

    def __init__(self, pair: str | LoadedPair = "tiny", num_devices: int = 4, max_new_tokens: int = 32,
                 rounds: int | None = None, draft_lengths: DraftLengthPolicy | None = None,
                 modes: ModePolicy | None = None, secret: str | bytes | None = None,
                 log_path: str | Path | None = None, *, seed: int = 0,
                 sampling: SamplingParams | None = None, draft_len: int = 4,
                 mode: str = "mixed", ul_codec: str = "dense-fp32", dl_codec: str = "dense-fp32",
                 drafts: Sequence[str] | None = None, prompts: Sequence[str] | None = None,
                 device_runner: DeviceRunner = "subprocess", threads: int = 1,
                 round_timeout_s: float = 30.0, join_timeout_s: float = 180.0,
                 idle_timeout_s: float = 60.0, on_round: Callable[[RoundEvent], None] | None = None,
                 on_event: Callable[[dict], None] | None = None,
                 faults: dict[int, str] | None = None, server_options: dict | None = None,
                 device_options: dict | None = None):
        if device_runner not in ("subprocess", "fork", "thread"):
            raise ConfigError(f"device_runner: must be subprocess, fork or thread (got {device_runner!r})")
        if num_devices < 1:
            raise ConfigError(f"num_devices: must be >= 1 (got {num_devices})")
        self.pair = _resolve_pair(pair)
        self.secret = resolve_secret(secret if secret is not None else os.urandom(24).hex())
        sampling = sampling or SamplingParams()
        self.num_devices = num_devices
        self.runner: DeviceRunner = device_runner
        self.threads = threads
        self.faults = dict(faults or {})
        self.device_options = dict(device_options or {})
        self.log_path = str(log_path) if log_path else None
        names = self.pair.check_drafts(list(drafts or self.pair.drafts))
        if not prompts:
            from multispin.runtime.session import default_prompts  # the built-in set ships with the package

            prompts = default_prompts(num_devices, seed)
        texts = list(prompts)
        self.drafts = {k: names[k % len(names)] for k in range(num_devices)}
        self.prompts = {k: texts[k % len(texts)] for k in range(num_devices)}
        self.port = free_port() if device_runner == "fork" else 0
        opts = dict(host="127.0.0.1", port=self.port, expected_devices=num_devices,
                    max_devices=max(num_devices, 1), rounds=rounds, max_new_tokens=max_new_tokens,
                    draft_len=draft_len, mode=mode, temperature=sampling.temperature,
                    top_k=sampling.top_k, top_p=sampling.top_p, seed=seed, ul_codec=ul_codec,
                    dl_codec=dl_codec, round_timeout_s=round_timeout_s,
                    join_timeout_s=join_timeout_s, idle_timeout_s=idle_timeout_s)
        opts.update(server_options or {})
        self.server = EdgeServer(ServerConfig.make(**opts), self.pair, self.secret,
                                 draft_lengths=draft_lengths, modes=modes, log_path=log_path,
                                 on_round=on_round, on_event=on_event)
        self._tmp = Path(tempfile.mkdtemp(prefix="multispin-testbed-"))
        self._handles: dict[int, _DeviceHandle] = {}
        self._retired: list[_DeviceHandle] = []
        self._server_thread: threading.Thread | None = None
        self._summary: ServerSummary | None = None
        self._server_error: BaseException | None = None
        self._started = 0.0
        self._attempt = 0

    @property
    def endpoint(self) -> str:
        if self.server.endpoint is None:
            return f"tcp://127.0.0.1:{self.port}"
        return self.server.endpoint

    def start(self) -> "LocalTestbed":
        self._started = time.perf_counter()
        if self.runner == "fork":
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

        self._server_thread = threading.Thread(target=body, name="multispin-server", daemon=True)
        self._server_thread.start()
        if not self.server.ready.wait(60):
            raise ProtocolError("server: did not start within 60 s")
        if self._server_error is not None:
            raise self._server_error

    def device_kwargs(self, k: int, fault: str | None = None) -> dict[str, Any]:
        opts = dict(server=self.endpoint, device_id=k, secret=self.secret, pair=self.pair,
                    draft=self.drafts[k], prompt=self.prompts[k], fault=fault)
        opts.update(self.device_options)
        return opts

    def start_device(self, k: int, runner: DeviceRunner | None = None,
                     fault: str | None = None) -> _DeviceHandle:
        """Start (or restart, resuming from the server's record) device k."""
        runner = runner or self.runner
        fault = fault if fault is not None else (self.faults.pop(k, None))
        self._attempt += 1
        result = self._tmp / f"device-{k}-{self._attempt}.json"
        old = self._handles.get(k)
        if old is not None:
            self._retired.append(old)
        handle = _DeviceHandle(k, runner, result)
        if runner == "thread":
            from multispin.runtime.device import build_device_client

            client = build_device_client(**self.device_kwargs(k, fault))
            handle.client = client

            def body() -> None:
                try:
                    handle.outcome = client.run().to_dict()
                except BaseException as exc:
                    handle.outcome = {"error": f"{type(exc).__name__}: {exc}"}

            handle.thread = threading.Thread(target=body, name=f"multispin-device-{k}", daemon=True)
            handle.thread.start()
        elif runner == "fork":
            ctx = multiprocessing.get_context("fork")
            handle.proc = ctx.Process(target=_fork_device_main,
                                      args=(self.device_kwargs(k, fault), str(result), self.threads),
                                      name=f"multispin-device-{k}", daemon=True)
            handle.proc.start()
        else:
            cmd = [sys.executable, "-m", "multispin", "device",
                   "--server", self.endpoint, "--device-id", str(k), "--pair", self.pair.name,
                   "--draft", self.drafts[k], "--prompt", self.prompts[k],
                   "--threads", str(self.threads), "--result", str(result)]
            for key, val in self.device_options.items():
                cmd += [f"--{key.replace('_', '-')}", str(val)]
            if fault:
                cmd += ["--fault", fault]
            env = dict(os.environ, MULTISPIN_SECRET=self.secret.decode())  # never in argv
            handle.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                           stderr=open(self._tmp / f"device-{k}-{self._attempt}.err", "w"))
        self._handles[k] = handle
        return handle

    def stop(self) -> None:
        self.server.request_stop("stop")

    def wait(self, timeout_s: float = 600.0) -> TestbedSummary:
        deadline = time.monotonic() + timeout_s
        assert self._server_thread is not None, "start() first"
        self._server_thread.join(max(0.0, deadline - time.monotonic()))
        if self._server_thread.is_alive():
            self.server.request_stop("timeout")
            self._server_thread.join(30)
        for h in list(self._handles.values()) + self._retired:
            h.join(max(1.0, min(30.0, deadline - time.monotonic())))
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
            if out is not None and "error" not in out:
                devices[h.device_id] = out
            elif out is not None:
                devices.setdefault(h.device_id, out)
        consistent = all(
            "error" not in out and d in self._summary.devices
            and out["tokens"] == self._summary.devices[d].tokens
            for d, out in devices.items()
        ) and set(devices) >= {d for d, r in self._summary.devices.items() if r.finished}
        shutil.rmtree(self._tmp, ignore_errors=True)
        return TestbedSummary(self._summary, devices, consistent,
                              time.perf_counter() - self._started, self.log_path)


def run_local_testbed(pair: str | LoadedPair = "tiny", num_devices: int = 4,
                      max_new_tokens: int = 32, rounds: int | None = None,
                      draft_lengths: DraftLengthPolicy | None = None,
                      modes: ModePolicy | None = None, secret: str | bytes | None = None,
                      log_path: str | Path | None = None, timeout_s: float = 600.0,
                      **options: Any) -> TestbedSummary:
    """Start a server and `num_devices` devices on 127.0.0.1, run until every device is done (or
    `rounds` rounds), and return each device's tokens next to the server's records."""
    bed = LocalTestbed(pair, num_devices, max_new_tokens, rounds, draft_lengths, modes, secret,
                       log_path, **options)
    bed.start()
    return bed.wait(timeout_s)


def install_signal_handlers(server: EdgeServer) -> None:
    """SIGTERM / SIGINT: drain the current round, then shut down cleanly (main thread only)."""
    def handler(signum: int, frame: Any) -> None:
        server.request_stop(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


__all__ = [
    "DeviceRecord", "EdgeServer", "JsonlLog", "LocalTestbed", "RoundEvent", "ServerConfig",
    "ServerSummary", "TestbedSummary", "free_port",
    "install_signal_handlers", "run_local_testbed",
]
