"""The server side of the device sessions, sans I/O (in the style of h11): frames from a ROUTER
identity and the current time in; messages to send (`outbox`), log records (`events`) and
state out. No sockets, no clocks, no threads, no model calls.

It owns the handshake, admission (new device, resume, replacement of a live session), the
connection budget, bans, the per-connection expectation of the round protocol (which message,
for which round, with which γ) and the device records the summary reports. Two handshakes:
with per-device keys (CurveZMQ, the default) the transport has already authenticated the peer's
key, so HELLO → WELCOME once the key is the one bound to HELLO's device id (`check_claim`); in
the plaintext debugging mode a shared secret answers a challenge: HELLO → CHALLENGE,
AUTH → WELCOME. The server's link (`net/server_link.py`) sends what is in `outbox`, logs what
is in `events`, and tells the object when a send failed (`drop(..., notify=False)`). Each call
that sends a round's message (`plan`, `verdict`, `commit`, `bye`) also records what the
connection owes next, as the device side's `commit()` does: the loop never sets a state itself.

Connection states: IDLE (owes nothing) → AWAIT_DRAFT (PLAN sent, or a COMMIT that carried the
next round's PLAN) → IDLE (DRAFT taken) → AWAIT_Q / AWAIT_CORRECTION (rejected) → IDLE;
AWAIT_BYE after the server's BYE (a DRAFT the device was drafting when the BYE went out is
still taken, and dropped); CLOSED once the session ended (BYE, drop, replacement). A message the state does not allow (a remote
protocol error) drops the session with a one-line reason, never raises: the device may reconnect
and resume. A call the state does not allow (the loop's own mistake) raises `LocalProtocolError`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from multispin.errors import LocalProtocolError, ProtocolError
from multispin.runtime.round.engine import RoundRecord
from multispin.runtime.security.auth import check_mac, new_nonce
from multispin.runtime.security.limits import ConnectionBudget, ConnectionLimits
from multispin.runtime.wire import messages as P

SESSION_TYPES = ("DRAFT", "Q_PAYLOAD", "CORRECTION", "BYE", "ERROR")
HANDSHAKE_TYPES = ("HELLO", "AUTH")
MAX_BANNED = 4096  # identities whose messages are ignored after a drop/refusal
REPLACEMENT_WINDOW_S = 60.0  # max_replacements counts the replacements of a device in this window

#: (peer's public key or None, claimed device id) -> None if the key may claim the id, else why not
ClaimCheck = Callable[["str | None", int], "str | None"]


class ConnState(enum.Enum):
    IDLE = None
    AWAIT_DRAFT = "DRAFT"
    AWAIT_Q = "Q_PAYLOAD"
    AWAIT_CORRECTION = "CORRECTION"
    AWAIT_BYE = "BYE"
    CLOSED = "closed"


def draft_form_error(msg: P.DraftMsg, coupled: bool) -> str | None:
    """Why a DRAFT does not have the form its PLAN's rule asks for (None if it does): a coupled
    draft is token ids only (the server never reads q, so a device may not send it), a standard
    one carries one q̂ scalar per token (the acceptance test needs them)."""
    if coupled and msg.q:
        return f"DRAFT.q: {len(msg.q)} bytes of q scalars, but the PLAN put this device under the coupled rule (token ids only)"
    if not coupled and msg.tokens_only:
        return f"DRAFT.q: missing: a standard draft needs one q̂ scalar per token ({len(msg.tokens)} tokens, no scalars)"
    return None


@dataclass(eq=False)
class Connection:
    """One authenticated connection (a ROUTER identity) of one device."""

    identity: bytes
    device_id: int
    peer: str = ""  # the peer's public key (key mode) or "secret"
    state: ConnState = ConnState.IDLE
    round: int = -1  # the round the owed message belongs to
    gamma: int = 0  # the γ a owed DRAFT must hold
    coupled: bool = False  # the owed DRAFT is under the coupled rule: token ids only
    inbox: P.Message | None = None  # the owed message, once it arrived
    late_draft: int | None = None  # a BYE overtook the DRAFT of this round: take it, ignore it
    bytes_in: int = 0
    bytes_out: int = 0

    @property
    def alive(self) -> bool:
        return self.state is not ConnState.CLOSED


@dataclass
class Pending:
    identity: bytes
    hello: P.HelloMsg
    nonce: bytes  # the challenge; its deadline is the connection budget's


@dataclass
class DeviceEntry:
    """The server's view of one device across its sessions."""

    device_id: int
    draft: str
    num_prompt: int
    digest: P.TokenDigest
    conn: Connection | None = None
    finished: bool = False
    sessions: int = 0
    drops: list[str] = field(default_factory=list)
    rounds: list[RoundRecord] = field(default_factory=list)  # with history on
    num_rounds: int = 0  # rounds the device committed in (this server process)
    client_digest: bytes | None = None
    resumed_at: list[float] = field(default_factory=list)  # when a new session replaced or resumed one
    draft_misses: int = 0  # draft deadlines missed in a row (a DRAFT in time resets it)
    backoff_until: float = 0.0  # a straggler told to back off: its HELLOs are busy until then


