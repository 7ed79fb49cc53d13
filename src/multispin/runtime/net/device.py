"""One device of the networked testbed: its draft model, its prompt, a DEALER socket to the edge
server, UL or DL correction as the server says, and reconnect-with-resume.

The token math is `roles.DraftDevice`, exactly as in the in-process loop: the device drafts γ
tokens from its (codec-decoded) q̂, uploads ids and q̂(x_i), and on a rejection either uploads
q̂_j (UL) or samples the correction from p_j locally (DL). The server's COMMIT is the truth: the
device appends what the server committed and checks its running digest against the server's.
After a dropped connection (or the server's restart: the socket monitor reports the lost
connection at once) it reconnects, authenticates again and rebuilds its draft state from the
record in WELCOME, so nothing is lost or duplicated.

With its key pair (the default) the DEALER is a CurveZMQ client of the server's public key: every
frame is encrypted and authenticated, and the server knows the device by its key; `secret` alone
is the plaintext debugging mode.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from multispin.errors import ConfigError, Interrupted, MultispinError, ProtocolError
from multispin.models.base import LoadedPair, SequenceLM
from multispin.models.prompts import encode_prompt
from multispin.models.registry import resolve_pair
from multispin.runtime.round.roles import Draft, DraftDevice
from multispin.runtime.security.auth import SECRET_ENV, resolve_secret
from multispin.runtime.security.keys import DeviceKeys, curve_client, find_device_keys
from multispin.runtime.wire import messages as P
from multispin.runtime.wire.device_protocol import (
    Closed,
    Committed,
    CorrectionRequested,
    DeviceProtocol,
    DraftRequested,
    Event,
    QRequested,
    Welcomed,
)
from multispin.speculative.codecs import make_codec
from multispin.speculative.warp import SamplingParams
from multispin.vocabulary import COUPLED, STANDARD, VerifyRule

log = logging.getLogger("multispin.device")
REFUSED_HINT_AFTER_S = 3.0  # refused connections for this long: the hint that nothing listens there

_FATAL_CODES = ("auth", "refused")
# A busy answer without a time (a server at its connection limit) is retried after this many seconds.
BUSY_RETRY_S = 1.0
# Busy answers keep a device waiting, without spending its reconnects, for up to this many server
# timeouts in a row: longer than any back-off a server gives (at most half its idle timeout).
BUSY_PATIENCE_TIMEOUTS = 3
_ZMQ_EVENTS, _ZMQ_POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)


Drafter = Callable[[DraftDevice, int, VerifyRule], "tuple[Draft, float]"]


def draft_alone(dev: DraftDevice, gamma: int, rule: VerifyRule = STANDARD) -> tuple[Draft, float]:
    """A lone device's draft: its own forward passes; (the draft, its compute seconds). A pool
    (`multispin.runtime.net.pool`) plugs in a drafter that batches the devices it hosts."""
    t0 = time.perf_counter()
    draft = dev.draft(gamma, rule)
    return draft, time.perf_counter() - t0


class _Reconnect(Exception):
    """The session ended; reconnect and resume from the server's record. ``busy_s``: the server
    answered busy and asked for that many seconds before the device rejoins."""

    def __init__(self, message: str, busy_s: float | None = None):
        super().__init__(message)
        self.busy_s = busy_s


class _Fatal(MultispinError):
    """The server turned this device away; do not retry."""


@dataclass
class DeviceOutcome:
    device_id: int
    tokens: list[int]  # prompt + generated, as the device holds them at the end
    num_prompt: int
    digest: str
    finished: bool  # the server said done
    reason: str  # the server's BYE reason, or why the device gave up
    sessions: int  # authenticated connections
    rounds: int  # rounds this device drafted in
    server_digest: str | None  # from the server's BYE
    crashed: bool = False  # a fault injection ended it
    text: str = ""  # the generated tokens decoded (run_device fills it in)

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.num_prompt :]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["generated"] = self.generated
        return out


@dataclass
class _Fault:
    kind: str  # crash | vanish | stall
    round: int
    seconds: float = 0.0

    @classmethod
    def parse(cls, spec: str | None) -> _Fault | None:
        """'crash:R' (exit the process on PLAN of round R), 'vanish:R' (close the socket and
        stop, for thread devices), 'stall:R:S' (sleep S seconds on PLAN of round R)."""
        if not spec:
            return None
        parts = spec.split(":")
        try:
            if parts[0] in ("crash", "vanish") and len(parts) == 2:
                return cls(parts[0], int(parts[1]))
            if parts[0] == "stall" and len(parts) == 3:
                return cls("stall", int(parts[1]), float(parts[2]))
        except ValueError:
            pass
        raise ConfigError(f"fault: expected crash:ROUND, vanish:ROUND or stall:ROUND:SECONDS (got {spec!r})")


class DeviceClient:
    """Runs one device until the server says BYE. `run()` blocks; `stop()` (any thread) makes it
    leave at the next message boundary."""

    def __init__(
        self,
        server: str,
        device_id: int,
        secret: str | bytes | None,
        lm: SequenceLM,
        prompt_ids: Sequence[int],
        *,
        keys: DeviceKeys | str | os.PathLike | None = None,
        pair_name: str = "",
        draft_name: str = "",
        resume: bool = True,
        reconnects: int = 5,
        server_timeout_s: float = 120.0,
        handshake_timeout_s: float = 30.0,
        connect_timeout_s: float | None = None,
        max_context_tokens: int = 1 << 16,
        fault: str | None = None,
        on_event: Callable[[dict], None] | None = None,
        drafter: Drafter | None = None,
        context: zmq.Context | None = None,
    ):
        if not isinstance(device_id, int) or not 0 <= device_id <= P.MAX_DEVICE_ID:
            raise ConfigError(f"device_id: must be an integer in [0, {P.MAX_DEVICE_ID}] (got {device_id!r})")
        if len(prompt_ids) == 0:
            raise ConfigError("prompt: must hold at least one token")
        self.server = normalise_endpoint(server)
        self.device_id = device_id
        self.keys, self._secret = resolve_credentials(keys, secret, device_id)
        self.lm = lm
        self.prompt_ids = tuple(int(t) for t in prompt_ids)
        self.pair_name = pair_name
        self.draft_name = draft_name[: P.MAX_NAME_CHARS]
        self.resume = resume
        self.reconnects = reconnects
        self._set_timeouts(server_timeout_s, handshake_timeout_s, connect_timeout_s)
        self.fault = _Fault.parse(fault)
        self.on_event = on_event
        self.drafter = drafter or draft_alone
        self._handshake_limits = P.Limits(
            vocab_size=lm.vocab_size,
            max_prompt_tokens=len(self.prompt_ids),
            max_new_tokens=max(1, max_context_tokens - len(self.prompt_ids)),
        )
        self._stop = threading.Event()
        self._ctx: zmq.Context | None = None
        # a pool's devices share one ZeroMQ context (its I/O thread and descriptors); else one's own
        self._shared_ctx = context
        self.device: DraftDevice | None = None
        self.sessions = 0
        self.rounds = 0
        self._num_prompt = len(self.prompt_ids)
        self._server_digest: bytes | None = None

    def _set_timeouts(
        self, server_timeout_s: float, handshake_timeout_s: float, connect_timeout_s: float | None
    ) -> None:
        """How long this device waits for the server, for a handshake, for busy answers and for
        its first session."""
        self.server_timeout_s = server_timeout_s
        # how long busy answers may keep this device out in a row before they count as failures
        self.busy_patience_s = BUSY_PATIENCE_TIMEOUTS * server_timeout_s
        self._busy_since: float | None = None
        # --server-timeout bounds every wait, the handshake's too
        self.handshake_timeout_s = min(handshake_timeout_s, server_timeout_s)
        # no session within this many seconds of run(): the endpoint is dead, give up (None: never)
        self.connect_timeout_s = connect_timeout_s
        self._run_started = 0.0

    def stop(self) -> None:
        self._stop.set()

    def _event(self, event: str, **fields: Any) -> None:
        if self.on_event is not None:
            self.on_event({"event": event, "device": self.device_id, **fields})

    def _outcome(self, finished: bool, reason: str, crashed: bool = False) -> DeviceOutcome:
        tokens = list(self.device.tokens) if self.device is not None else list(self.prompt_ids)
        return DeviceOutcome(
            self.device_id,
            tokens,
            self._num_prompt,
            P.token_digest(tokens).hex(),
            finished,
            reason,
            self.sessions,
            self.rounds,
            self._server_digest.hex() if self._server_digest else None,
            crashed,
        )

    def run(self) -> DeviceOutcome:
        self._ctx = self._shared_ctx or zmq.Context()
        self._run_started = time.monotonic()
        failures = 0
        try:
            while True:
                if self._stop.is_set():
                    return self._outcome(False, "stopped")
                sessions = self.sessions
                try:
                    return self._session(resume=self.resume or self.sessions > 0)
                except _Vanish:
                    return self._outcome(False, "vanished", crashed=True)
                except _Fatal as exc:  # refused (a revoked key): after a session, keep its partial text
                    if not self.sessions:
                        raise
                    return self._outcome(False, str(exc))
                except _Reconnect as exc:
                    if self.sessions > sessions:
                        self._busy_since = None
                    if exc.busy_s is not None and self._wait_while_busy(exc):
                        continue  # told to come back later: not a failed reconnect
                    # `reconnects` bounds attempts in a row: a session that got in starts afresh
                    failures = 1 if self.sessions > sessions else failures + 1
                    self._event("reconnect", reason=str(exc), attempt=failures)
                    if failures > self.reconnects:
                        why = f"gave up after {self.reconnects} reconnects ({exc})"
                        if self.sessions:  # a server that went away mid-text: the partial text is an outcome
                            return self._outcome(False, why)
                        raise ProtocolError(f"device {self.device_id}: {why}; {self._where_hint()}") from None
                    log.warning("device %d: %s; reconnecting (%d/%d)", self.device_id, exc, failures, self.reconnects)
                    time.sleep(min(2.0, 0.1 * 2 ** (failures - 1)))
        finally:
            if self._shared_ctx is None:
                self._ctx.term()

    def _wait_while_busy(self, exc: _Reconnect) -> bool:
        """The server said busy (a straggler's back-off, a full server): wait what it asked, then
        rejoin, without spending a reconnect. False once it has kept this device out for longer
        than ``busy_patience_s`` in a row (then the answer counts as a failed reconnect)."""
        now = time.monotonic()
        self._busy_since = self._busy_since or now
        left = self.busy_patience_s - (now - self._busy_since)
        if left <= 0:
            return False
        wait = min(float(exc.busy_s or BUSY_RETRY_S), left)
        self._event("busy", reason=str(exc), wait_s=round(wait, 3))
        log.warning("device %d: %s; rejoining in %.1f s", self.device_id, exc, wait)
        self._stop.wait(wait)
        return True

    # ------------------------------------------------------------------ one connection

    def _session(self, resume: bool) -> DeviceOutcome:
        assert self._ctx is not None
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 2000)
        sock.setsockopt(zmq.MAXMSGSIZE, 4 * self._handshake_limits.max_message_bytes + 65536)
        if self.keys is not None:
            curve_client(sock, self.keys)
        # the lost connection (server crash, restart) and a refused key, as they happen
        self._monitor = sock.get_monitor_socket(
            zmq.EVENT_DISCONNECTED
            | zmq.EVENT_HANDSHAKE_SUCCEEDED
            | zmq.EVENT_CONNECT_RETRIED
            | zmq.EVENT_HANDSHAKE_FAILED_AUTH
            | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
            | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
        )
        self._connected = False
        self._welcomed = False  # this connection's WELCOME arrived
        self._failed_handshakes = 0
        self._refused_since: float | None = None  # connection refused (nothing listens) since then
        self._poller = zmq.Poller()
        self._poller.register(sock, zmq.POLLIN)
        sock.connect(self.server)
        # a shared drafter (a pool's batcher) waits for the devices in a session only: not for one
        # that reconnects or waits out a back-off
        member = getattr(self.drafter, "enter", None), getattr(self.drafter, "leave", None)
        if member[0] is not None:
            member[0]()
        try:
            return self._converse(sock, resume)
        finally:
            if member[1] is not None:
                member[1]()
            sock.disable_monitor()
            self._monitor.close(linger=0)
            sock.close()

    def _check_connection(self) -> None:
        """Raise if the monitor reports the connection lost or the server refusing our key."""
        # plain ints: cheaper than poll(0), which builds a Poller, and than get() with the enums
        while self._monitor.getsockopt(_ZMQ_EVENTS) & _ZMQ_POLLIN:
            ev = recv_monitor_message(self._monitor)["event"]
            if ev == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._connected = True
            elif ev == zmq.EVENT_CONNECT_RETRIED and not self._connected:
                # ZeroMQ retries a refused connection silently: say so within seconds, once (a device
                # may start before its server, so it keeps trying)
                self._refused_since = self._refused_since or time.monotonic()
                waited = time.monotonic() - self._refused_since
                if waited >= REFUSED_HINT_AFTER_S and not getattr(self, "_hinted", False):
                    self._hinted = True
                    log.warning(
                        "device %d: nothing accepts connections at %s (refused for %.0f s); %s; still trying",
                        self.device_id,
                        self.server,
                        waited,
                        self._where_hint(),
                    )
            elif ev == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                raise _Fatal(
                    f"device {self.device_id}: the server refused this device's key (not in its allowed set, "
                    "or other connections holding it are silent: is the key used elsewhere?)"
                )
            elif ev in (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL):
                # a wrong server key looks like the server hanging up mid-handshake, every time
                self._failed_handshakes += 1
                if self._failed_handshakes >= 3:
                    raise _Fatal(
                        f"device {self.device_id}: the handshake with {self.server} failed "
                        f"{self._failed_handshakes} times (is server.key this server's public key?)"
                    )
            elif ev == zmq.EVENT_DISCONNECTED and self._connected:
                raise _Reconnect("lost the connection to the server")
            elif ev == zmq.EVENT_DISCONNECTED and not self._welcomed and not self._failed_handshakes:
                # cut before the transport handshake finished (a failed handshake is the
                # branch above's to count): a server at its connection limit cuts silent
                # connections; the HELLO went with the connection, so waiting for an answer
                # would only wait out the timeout: retry with a fresh socket
                raise _Reconnect("the server closed the connection before the handshake (busy?)")

    def _where_hint(self) -> str:
        return (
            f"is `multispin serve` running at {self.server}, bound to an address this host reaches "
            "(`serve --host 0.0.0.0` or its LAN address: the default 127.0.0.1 takes local devices only), "
            "with that TCP port open in its firewall?"
        )

    def _check_connect_deadline(self) -> None:
        """Give up (fatal) when no session started within ``connect_timeout_s`` of `run`."""
        if self.connect_timeout_s is None or self.sessions > 0:
            return
        if time.monotonic() - self._run_started <= self.connect_timeout_s:
            return
        if self._connected:
            why = "a connection was made but the server never welcomed this device"
        elif self._refused_since is not None:
            why = "connections refused (nothing listens there)"
        else:
            why = "no answer (no such host, or a firewall dropping the packets)"
        raise _Fatal(
            f"device {self.device_id}: no session with {self.server} within {self.connect_timeout_s:g} s "
            f"(--connect-timeout): {why}; {self._where_hint()}"
        )

    def _send(self, sock: zmq.Socket, msg: P.Message, limits: P.Limits) -> None:
        sock.send(P.encode_message(msg, limits))

    def _recv(self, sock: zmq.Socket, limits: P.Limits, allowed: Sequence[str], timeout_s: float) -> P.Message:
        deadline = time.monotonic() + timeout_s
        while True:
            if self._stop.is_set():
                raise _Reconnect("stop requested")
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Reconnect(f"server silent for {timeout_s:g} s")
            self._check_connection()
            self._check_connect_deadline()
            if self._poller.poll(int(min(left, 0.2) * 1000) + 1):  # sock.poll builds a Poller per call
                frames = sock.recv_multipart()
                if len(frames) != 1:
                    raise ProtocolError(f"message: expected one frame (got {len(frames)})")
                msg = P.decode_message(frames[0], limits, allowed=allowed)
                if isinstance(msg, P.ErrorMsg):
                    if msg.code in _FATAL_CODES:
                        raise _Fatal(f"device {self.device_id}: server refused ({msg.code}): {msg.reason}")
                    busy_s = (P.busy_wait_s(msg.reason) or BUSY_RETRY_S) if msg.code == "busy" else None
                    raise _Reconnect(f"server ended the session ({msg.code}): {msg.reason}", busy_s)
                return msg

    def _converse(self, sock: zmq.Socket, resume: bool) -> DeviceOutcome:
        try:
            return self._converse_inner(sock, resume)
        except ProtocolError as exc:
            # Our view and the server's disagree: say so, then resume from the server's record.
            try:
                sock.send(P.encode_message(P.ErrorMsg.make("protocol", exc)), zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
            raise _Reconnect(str(exc)) from None

    def _converse_inner(self, sock: zmq.Socket, resume: bool) -> DeviceOutcome:
        proto = DeviceProtocol(self.device_id, self._secret, self.prompt_ids, self.draft_name)
        hs = self._handshake_limits
        self._send(sock, proto.hello(resume), hs)
        welcomed = proto.receive(self._recv(sock, hs, proto.allowed, self.handshake_timeout_s))
        if isinstance(welcomed, P.AuthMsg):  # plaintext mode: answer the challenge
            self._send(sock, welcomed, hs)
            welcomed = proto.receive(self._recv(sock, hs, proto.allowed, self.handshake_timeout_s))
        assert isinstance(welcomed, Welcomed)
        limits = self._start(welcomed.welcome)
        self._welcomed = True
        dev = self.device
        assert dev is not None
        self.sessions += 1
        self._event("welcome", resumed=welcomed.welcome.resumed, tokens=len(dev.tokens))
        while True:
            event = proto.receive(self._recv(sock, limits, proto.allowed, self.server_timeout_s))
            if isinstance(event, Closed):
                self._server_digest = event.digest
                self._send(sock, P.ByeMsg.make("ack", dev.tokens), limits)
                self._event("bye", reason=event.reason, match=event.digest == proto.digest.digest())
                return self._outcome(event.reason == "done", event.reason)
            reply = self._act(sock, proto, event)
            if reply is not None:
                self._send(sock, reply, limits)

    def _act(self, sock: zmq.Socket, proto: DeviceProtocol, event: Event | P.AuthMsg) -> P.Message | None:
        """Do what the protocol's event asks of the model; return the message to send, if any."""
        dev = self.device
        assert dev is not None
        if isinstance(event, DraftRequested):
            self._fault_hook(sock, event.round)
            draft, seconds = self.drafter(dev, event.gamma, COUPLED if event.coupled else STANDARD)
            self.rounds += 1
            return proto.send_draft(draft.tokens, draft.q_at_tokens, seconds)
        if isinstance(event, QRequested):
            return proto.send_q(dev.upload_q(event.position))
        if isinstance(event, CorrectionRequested):
            t0 = time.perf_counter()
            token = int(dev.correct_locally(event.position, event.p_payload))
            return proto.send_correction(token, time.perf_counter() - t0)
        if isinstance(event, Committed):
            dev.commit(event.num_accepted, event.tokens)
            if event.next is not None:  # the COMMIT carried the next round's PLAN: draft it now
                return self._act(sock, proto, event.next)
        return None

    def _start(self, w: P.WelcomeMsg) -> P.Limits:
        """Rebuild the draft state from the server's record (fresh start and resume alike)."""
        if w.device_id != self.device_id:
            raise _Fatal(f"WELCOME.device_id: {w.device_id}, this is device {self.device_id}")
        if self.pair_name and w.pair != self.pair_name[: P.MAX_NAME_CHARS]:
            raise _Fatal(
                f"pair mismatch: the server runs pair {w.pair} (V = {w.vocab_size}), this device "
                f"{self.pair_name} (V = {self.lm.vocab_size}); start the device with --pair {w.pair}"
            )
        if tuple(w.tokens[: w.num_prompt]) != self.prompt_ids:
            raise _Fatal("WELCOME.tokens: the server's record does not start with this device's prompt")
        try:
            sampling = SamplingParams.make(temperature=w.temperature, top_k=w.top_k, top_p=w.top_p)
            ul, dl = make_codec(w.ul_codec), make_codec(w.dl_codec)
        except ConfigError as exc:
            raise _Fatal(f"WELCOME: {exc}") from None
        held = len(self.device.tokens) if self.device is not None else 0
        if held > len(w.tokens):
            # only a server whose journal was repaired takes committed tokens back; the same seed
            # draws them again, so the text is unchanged, but the operator should know
            log.warning(
                "device %d: the server's record is %d token(s) shorter than this device's "
                "(its journal was repaired); continuing from the server's record",
                self.device_id,
                held - len(w.tokens),
            )
            self._event("rolled_back", tokens=held - len(w.tokens))
        dev = DraftDevice(self.device_id, self.lm, sampling, ul, dl, w.seed, list(w.tokens))
        dev.num_prompt = w.num_prompt  # the record holds prompt + committed tokens
        self.device = dev
        self._num_prompt = w.num_prompt
        return P.Limits.for_session(w.vocab_size, w.gamma_max, ul, dl, w.max_prompt_tokens, w.max_new_tokens)

    def _fault_hook(self, sock: zmq.Socket, round_idx: int) -> None:
        f = self.fault
        if f is None or round_idx < f.round:
            return
        self.fault = None  # once
        self._event("fault", kind=f.kind, round=round_idx)
        if f.kind == "crash":
            os._exit(17)
        if f.kind == "vanish":
            sock.close(linger=0)
            raise _Vanish()
        time.sleep(f.seconds)


class _Vanish(Exception):
    pass


def normalise_endpoint(server: str) -> str:
    """``host:port`` → ``tcp://host:port``; anything ZeroMQ cannot connect to is a one-line error
    (a bare ``host:port`` used to make ZeroMQ wait silently until the server timeout)."""

    text = str(server).strip()
    if "://" not in text:
        text = "tcp://" + text
    scheme, rest = text.split("://", 1)
    if scheme == "tcp":
        m = re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[^:/\s]+):(\d+)", rest)
        if m and 1 <= int(m.group(2)) <= 65535:
            return text
    elif scheme in ("ipc", "inproc") and rest:
        return text
    raise ConfigError(f"server: expected HOST:PORT or tcp://HOST:PORT with a port in 1..65535 (got {server!r})")


