"""The device side of one session, sans I/O (in the style of h11): decoded server messages in,
events out; explicit states; no sockets, no clocks, no threads, no model calls.

The loop (`device.DeviceClient`) feeds each message to `receive`, does what the event asks
(draft γ tokens, hand over q̂_j, sample the correction, apply the commit, then draft the next
round if the COMMIT carried its PLAN) and hands the result back through `send_draft` / `send_q` /
`send_correction`, which return the message to send.
A server message that does not fit the state is a `RemoteProtocolError`; a call the state
does not allow (the loop's own mistake) is a `LocalProtocolError`.

Handshake: START -hello-> AWAIT_CHALLENGE -WELCOME-> IDLE with per-device keys (the transport
authenticated both ends); in the plaintext debugging mode AWAIT_CHALLENGE -CHALLENGE->
AWAIT_WELCOME (AUTH sent, from the shared secret) -WELCOME-> IDLE. `Welcomed`: the loop checks the
session parameters and rebuilds its draft state.
States of one round: IDLE -PLAN-> DRAFTING -send_draft-> DRAFTED, then
  all accepted:  DRAFTED -COMMIT-> IDLE (or DRAFTING: the COMMIT carried the next PLAN)
  coupled rule:  DRAFTED -COMMIT-> IDLE | DRAFTING (never rejected: the COMMIT is its verdict)
  UL rejection:  DRAFTED -VERDICT-> SENDING_Q -send_q-> WAIT_COMMIT -COMMIT-> IDLE | DRAFTING
  DL rejection:  DRAFTED -VERDICT(p_j)-> CORRECTING -send_correction-> WAIT_COMMIT -COMMIT-> …
BYE ends the session from any state (CLOSED).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from multispin.errors import LocalProtocolError, RemoteProtocolError
from multispin.runtime.security.auth import compute_mac
from multispin.runtime.wire import messages as P


class DeviceState(enum.Enum):
    START = "start"
    AWAIT_CHALLENGE = "await_challenge"  # HELLO sent
    AWAIT_WELCOME = "await_welcome"  # AUTH sent
    IDLE = "idle"
    DRAFTING = "drafting"  # PLAN received; the loop drafts
    DRAFTED = "drafted"  # DRAFT sent; waiting for VERDICT (rejected) or COMMIT (all accepted)
    SENDING_Q = "sending_q"  # rejected in UL mode; the loop hands over q̂_j
    CORRECTING = "correcting"  # rejected in DL mode, p_j received; the loop samples the correction
    WAIT_COMMIT = "wait_commit"
    CLOSED = "closed"


@dataclass(frozen=True)
class Welcomed:
    welcome: P.WelcomeMsg  # the session parameters and the server's record of this device


@dataclass(frozen=True)
class DraftRequested:
    round: int
    gamma: int
    coupled: bool = False  # draft under the coupled rule (token ids only)


@dataclass(frozen=True)
class QRequested:
    position: int  # the first rejected position: upload q̂_j of it


@dataclass(frozen=True)
class CorrectionRequested:
    position: int
    p_payload: bytes  # DL codec bytes of p_j


@dataclass(frozen=True)
class Committed:
    round: int
    num_accepted: int
    tokens: tuple[int, ...]  # to append (the loop rolls the draft cache back, then appends)
    length: int  # the token count after the append (checked against the server's)
    digest: bytes
    next: DraftRequested | None = None  # the next round's PLAN, carried by this COMMIT


@dataclass(frozen=True)
class Closed:
    reason: str
    digest: bytes | None  # the server's digest of this device's tokens


Event = Welcomed | DraftRequested | QRequested | CorrectionRequested | Committed | Closed | None

_ROUND_TYPES = (P.VerdictMsg, P.CommitMsg)


_SESSION_TYPES = ("PLAN", "VERDICT", "COMMIT", "BYE", "ERROR")


class DeviceProtocol:
    """One connection of one device: the handshake, then its session."""

    def __init__(self, device_id: int, secret: bytes | None, prompt_ids: Sequence[int], draft_name: str = ""):
        self.device_id = device_id
        self._secret = secret
        self.prompt_ids = tuple(int(t) for t in prompt_ids)
        self.draft_name = draft_name
        self.digest = P.TokenDigest()  # running digest of the server's record, checked at every COMMIT
        self.state = DeviceState.START
        self.round = -1
        self._draft: tuple[int, ...] = ()
        self._coupled = False  # this round's rule, from its PLAN
        self._verdict: P.VerdictMsg | None = None
        self._correction: int | None = None

    @property
    def allowed(self) -> tuple[str, ...]:
        """Message types the loop should decode in this state (anything else is refused there)."""
        if self.state is DeviceState.AWAIT_CHALLENGE:
            return ("CHALLENGE", "WELCOME", "ERROR")
        if self.state is DeviceState.AWAIT_WELCOME:
            return ("WELCOME", "ERROR")
        return _SESSION_TYPES

    def hello(self, resume: bool) -> P.HelloMsg:
        self._require("HELLO", DeviceState.START)
        self.state = DeviceState.AWAIT_CHALLENGE
        return P.HelloMsg(self.device_id, self.prompt_ids, resume, self.draft_name)

    # -- server messages ----------------------------------------------------------------------

    def receive(self, msg: P.Message) -> Event | P.AuthMsg:
        """Take one decoded server message (ERROR is the loop's to handle); return the event, or
        during the handshake the AUTH answer to send."""
        if isinstance(msg, P.ChallengeMsg):
            self._expect(msg, DeviceState.AWAIT_CHALLENGE)
            if self._secret is None:
                raise RemoteProtocolError(
                    "CHALLENGE: the server asks for a shared secret (it runs "
                    "--insecure) but this device connects with keys"
                )
            self.state = DeviceState.AWAIT_WELCOME
            return P.AuthMsg(self.device_id, compute_mac(self._secret, msg.nonce, self.device_id))
        if isinstance(msg, P.WelcomeMsg):
            if self.state is not DeviceState.AWAIT_CHALLENGE or self._secret is not None:
                self._expect(msg, DeviceState.AWAIT_WELCOME)
            self.digest = P.TokenDigest(msg.tokens)
            self.state = DeviceState.IDLE
            return Welcomed(msg)
        if self.state in (DeviceState.START, DeviceState.AWAIT_CHALLENGE, DeviceState.AWAIT_WELCOME):
            raise RemoteProtocolError(f"{msg.TYPE}: unexpected in state {self.state.value}")
        if isinstance(msg, P.ByeMsg):
            self.state = DeviceState.CLOSED
            return Closed(msg.reason, msg.digest)
        if self.state is DeviceState.CLOSED:
            raise RemoteProtocolError(f"{msg.TYPE}: unexpected after BYE")
        if isinstance(msg, P.PlanMsg):
            self._expect(msg, DeviceState.IDLE)
            return self._plan(msg.round, msg.gamma, bool(msg.coupled))
        if not isinstance(msg, _ROUND_TYPES):
            raise RemoteProtocolError(f"{msg.TYPE}: not a message a device takes in a session")
        if msg.round != self.round:
            raise RemoteProtocolError(f"{msg.TYPE}.round: {msg.round} but this device is in round {self.round}")
        if isinstance(msg, P.VerdictMsg):
            return self._on_verdict(msg)
        return self._on_commit(msg)

    def _plan(self, round_idx: int, gamma: int, coupled: bool = False) -> DraftRequested:
        self.round, self._verdict, self._correction = round_idx, None, None
        self._coupled = coupled
        self.state = DeviceState.DRAFTING
        return DraftRequested(round_idx, gamma, coupled)

    def _expect(self, msg: P.Message, state: DeviceState) -> None:
        if self.state is not state:
            raise RemoteProtocolError(f"{msg.TYPE}: unexpected in state {self.state.value}")

    def _on_verdict(self, msg: P.VerdictMsg) -> Event:
        self._expect(msg, DeviceState.DRAFTED)
        drafted = len(self._draft)
        if msg.num_accepted >= drafted:
            raise RemoteProtocolError(
                f"VERDICT.num_accepted: {msg.num_accepted} leaves no drafted token of {drafted} to reject"
            )
        self._verdict = msg
        if self._coupled:
            raise RemoteProtocolError("VERDICT: a coupled draft is never rejected (its verdict is its COMMIT)")
        if msg.mode == "ul":
            self.state = DeviceState.SENDING_Q
            return QRequested(msg.num_accepted)
        self.state = DeviceState.CORRECTING
        return CorrectionRequested(msg.num_accepted, msg.payload)  # type: ignore[arg-type]

    def _on_commit(self, msg: P.CommitMsg) -> Committed:
        if self.state is DeviceState.DRAFTED and self._coupled:
            # the accepted drafts, then x*, which differs from the draft token where it stops
            num_accepted = _common_prefix(msg.tokens, self._draft)
            known = list(self._draft[:num_accepted])
        elif self.state is DeviceState.DRAFTED:  # no VERDICT came: every drafted token was accepted
            num_accepted, known = len(self._draft), list(self._draft)
        else:
            self._expect(msg, DeviceState.WAIT_COMMIT)
            assert self._verdict is not None
            num_accepted = self._verdict.num_accepted
            # the final token: the device's own DL correction; a UL one it learns from this COMMIT
            known = list(self._draft[:num_accepted]) + ([self._correction] if self._correction is not None else [])
        got = list(msg.tokens)
        if len(got) > num_accepted + 1 or got[: len(known)] != known[: len(got)]:
            raise RemoteProtocolError(
                f"COMMIT.tokens: {got} do not extend this round's {num_accepted} "
                f"accepted draft tokens {known[:num_accepted]}"
            )
        self.digest.update(got)
        if msg.length != self.digest.length or msg.digest != self.digest.digest():
            raise RemoteProtocolError(
                f"COMMIT.digest: the server's record ({msg.length} tokens) differs "
                f"from this device's ({self.digest.length} tokens)"
            )
        self.state = DeviceState.IDLE
        nxt = self._plan(msg.round + 1, msg.next_gamma, bool(msg.next_coupled)) if msg.next_gamma is not None else None
        return Committed(msg.round, num_accepted, msg.tokens, msg.length, msg.digest, nxt)

    # -- what the loop sends --------------------------------------------------------------------

    def _require(self, what: str, state: DeviceState) -> None:
        if self.state is not state:
            raise LocalProtocolError(f"{what}: not allowed in state {self.state.value}")

    def send_draft(
        self, tokens: Sequence[int], q_at_tokens: Sequence[float], compute_s: float | None = None
    ) -> P.DraftMsg:
        self._require("DRAFT", DeviceState.DRAFTING)
        if self._coupled and len(q_at_tokens):
            raise LocalProtocolError("DRAFT: a coupled draft carries token ids only")
        self._draft = tuple(int(t) for t in tokens)
        self.state = DeviceState.DRAFTED
        return P.DraftMsg.make(self.round, self._draft, q_at_tokens, compute_s)

    def send_q(self, payload: bytes) -> P.QPayloadMsg:
        self._require("Q_PAYLOAD", DeviceState.SENDING_Q)
        self.state = DeviceState.WAIT_COMMIT
        return P.QPayloadMsg(self.round, payload)

    def send_correction(self, token: int, compute_s: float | None = None) -> P.CorrectionMsg:
        self._require("CORRECTION", DeviceState.CORRECTING)
        self._correction = int(token)
        self.state = DeviceState.WAIT_COMMIT
        return P.CorrectionMsg(self.round, self._correction, compute_s)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