class ServerProtocol:
    """All device sessions of one server.

    `records` maps each device to the server's record of its tokens (prompt + committed; the
    round engine's verifier owns it); `on_admit(d, prompt, peer)` opens a new device there (and
    may refuse it by raising `ProtocolError`); `welcome` holds the WELCOME fields that are the
    same for every device. Give `check_claim` (key mode) or `secret` (plaintext debugging)."""

    def __init__(
        self,
        secret: bytes | None,
        limits: P.Limits,
        records: Mapping[int, Sequence[int]],
        on_admit: Callable[[int, tuple[int, ...], str], None],
        welcome: dict[str, Any],
        *,
        max_devices: int,
        handshake_timeout_s: float,
        check_claim: ClaimCheck | None = None,
        connections: ConnectionLimits | None = None,
        history: bool = True,
        max_replacements: int = 10,
        nonce: Callable[[], bytes] = new_nonce,
    ):
        if (secret is None) == (check_claim is None):
            raise ValueError("ServerProtocol: give exactly one of secret and check_claim")
        self._secret = secret
        self._check_claim = check_claim
        self.history = history  # keep each device's round records (else only their count)
        self.limits = limits
        self.records = records
        self._on_admit = on_admit
        self._welcome = welcome
        self.max_devices = max_devices
        # one valid key can HELLO at will, each one replacing the live session (or resuming the
        # one its last socket closed): past this many new sessions of a device per minute the
        # newcomer is told to retry later (ERROR busy), and the device backs off
        self.max_replacements = max_replacements
        self.handshake_timeout_s = handshake_timeout_s
        self._nonce = nonce
        self.round_idx = 0  # the next round (WELCOME.next_round) and the round drops are logged in
        self.closing = False
        self.devices: dict[int, DeviceEntry] = {}
        self.conns: dict[bytes, Connection] = {}
        self.pending: dict[bytes, Pending] = {}
        self.budget = ConnectionBudget(
            connections
            or ConnectionLimits(max_connections=max(512, 2 * max_devices), handshake_deadline_s=handshake_timeout_s)
        )
        self.banned: dict[bytes, None] = {}
        self.refused = 0
        self.outbox: list[tuple[bytes, Connection | None, P.Message]] = []
        self.events: list[dict[str, Any]] = []

    # -- output ---------------------------------------------------------------------------------

    def _event(self, event: str, **fields_: Any) -> None:
        self.events.append({"event": event, **fields_})

    def send(self, target: Connection | bytes, msg: P.Message) -> bool:
        """Queue one message; False (nothing queued) when the connection is closed."""
        if isinstance(target, Connection):
            if not target.alive:
                return False
            self.outbox.append((target.identity, target, msg))
        else:
            self.outbox.append((target, None, msg))
        return True

    # -- input ----------------------------------------------------------------------------------

    def receive(self, identity: bytes, frames: Sequence[bytes], now: float, peer_key: str | None = None) -> None:
        """One multipart message (the identity frame removed) from `identity`, whose transport
        authenticated `peer_key` (key mode)."""
        if identity in self.banned:
            return
        conn = self.conns.get(identity)
        if len(frames) != 1:
            reason = f"message: expected one frame (got {len(frames)})"
            if conn is not None:
                self.drop(conn, "protocol", reason)
            else:
                self.refuse(identity, "protocol", reason)
            return
        if conn is not None:
            conn.bytes_in += len(frames[0])
            try:
                msg = P.decode_message(frames[0], self.limits, allowed=SESSION_TYPES)
            except ProtocolError as exc:
                self.drop(conn, "protocol", str(exc))
                return
            self._on_session_message(conn, msg)
            return
        self.expire(now)  # before the budget frees overdue slots itself: their HELLOs go too
        cause = self.budget.admit(identity, now)
        if cause is not None:
            self.refuse(identity, "busy", cause, ban=False)  # a slot may free up: retry, no ban
            return
        self._on_handshake(identity, frames[0], peer_key, now)

    def expire(self, now: float) -> None:
        """Refuse every handshake whose AUTH is overdue."""
        for identity in self.budget.expired(now):
            assert isinstance(identity, bytes)  # the budget holds what `receive` admitted: ZeroMQ identities
            pend = self.pending.pop(identity, None)
            self.refuse(
                identity,
                "auth",
                f"no AUTH within {self.handshake_timeout_s:g} s",
                device=pend.hello.device_id if pend else None,
            )

    # -- handshake ------------------------------------------------------------------------------

    def _on_handshake(self, identity: bytes, raw: bytes, peer_key: str | None, now: float) -> None:
        pend = self.pending.pop(identity, None)
        try:
            msg = P.decode_message(raw, self.limits, allowed=("AUTH",) if pend else ("HELLO",))
        except ProtocolError as exc:
            if pend is None and self._foreign_vocabulary(raw):
                # not a damaged message: a device of another pair, whose token ids overflow this
                # vocabulary; retrying cannot help, so refuse it (fatal) and name the server's pair
                self.refuse(identity, "refused", f"{self.pair_line()}; the device's HELLO has {exc}")
                return
            self.refuse(identity, "protocol", str(exc), device=pend.hello.device_id if pend else None)
            return
        if isinstance(msg, P.HelloMsg):
            self._on_hello(identity, msg, peer_key, now)
        else:
            assert isinstance(msg, P.AuthMsg) and pend is not None
            self._on_auth(pend, msg, now)

    def pair_line(self) -> str:
        """Which pair and vocabulary this server runs, and the flag a device of another pair lacks."""
        pair = self._welcome.get("pair", "?")
        return f"pair mismatch: the server runs pair {pair} (V = {self.limits.vocab_size}); start the device with --pair {pair}"

    def _foreign_vocabulary(self, raw: bytes) -> bool:
        """Whether ``raw`` is a well-formed HELLO once any token id is allowed: a device of a
        pair with a larger vocabulary than this server's."""
        try:
            P.decode_message(raw, replace(self.limits, vocab_size=P.MAX_U32), allowed=("HELLO",))
        except ProtocolError:
            return False
        return True

    def _on_hello(self, identity: bytes, hello: P.HelloMsg, peer_key: str | None, now: float) -> None:
        d = hello.device_id
        if hello.version != P.PROTOCOL_VERSION:
            self.refuse(
                identity,
                "refused",
                f"HELLO.version: server speaks {P.PROTOCOL_VERSION} (got {hello.version})",
                device=d,
            )
        elif self._check_claim is not None:  # key mode: the transport authenticated the key
            why = self._check_claim(peer_key, d)
            if why is not None:
                self.refuse(identity, "auth", f"HELLO.device_id: {why}", device=d, auth=True)
            else:
                self._admit_checked(identity, hello, peer_key or "", now)
        else:
            nonce = self._nonce()
            self.pending[identity] = Pending(identity, hello, nonce)
            self.send(identity, P.ChallengeMsg(nonce))

    def _on_auth(self, pend: Pending, auth: P.AuthMsg, now: float) -> None:
        identity, hello, d = pend.identity, pend.hello, pend.hello.device_id
        if auth.device_id != d:
            self.refuse(
                identity, "auth", f"AUTH.device_id: {auth.device_id} differs from HELLO's {d}", device=d, auth=True
            )
        elif not check_mac(self._secret, pend.nonce, d, auth.mac):  # type: ignore[arg-type]
            self.refuse(identity, "auth", "authentication failed (wrong secret)", device=d, auth=True)
        else:
            self._admit_checked(identity, hello, "secret", now)

    def _admit_checked(self, identity: bytes, hello: P.HelloMsg, peer: str, now: float) -> None:
        """An authenticated HELLO: admit it unless the server is closing or admission refuses."""
        if self.closing:
            self.refuse(identity, "shutdown", "server is shutting down", device=hello.device_id)
            return
        churn = self._churn_refusal(hello.device_id, now)
        if churn is not None:  # busy, not refused: the device may come back later, backing off
            self.refuse(identity, "busy", churn, device=hello.device_id, ban=False)
            return
        reason = self._admission_refusal(hello)
        if reason is None:
            try:
                self._admit(identity, hello, peer, now)
                return
            except ProtocolError as exc:  # on_admit refused (e.g. the journal holds another session)
                reason = str(exc)
        self.refuse(identity, "refused", reason, device=hello.device_id)

    def _churn_refusal(self, d: int, now: float) -> str | None:
        """Why a HELLO that would start device d's session once more is turned away, if it is."""
        dev = self.devices.get(d)
        if dev is None:
            return None
        if now < dev.backoff_until:
            return P.busy_reason(
                f"device {d} missed its draft deadline {dev.draft_misses} rounds in a row", dev.backoff_until - now
            )
        dev.resumed_at = [t for t in dev.resumed_at if now - t < REPLACEMENT_WINDOW_S]
        if len(dev.resumed_at) < self.max_replacements:
            return None
        return (
            f"device {d}'s session was replaced {len(dev.resumed_at)} times in the last "
            f"{REPLACEMENT_WINDOW_S:g} s; retry later"
        )

    def missed_draft(self, d: int, now: float, max_misses: int, backoff_s: float) -> bool:
        """Device d missed its draft deadline once more; True when that makes ``max_misses`` in a
        row: it is then told to back off (its HELLOs are busy for ``backoff_s``)."""
        dev = self.devices[d]
        dev.draft_misses += 1
        if dev.draft_misses < max_misses:
            return False
        dev.backoff_until = now + backoff_s
        return True

    def drafted(self, d: int) -> None:
        """Device d's DRAFT came in time: its misses start again from zero."""
        self.devices[d].draft_misses = 0

    def _admission_refusal(self, hello: P.HelloMsg) -> str | None:
        d = hello.device_id
        dev = self.devices.get(d)
        if dev is None:
            if len(self.devices) >= self.max_devices:
                return f"server full ({self.max_devices} devices)"
            return None
        if not hello.resume:
            return f"HELLO.resume: device {d} already has a record on this server; reconnect with resume"
        if tuple(self.records[d][: dev.num_prompt]) != hello.prompt:
            return f"HELLO.prompt: differs from the server's record of device {d}"
        return None

    def _admit(self, identity: bytes, hello: P.HelloMsg, peer: str, now: float) -> None:
        d = hello.device_id
        dev = self.devices.get(d)
        resumed = dev is not None
        if dev is None:
            self._on_admit(d, hello.prompt, peer)
            dev = DeviceEntry(d, hello.draft, len(hello.prompt), P.TokenDigest(hello.prompt))
            self.devices[d] = dev
        else:
            dev.resumed_at.append(now)
            if dev.conn is not None and dev.conn.alive:
                self.drop(dev.conn, "replaced", "replaced by a new authenticated session")
        dev.draft = dev.draft or hello.draft  # a session recovered from the journal learns it now
        self.budget.established(identity)
        conn = Connection(identity, d, peer)
        self.conns[identity] = conn
        dev.conn = conn
        dev.sessions += 1
        record = tuple(self.records[d])
        self.send(
            conn,
            P.WelcomeMsg(
                device_id=d,
                tokens=record,
                num_prompt=dev.num_prompt,
                next_round=self.round_idx,
                resumed=resumed,
                **self._welcome,
            ),
        )
        self._event(
            "resume" if resumed else "join",
            device=d,
            draft=hello.draft,
            tokens=len(record),
            generated=len(record) - dev.num_prompt,
            session=dev.sessions,
        )
        if dev.finished:
            self.bye(conn, "done")

    # -- ending sessions ------------------------------------------------------------------------

    def refuse(
        self,
        identity: bytes,
        code: str,
        reason: str,
        device: int | None = None,
        auth: bool = False,
        ban: bool = True,
        notify: bool = True,
    ) -> None:
        """Turn away a connection that has no session (it never gets one); `notify=False` when
        the peer is gone and would never read the ERROR."""
        self.refused += 1
        self._event("auth_refused" if auth else "refused", device=device, code=code, reason=reason)
        if notify:
            self.send(identity, P.ErrorMsg.make(code, reason))
        self.budget.close(identity)
        if ban:
            self._ban(identity)

    def restore(self, d: int, num_prompt: int, finished: bool) -> None:
        """A device session recovered from the journal (its record already in `records`): it has
        no connection until the device reconnects with resume."""
        self.devices[d] = DeviceEntry(d, "", num_prompt, P.TokenDigest(self.records[d]), finished=finished)

    def _ban(self, identity: bytes) -> None:
        self.banned[identity] = None
        while len(self.banned) > MAX_BANNED:
            self.banned.pop(next(iter(self.banned)))

    def _close(self, conn: Connection) -> DeviceEntry | None:
        conn.state = ConnState.CLOSED
        self.conns.pop(conn.identity, None)
        self.budget.close(conn.identity)
        self._ban(conn.identity)
        dev = self.devices.get(conn.device_id)
        if dev is not None and dev.conn is conn:
            dev.conn = None
            return dev
        return None

    def drop(self, conn: Connection, code: str, reason: str, notify: bool = True) -> None:
        """End one authenticated session (the device may come back and resume)."""
        if not conn.alive:
            return
        if notify:
            self.send(conn.identity, P.ErrorMsg.make(code, reason))  # best effort
        dev = self._close(conn)
        if dev is not None:
            dev.drops.append(reason)
        self._event("drop", device=conn.device_id, code=code, reason=reason, round=self.round_idx)

    def connection_lost(self, identity: bytes, reason: str) -> None:
        """The transport closed `identity`'s connection (the peer left or crashed, or sent a frame
        over the transport's size limit): its session ends now, not at the round timeout."""
        conn = self.conns.get(identity)
        if conn is not None:
            self.drop(conn, "gone", reason, notify=False)
        elif identity in self.pending or self.budget.is_pending(identity):  # a handshake cut short
            pend = self.pending.pop(identity, None)
            self.refuse(
                identity, "gone", reason, device=pend.hello.device_id if pend else None, ban=False, notify=False
            )

    def bye(self, conn: Connection, reason: str) -> None:
        """The server's BYE with its digest of the device's record; the device owes its own."""
        if conn.state is ConnState.AWAIT_DRAFT:  # a COMMIT planned a round that will not run
            conn.late_draft = conn.round
        conn.state = ConnState.AWAIT_BYE
        self.send(conn, P.ByeMsg.make(reason, self.records[conn.device_id]))

    # -- the round protocol ---------------------------------------------------------------------

    def _expect(
        self, conn: Connection, state: ConnState, round_idx: int, gamma: int = 0, coupled: bool = False
    ) -> None:
        """`conn` owes the message of `state` for `round_idx` (a DRAFT of `gamma` tokens, under the
        coupled rule if `coupled`)."""
        self._require_idle(conn, f"expect {state.value}")
        if conn.alive:  # a closed session stays closed
            conn.state, conn.round, conn.gamma, conn.inbox = state, round_idx, gamma, None
            conn.coupled = coupled

    def plan(self, conn: Connection, round_idx: int, gamma: int, coupled: bool = False) -> None:
        """PLAN round `round_idx` (γ = `gamma`, the coupled rule if `coupled`): the connection then
        owes that round's DRAFT."""
        self._expect(conn, ConnState.AWAIT_DRAFT, round_idx, gamma, coupled)
        self.send(conn, P.PlanMsg(round_idx, gamma, True if coupled else None))

    def verdict(
        self, conn: Connection, round_idx: int, num_accepted: int, mode: str, p_payload: bytes | None = None
    ) -> None:
        """The VERDICT of a rejected draft: the connection then owes its Q_PAYLOAD (UL) or its
        CORRECTION (DL, sampled from ``p_payload``). An accepted draft's verdict is its COMMIT."""
        self._expect(conn, ConnState.AWAIT_Q if mode == "ul" else ConnState.AWAIT_CORRECTION, round_idx)
        self.send(conn, P.VerdictMsg(round_idx, num_accepted, mode, p_payload))

    def commit(
        self,
        conn: Connection,
        round_idx: int,
        kept: Sequence[int],
        record: RoundRecord,
        finished: bool,
        next_gamma: int | None = None,
        next_coupled: bool = False,
    ) -> None:
        """COMMIT the kept tokens (the engine already appended them to the record) over the
        round's connection; BYE if the device is done. `next_gamma`: the PLAN of round
        `round_idx + 1`, sent in the COMMIT (the connection then owes that round's DRAFT)."""
        self._require_idle(conn, "COMMIT")
        if finished and next_gamma is not None:
            raise LocalProtocolError(f"COMMIT: device {conn.device_id} is done; it gets no next PLAN")
        dev = self.devices[conn.device_id]
        dev.digest.update(kept)
        dev.num_rounds += 1
        if self.history:
            dev.rounds.append(record)
        if conn.alive:
            conn.state = ConnState.IDLE
        coupled = True if next_gamma is not None and next_coupled else None
        self.send(
            conn, P.CommitMsg(round_idx, tuple(kept), dev.digest.length, dev.digest.digest(), next_gamma, coupled)
        )
        if next_gamma is not None:
            self._expect(conn, ConnState.AWAIT_DRAFT, round_idx + 1, next_gamma, next_coupled)
        if finished:
            dev.finished = True
            if conn.alive:
                self.bye(conn, "done")

    @staticmethod
    def planned(conn: Connection, round_idx: int) -> bool:
        """Whether `conn` was given round `round_idx`'s PLAN already (in a COMMIT): it owes, or
        has delivered, that round's DRAFT."""
        if conn.round != round_idx:
            return False
        return conn.state is ConnState.AWAIT_DRAFT or isinstance(conn.inbox, P.DraftMsg)

    @staticmethod
    def _require_idle(conn: Connection, what: str) -> None:
        """A live connection that still owes a message cannot be given the next step."""
        if conn.alive and conn.state is not ConnState.IDLE:
            raise LocalProtocolError(
                f"{what}: device {conn.device_id}'s connection still owes {conn.state.value} for round {conn.round}"
            )

    def _on_session_message(self, conn: Connection, msg: P.Message) -> None:
        d = conn.device_id
        if isinstance(msg, P.ErrorMsg):
            self._event("device_error", device=d, code=msg.code, reason=msg.reason)
            self.drop(conn, "protocol", f"device reported {msg.code}: {msg.reason}", notify=False)
        elif isinstance(msg, P.ByeMsg):
            if conn.state is ConnState.AWAIT_BYE:
                self._on_bye(conn, msg)
            else:
                self.drop(conn, "protocol", f"device left: {msg.reason}", notify=False)
        elif conn.state is ConnState.AWAIT_BYE and isinstance(msg, P.DraftMsg) and msg.round == conn.late_draft:
            conn.late_draft = None  # drafted for a round the BYE called off: nothing to do
        elif conn.state.value != msg.TYPE or getattr(msg, "round", None) != conn.round:
            want = f"{conn.state.value} for round {conn.round}" if conn.state.value else "nothing"
            self.drop(conn, "protocol", f"{msg.TYPE}: unexpected (round {getattr(msg, 'round', '?')}; expected {want})")
        elif isinstance(msg, P.DraftMsg) and len(msg.tokens) != conn.gamma:
            self.drop(conn, "protocol", f"DRAFT.tokens: {len(msg.tokens)} ids but PLAN asked for γ = {conn.gamma}")
        elif isinstance(msg, P.DraftMsg) and (reason := draft_form_error(msg, conn.coupled)):
            self.drop(conn, "protocol", reason)
        else:
            conn.inbox = msg
            conn.state = ConnState.IDLE

    def _on_bye(self, conn: Connection, msg: P.ByeMsg) -> None:
        d = conn.device_id
        dev = self.devices[d]
        dev.client_digest = msg.digest
        server_digest = dev.digest.digest()
        self._event(
            "bye",
            device=d,
            tokens=len(self.records[d]),
            device_tokens=msg.length,
            digest=server_digest.hex(),
            device_digest=msg.digest.hex() if msg.digest else None,
            match=msg.digest == server_digest,
        )
        self._close(conn)