def resolve_credentials(
    keys: DeviceKeys | str | os.PathLike | None, secret: str | bytes | None, device_id: int
) -> tuple[DeviceKeys | None, bytes | None]:
    """(device `device_id`'s keys, None) from a key folder, or (None, the shared secret) for the
    plaintext mode; raises if there is neither."""
    if keys is None:
        if secret is None and not os.environ.get(SECRET_ENV):
            raise ConfigError(
                "keys: give the device's key folder (made by `multispin keys device`), "
                "or a shared secret for a plaintext --insecure run"
            )
        return None, resolve_secret(secret)
    found = keys if isinstance(keys, DeviceKeys) else find_device_keys(keys, device_id)
    if found.device_id != device_id:
        raise ConfigError(f"keys: the key pair is device {found.device_id}'s, this is device {device_id}")
    return found, None


def build_device_client(
    server: str,
    device_id: int,
    secret: str | bytes | None,
    pair: str | LoadedPair,
    draft: str | None,
    prompt: str,
    *,
    keys: DeviceKeys | str | os.PathLike | None = None,
    resume: bool = True,
    reconnects: int = 5,
    server_timeout_s: float = 120.0,
    connect_timeout_s: float | None = None,
    fault: str | None = None,
    on_event: Callable[[dict], None] | None = None,
) -> DeviceClient:
    """A device for a named (or loaded) pair: its draft model and its tokenised prompt."""
    from multispin.models.hf import draft_lm

    keys, secret = resolve_credentials(keys, secret, device_id)  # fail fast, before loading any model
    server = normalise_endpoint(server)
    loaded = pair if isinstance(pair, LoadedPair) else resolve_pair(pair)
    name = loaded.check_drafts([draft or loaded.default_draft], "draft")[0]
    lm = draft_lm(loaded, name)
    ids = encode_prompt(loaded, prompt)
    return DeviceClient(
        server,
        device_id,
        secret,
        lm,
        ids,
        keys=keys,
        pair_name=loaded.name,
        draft_name=name,
        resume=resume,
        reconnects=reconnects,
        server_timeout_s=server_timeout_s,
        connect_timeout_s=connect_timeout_s,
        fault=fault,
        on_event=on_event,
    )


def shared_context(devices: int) -> zmq.Context:
    """One ZeroMQ context for ``devices`` DeviceClients (``context=``): a pool's devices share its
    I/O thread and descriptors (each device then holds 4 descriptors instead of 9). Its socket
    limit fits them all: a DEALER and its monitor's two ends each."""
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, max(1024, 3 * devices + 64))
    return ctx


def run_device(
    server: str,
    device_id: int,
    secret: str | bytes | None,
    pair: str | LoadedPair,
    draft: str | None,
    prompt: str,
    **options: Any,
) -> DeviceOutcome:
    """Build a device and run it until the server says BYE; the outcome carries the decoded text."""

    keys, secret = resolve_credentials(options.pop("keys", None), secret, device_id)  # fail fast
    normalise_endpoint(server)
    loaded = pair if isinstance(pair, LoadedPair) else resolve_pair(pair)
    client = build_device_client(server, device_id, secret, loaded, draft, prompt, keys=keys, **options)
    try:
        outcome = client.run()
    except KeyboardInterrupt as exc:  # SIGINT or SIGTERM: the text so far is the outcome (finished: false)
        outcome = client._outcome(False, "interrupted")
        outcome.text = loaded.tokenizer.decode(outcome.generated, skip_special_tokens=True)
        raise Interrupted.after(exc, "interrupted", outcome) from None
    outcome.text = loaded.tokenizer.decode(outcome.generated, skip_special_tokens=True)
    return outcome


__all__ = [
    "DeviceClient",
    "DeviceOutcome",
    "build_device_client",
    "normalise_endpoint",
    "run_device",
    "shared_context",
]
