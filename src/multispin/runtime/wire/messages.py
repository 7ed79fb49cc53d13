"""Messages of the networked Multi-SPIN round protocol (docs/system-model.md §1 and §4), their msgpack
wire form, and the size limits every receiver enforces before it trusts a byte.

One round, server S and device D (ZeroMQ ROUTER at S, one DEALER per device):

    D → S  HELLO      device id, prompt ids, resume?          (once per connection)
    S → D  CHALLENGE  32-byte nonce
    D → S  AUTH       HMAC-SHA256(secret, nonce ‖ device id)
    S → D  WELCOME    session parameters + the server's record of D's tokens (resume state)
    ------------------------------------------------------------------ every round r
    S → D  PLAN       r, γ_D, coupled?       (only where the last COMMIT did not carry it)
    D → S  DRAFT      r, γ token ids, γ scalars q̂_i(x_i) (float64, packed; none if coupled)
    S → D  VERDICT    r, accepted count, mode (+ codec bytes of p_j in DL)   (rejected drafts only)
      UL:  D → S  Q_PAYLOAD   codec bytes of q̂_j
      DL:  D → S  CORRECTION  token id, sampled on the device from p_j
    S → D  COMMIT     r, tokens appended (accepted drafts + bonus or correction), length and
                      sha256 digest of D's tokens so far, and the next round's γ (its PLAN)
    ------------------------------------------------------------------

Protocol version 3 (version 3 added the verification rule, below; version 2 is version 3 without it;
version 1 sent PLAN, VERDICT, CORRECTION and P_PAYLOAD as messages of their
own: six to eight per device and round). Each message now carries everything its receiver acts
on, so a device wakes twice in a round whose draft is all accepted (COMMIT + next PLAN, then it
sends DRAFT) and four times after a rejection: an accepted draft's verdict is its COMMIT (the
bonus is its last token), a UL correction's token reaches the device in the COMMIT, p_j rides in
its VERDICT, and the next round's PLAN in the COMMIT whenever the server already knows that
round (not for a session's first round, a device that joins or resumes between rounds, the
last round, or a round before which a steady-state job hands over to its successor).
A device the PLAN puts under the coupled rule (``coupled``: true; fixed before it drafts) drafts
argmax(log q + G) with the noise of its session (`speculative.coupled`, keyed by WELCOME's seed
and its device id), sends token ids only, and is never rejected: its verdict is its COMMIT, whose
tokens are the accepted drafts and the server's x* (the accepted count is their common prefix
with the draft, since x* differs from the draft token where it stops).
    S → D  BYE        done / shutdown (+ digest);  D → S  BYE (its own digest)
    either ERROR      code + one-line reason (the sender then forgets the session)

Wire form: one ZeroMQ frame per message holding one msgpack map ``{"t": TYPE, field: value}``.
Token ids are msgpack ints / int arrays; distributions and q scalars are msgpack ``bin``; no
text or float arrays. A Q_PAYLOAD or DL VERDICT carries exactly ``codec.num_bytes(V)`` payload
bytes, so what crosses the wire is what the optimiser plans with (plus a few envelope bytes).

Limits (``Limits``): each message type has a byte limit derived from V, γ_max, the codecs' sizes
and the prompt/context caps; ``decode_message`` refuses anything over it before unpacking, then
checks every field's type and range and raises ``ProtocolError`` with a one-line reason that
names the message type and field (e.g. ``DRAFT.tokens: 21 ids, more than γ_max = 20``).
"""

from __future__ import annotations

import hashlib
import math
import re
import struct
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, NoReturn

import msgpack

from multispin.errors import ProtocolError
from multispin.runtime.security.auth import MAC_BYTES, NONCE_BYTES
from multispin.safe_text import escape_controls, has_controls
from multispin.speculative.verify import DEFAULT_GAMMA_MAX, check_draft
from multispin.vocabulary import LINK_MODES

# 2: PLAN rides in COMMIT, p_j in VERDICT, no VERDICT for an accepted draft; 3: PLAN and COMMIT say
# the verification rule, a coupled DRAFT is token ids only
PROTOCOL_VERSION = 3
DIGEST_BYTES = 32
MAX_ROUND = 2**31 - 1
MAX_DEVICE_ID = 2**31 - 1
MAX_SEED = 2**63 - 1
MAX_U32 = 2**32 - 1
MAX_REASON_CHARS = 200
MAX_NAME_CHARS = 64
MAX_EOS_IDS = 16
Q_SCALAR_BYTES = 8  # q̂_i(x_i) travels as little-endian float64: the server tests exactly what the device drew with

# msgpack sizes used by the limits: an int field is at most 9 bytes, a token id (V < 2^32) at
# most 5, an array/bin/str header at most 5; ENVELOPE covers the type tag and the field names.
_INT_BYTES = 9
_TOKEN_BYTES = 5
_HEADER_BYTES = 5
ENVELOPE_BYTES = 160

# busy: the server is at its connection or handshake limit; try again (the others that refuse a
# HELLO, auth and refused, are final)
ERROR_CODES = ("auth", "refused", "protocol", "timeout", "replaced", "shutdown", "internal", "busy")

# A busy answer that knows how long the device is kept out ends with this phrase, which the device
# reads to wait that long before it rejoins (`busy_reason`, `busy_wait_s`).
_BACK_OFF = re.compile(r"back off for (\d{1,9}(?:\.\d{1,3})?) s$")


def busy_reason(cause: str, wait_s: float) -> str:
    """An ERROR busy reason that tells the device to come back in ``wait_s`` seconds."""
    return f"{cause}; back off for {max(wait_s, 0.0):.1f} s"


def busy_wait_s(reason: str) -> float | None:
    """The seconds a busy reason asks the device to wait (`busy_reason`), or None."""
    m = _BACK_OFF.search(reason)
    return float(m.group(1)) if m else None


def _u32_bytes(tokens: Iterable[int]) -> tuple[bytes, int]:
    """Token ids as little-endian uint32 bytes, and their count. struct, not numpy: a round
    commits γ + 1 ids at most, and numpy's per-call cost is most of the work at that size."""
    ids = tokens if isinstance(tokens, (list, tuple)) else list(tokens)
    try:
        return struct.pack(f"<{len(ids)}I", *ids), len(ids)
    except struct.error:  # negative, ≥ 2^32 or not an integer
        raise ProtocolError("tokens: ids must lie in [0, 2^32)") from None


def token_digest(tokens: Iterable[int]) -> bytes:
    """sha256 of the token ids as little-endian uint32: the fingerprint both ends compare."""
    return hashlib.sha256(_u32_bytes(tokens)[0]).digest()


class TokenDigest:
    """Running `token_digest`: O(new tokens) per update, same bytes as hashing the whole list."""

    def __init__(self, tokens: Iterable[int] = ()):
        self._h = hashlib.sha256()
        self.length = 0
        self.update(tokens)

    def update(self, tokens: Iterable[int]) -> None:
        raw, n = _u32_bytes(tokens)
        self._h.update(raw)
        self.length += n

    def digest(self) -> bytes:
        return self._h.copy().digest()


def _one_line(text: object, limit: int = MAX_REASON_CHARS) -> str:
    s = escape_controls(" ".join(str(text).split()))
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _show(value: object) -> str:
    if isinstance(value, (bytes, bytearray)):
        return f"{len(value)} bytes"
    if isinstance(value, (list, tuple)):
        return f"array of {len(value)}"
    if isinstance(value, dict):
        return "map"
    return _one_line(repr(value), 40)


# --------------------------------------------------------------------------------------------
# Limits
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """What a receiver accepts: vocabulary, γ_max, payload sizes and token-count caps."""

    vocab_size: int
    gamma_max: int = DEFAULT_GAMMA_MAX
    ul_payload_bytes: int = 0  # codec.num_bytes(V) of the UL codec (0 = not known yet)
    dl_payload_bytes: int = 0
    max_prompt_tokens: int = 4096
    max_new_tokens: int = 8192

    def __post_init__(self) -> None:
        for name, lo, hi in (
            ("vocab_size", 1, MAX_U32),
            ("gamma_max", 0, 4096),
            ("ul_payload_bytes", 0, 1 << 30),
            ("dl_payload_bytes", 0, 1 << 30),
            ("max_prompt_tokens", 1, 1 << 24),
            ("max_new_tokens", 1, 1 << 24),
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ProtocolError(f"limits.{name}: must be an integer in [{lo}, {hi}] (got {v!r})")
        object.__setattr__(self, "_table", self._build_table())
        object.__setattr__(self, "_max_of", {})

    @classmethod
    def for_session(
        cls,
        vocab_size: int,
        gamma_max: int,
        ul_codec,
        dl_codec,
        max_prompt_tokens: int = 4096,
        max_new_tokens: int = 8192,
    ) -> Limits:
        """Limits of one session; codecs are `Codec` objects (their num_bytes(V) sets the payloads)."""
        return cls(
            vocab_size=vocab_size,
            gamma_max=gamma_max,
            ul_payload_bytes=ul_codec.num_bytes(vocab_size),
            dl_payload_bytes=dl_codec.num_bytes(vocab_size),
            max_prompt_tokens=max_prompt_tokens,
            max_new_tokens=max_new_tokens,
        )

    @property
    def max_context_tokens(self) -> int:
        return self.max_prompt_tokens + self.max_new_tokens

    def _ids(self, n: int) -> int:
        return _HEADER_BYTES + _TOKEN_BYTES * n

    def max_bytes(self, type_name: str) -> int:
        """Largest encoded size in bytes a message of this type may have."""
        try:
            return self._table[type_name]  # type: ignore[attr-defined]
        except KeyError:
            raise ProtocolError(f"message.t: unknown message type {type_name!r}") from None

    def max_bytes_of(self, types: tuple[str, ...] | None) -> int:
        """Largest limit among `types` (all types if None): what a receiver unpacks at most."""
        cache = self._max_of  # type: ignore[attr-defined]
        if types not in cache:
            cache[types] = max(self.max_bytes(t) for t in (types or MESSAGE_TYPES))
        return cache[types]

    def _build_table(self) -> dict[str, int]:
        env, i, h = ENVELOPE_BYTES, _INT_BYTES, _HEADER_BYTES
        name = h + 4 * MAX_NAME_CHARS  # utf-8: at most 4 bytes a char
        reason = h + 4 * MAX_REASON_CHARS
        g = self.gamma_max
        table = {
            "HELLO": env + 3 * i + name + self._ids(self.max_prompt_tokens),
            "CHALLENGE": env + h + NONCE_BYTES,
            "AUTH": env + i + h + MAC_BYTES,
            "WELCOME": 2 * env + 12 * i + 3 * name + self._ids(MAX_EOS_IDS) + self._ids(self.max_context_tokens),
            "PLAN": env + 3 * i,
            "DRAFT": env + 2 * i + self._ids(g) + h + Q_SCALAR_BYTES * g,
            "VERDICT": env + 3 * i + h + self.dl_payload_bytes,
            "Q_PAYLOAD": env + i + h + self.ul_payload_bytes,
            "CORRECTION": env + 3 * i,
            "COMMIT": env + 4 * i + self._ids(g + 1) + h + DIGEST_BYTES,
            "BYE": env + i + reason + h + DIGEST_BYTES,
            "ERROR": env + h + 16 + reason,
        }
        return table

    @property
    def max_message_bytes(self) -> int:
        return self.max_bytes_of(None)

    def table(self) -> dict[str, int]:
        return {t: self.max_bytes(t) for t in MESSAGE_TYPES}


# --------------------------------------------------------------------------------------------
# Field checks: each returns the normalised value or raises ProtocolError naming the field
# --------------------------------------------------------------------------------------------

FieldCheck = Callable[[str, object, Limits], Any]  # the value as decoded: any msgpack type


def _in_range(where: str, v: object, lo: int, hi: int) -> int:
    if type(v) is not int:
        raise ProtocolError(f"{where}: expected an integer in [{lo}, {hi}] (got {type(v).__name__})")
    if not lo <= v <= hi:
        raise ProtocolError(f"{where}: {v} is outside [{lo}, {hi}]")
    return v


def _int(lo: int | Callable[[Limits], int], hi: int | Callable[[Limits], int]) -> FieldCheck:
    def check(where: str, v: object, lim: Limits) -> int:
        return _in_range(where, v, lo(lim) if callable(lo) else lo, hi(lim) if callable(hi) else hi)

    return check


def _token(where: str, v: object, lim: Limits) -> int:
    # the range check itself, not _int(...)(...): a closure built per token costs more than the check
    return _in_range(where, v, 0, lim.vocab_size - 1)


def _bool(where: str, v: object, lim: Limits) -> bool:
    if type(v) is not bool:
        raise ProtocolError(f"{where}: expected true/false (got {type(v).__name__})")
    return v


def _float(lo: float, hi: float, lo_open: bool = False) -> FieldCheck:
    def check(where: str, v: object, lim: Limits) -> float:
        if type(v) is int:
            v = float(v)
        if type(v) is not float:
            raise ProtocolError(f"{where}: expected a number (got {type(v).__name__})")
        if not math.isfinite(v) or v < lo or v > hi or (lo_open and v == lo):
            lo_b = "(" if lo_open else "["
            raise ProtocolError(f"{where}: {v!r} is outside {lo_b}{lo}, {hi}]")
        return v

    return check


def _str(max_chars: int, choices: Sequence[str] | None = None) -> FieldCheck:
    def check(where: str, v: object, lim: Limits) -> str:
        if type(v) is not str:
            raise ProtocolError(f"{where}: expected a string (got {type(v).__name__})")
        if len(v) > max_chars:
            raise ProtocolError(f"{where}: {len(v)} characters, more than {max_chars}")
        if has_controls(v):  # a newline or ESC would forge or erase the lines that show it
            raise ProtocolError(f"{where}: holds control characters ({_one_line(repr(v), 40)})")
        if choices is not None and v not in choices:
            raise ProtocolError(f"{where}: {_show(v)} is not one of {', '.join(choices)}")
        return v

    return check


def _bin(exact: int | Callable[[Limits], int], what: str = "bytes") -> FieldCheck:
    def check(where: str, v: object, lim: Limits) -> bytes:
        n = exact(lim) if callable(exact) else exact
        if type(v) is not bytes:
            raise ProtocolError(f"{where}: expected binary data (got {type(v).__name__})")
        if len(v) != n:
            raise ProtocolError(f"{where}: {len(v)} bytes, {what} needs exactly {n}")
        return v

    return check


def _ids(lo: int, hi: Callable[[Limits], int], what: str) -> FieldCheck:
    def check(where: str, v: object, lim: Limits) -> tuple[int, ...]:
        hi_v = hi(lim)
        if type(v) is not list:
            raise ProtocolError(f"{where}: expected an array of token ids (got {type(v).__name__})")
        if len(v) < lo:
            raise ProtocolError(f"{where}: {len(v)} ids, need at least {lo}")
        if len(v) > hi_v:
            raise ProtocolError(f"{where}: {len(v)} ids, more than {what} = {hi_v}")
        top = lim.vocab_size - 1
        for i, t in enumerate(v):
            if type(t) is not int or not 0 <= t <= top:
                raise ProtocolError(f"{where}[{i}]: {_show(t)} is not a token id in [0, {top}]")
        return tuple(v)

    return check


def _opt(inner: FieldCheck) -> FieldCheck:
    def check(where: str, v: object, lim: Limits) -> Any:
        return None if v is None else inner(where, v, lim)

    check.optional = True  # type: ignore[attr-defined]
    return check


_ROUND = _int(0, MAX_ROUND)
_DEVICE = _int(0, MAX_DEVICE_ID)
_COUNT = _int(0, MAX_U32)
_SECONDS = _float(0.0, 1e6)
_DIGEST = _bin(DIGEST_BYTES, "a sha256 digest")


# --------------------------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------------------------


class Message:
    """Base of every message. Subclasses are frozen dataclasses with a wire TYPE and one check
    per field (``SPEC``); ``validate`` adds the checks that involve several fields."""

    TYPE: ClassVar[str]
    SPEC: ClassVar[dict[str, FieldCheck]]

    def validate(self, lim: Limits) -> None:  # cross-field checks
        return None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"t": self.TYPE}
        for name in _FIELD_NAMES[type(self)]:
            v = getattr(self, name)
            out[name] = list(v) if isinstance(v, tuple) else v
        return out


@dataclass(frozen=True)
class HelloMsg(Message):
    TYPE: ClassVar[str] = "HELLO"
    device_id: int
    prompt: tuple[int, ...]
    resume: bool = True  # continue the server's record of this device if it holds one
    draft: str = ""  # the device's draft model name (for logs)
    version: int = PROTOCOL_VERSION
    SPEC: ClassVar[dict[str, FieldCheck]] = {
        "device_id": _DEVICE,
        "prompt": _ids(1, lambda lim: lim.max_prompt_tokens, "max_prompt_tokens"),
        "resume": _bool,
        "draft": _str(MAX_NAME_CHARS),
        "version": _int(0, 65535),
    }


@dataclass(frozen=True)
class ChallengeMsg(Message):
    TYPE: ClassVar[str] = "CHALLENGE"
    nonce: bytes
    SPEC: ClassVar[dict[str, FieldCheck]] = {"nonce": _bin(NONCE_BYTES, "a nonce")}


@dataclass(frozen=True)
class AuthMsg(Message):
    TYPE: ClassVar[str] = "AUTH"
    device_id: int
    mac: bytes
    SPEC: ClassVar[dict[str, FieldCheck]] = {"device_id": _DEVICE, "mac": _bin(MAC_BYTES, "an HMAC-SHA256")}


@dataclass(frozen=True)
class WelcomeMsg(Message):
    TYPE: ClassVar[str] = "WELCOME"
    device_id: int
    pair: str
    vocab_size: int
    gamma_max: int
    seed: int
    temperature: float
    top_k: int
    top_p: float
    ul_codec: str
    dl_codec: str
    max_new_tokens: int
    max_prompt_tokens: int
    eos_ids: tuple[int, ...]
    tokens: tuple[int, ...]  # the server's record: prompt + every committed token
    num_prompt: int
    next_round: int
    resumed: bool
    SPEC: ClassVar[dict[str, FieldCheck]] = {
        "device_id": _DEVICE,
        "pair": _str(MAX_NAME_CHARS),
        "vocab_size": _int(1, MAX_U32),
        "gamma_max": _int(0, 4096),
        "seed": _int(0, MAX_SEED),
        "temperature": _float(0.0, 1e6),
        "top_k": _COUNT,
        "top_p": _float(0.0, 1.0, lo_open=True),
        "ul_codec": _str(MAX_NAME_CHARS),
        "dl_codec": _str(MAX_NAME_CHARS),
        "max_new_tokens": _int(1, 1 << 24),
        "max_prompt_tokens": _int(1, 1 << 24),
        "eos_ids": _ids(0, lambda lim: MAX_EOS_IDS, "MAX_EOS_IDS"),
        "tokens": _ids(1, lambda lim: lim.max_context_tokens, "max_context_tokens"),
        "num_prompt": _int(1, MAX_U32),
        "next_round": _ROUND,
        "resumed": _bool,
    }

    def validate(self, lim: Limits) -> None:
        if self.vocab_size != lim.vocab_size:
            raise ProtocolError(f"WELCOME.vocab_size: server has {self.vocab_size}, this device {lim.vocab_size}")
        if self.num_prompt > len(self.tokens):
            raise ProtocolError(f"WELCOME.num_prompt: {self.num_prompt} exceeds the {len(self.tokens)} tokens sent")


@dataclass(frozen=True)
class PlanMsg(Message):
    TYPE: ClassVar[str] = "PLAN"
    round: int
    gamma: int
    coupled: bool | None = None  # the round's verification rule for this device (None: standard)
    SPEC: ClassVar[dict[str, FieldCheck]] = {
        "round": _ROUND,
        "gamma": _int(0, lambda lim: lim.gamma_max),
        "coupled": _opt(_bool),
    }


@dataclass(frozen=True)
class DraftMsg(Message):
    TYPE: ClassVar[str] = "DRAFT"
    round: int
    tokens: tuple[int, ...]
    q: bytes  # q̂_i(x_i), little-endian float64, one per token; empty for a coupled draft
    compute_s: float | None = None  # the device's drafting time (testbed measurement)
    SPEC: ClassVar[dict[str, FieldCheck]] = {
        "round": _ROUND,
        "tokens": _ids(0, lambda lim: lim.gamma_max, "γ_max"),
        "q": lambda where, v, lim: _check_q(where, v),
        "compute_s": _opt(_SECONDS),
    }

    @classmethod
    def make(
        cls, round_idx: int, tokens: Sequence[int], q_at_tokens: Sequence[float], compute_s: float | None = None
    ) -> DraftMsg:
        return cls(
            round_idx, tuple(int(t) for t in tokens), struct.pack(f"<{len(q_at_tokens)}d", *q_at_tokens), compute_s
        )

    @property
    def q_values(self) -> list[float]:
        return list(struct.unpack(f"<{len(self.q) // Q_SCALAR_BYTES}d", self.q))

    @property
    def tokens_only(self) -> bool:
        """A coupled draft's form: ids and no q scalars (whether that is what the PLAN asked for
        is the server's check, `server_protocol`)."""
        return len(self.q) == 0 and len(self.tokens) > 0

    def validate(self, lim: Limits) -> None:
        if self.tokens_only:
            check_draft("DRAFT", self.tokens, [1.0] * len(self.tokens), lim.vocab_size)
            return
        if len(self.q) != Q_SCALAR_BYTES * len(self.tokens):
            raise ProtocolError(
                f"DRAFT.q: {len(self.q)} bytes for {len(self.tokens)} tokens (need {Q_SCALAR_BYTES} per token, "
                "or none for a coupled draft)"
            )
        check_draft("DRAFT", self.tokens, self.q_values, lim.vocab_size)


def _check_q(where: str, v: object) -> bytes:
    if type(v) is not bytes:
        raise ProtocolError(f"{where}: expected binary float64 scalars (got {type(v).__name__})")
    return v


@dataclass(frozen=True)
class VerdictMsg(Message):
    """A rejected draft's verdict (an accepted one's is its COMMIT): the first rejected position
    j = num_accepted, the correction's mode and, in DL, the codec bytes of p_j to correct from."""

    TYPE: ClassVar[str] = "VERDICT"
    round: int
    num_accepted: int
    mode: str  # "ul": send q̂_j; "dl": sample the correction from `payload`
    payload: bytes | None = None  # DL codec bytes of p_j, exactly codec.num_bytes(V); set iff mode is dl
    SPEC: ClassVar[dict[str, FieldCheck]] = {
        "round": _ROUND,
        "num_accepted": _int(0, lambda lim: max(0, lim.gamma_max - 1)),
        "mode": _str(2, LINK_MODES),
        "payload": _opt(_bin(lambda lim: lim.dl_payload_bytes, "the DL codec")),
    }

    def validate(self, lim: Limits) -> None:
        if (self.mode == "dl") != (self.payload is not None):
            raise ProtocolError("VERDICT.payload: a DL verdict carries p_j, a UL verdict nothing")


@dataclass(frozen=True)
class QPayloadMsg(Message):
    TYPE: ClassVar[str] = "Q_PAYLOAD"
    round: int
    payload: bytes  # UL codec bytes of q̂_j, exactly codec.num_bytes(V)
    SPEC: ClassVar[dict[str, FieldCheck]] = {
        "round": _ROUND,
        "payload": _bin(lambda lim: lim.ul_payload_bytes, "the UL codec"),
    }


@dataclass(frozen=True)
class CorrectionMsg(Message):
    """DL: the correction the device sampled from p_j (a UL correction reaches it in COMMIT)."""

    TYPE: ClassVar[str] = "CORRECTION"
    round: int
    token: int
    compute_s: float | None = None  # DL: the device's residual sampling time
    SPEC: ClassVar[dict[str, FieldCheck]] = {"round": _ROUND, "token": _token, "compute_s": _opt(_SECONDS)}


@dataclass(frozen=True)
class CommitMsg(Message):
    TYPE: ClassVar[str] = "COMMIT"
    round: int
    tokens: tuple[int, ...]  # appended this round (accepted drafts + bonus/correction, clipped)
    length: int  # the device's token count after appending (prompt included)
    digest: bytes  # token_digest of those tokens
    next_gamma: int | None = None  # the PLAN of round + 1 (γ), when the server already decided it
    next_coupled: bool | None = None  # that PLAN's verification rule (None: standard)
    SPEC: ClassVar[dict[str, FieldCheck]] = {
        "round": _ROUND,
        "tokens": _ids(1, lambda lim: lim.gamma_max + 1, "γ_max + 1"),
        "length": _int(1, lambda lim: lim.max_context_tokens),
        "digest": _DIGEST,
        "next_gamma": _opt(_int(0, lambda lim: lim.gamma_max)),
        "next_coupled": _opt(_bool),
    }


@dataclass(frozen=True)
class ByeMsg(Message):
    TYPE: ClassVar[str] = "BYE"
    reason: str
    length: int | None = None
    digest: bytes | None = None
    SPEC: ClassVar[dict[str, FieldCheck]] = {
        "reason": _str(MAX_REASON_CHARS),
        "length": _opt(_COUNT),
        "digest": _opt(_DIGEST),
    }

    @classmethod
    def make(cls, reason: str, tokens: Sequence[int] | None = None) -> ByeMsg:
        if tokens is None:
            return cls(_one_line(reason))
        return cls(_one_line(reason), len(tokens), token_digest(tokens))


@dataclass(frozen=True)
class ErrorMsg(Message):
    TYPE: ClassVar[str] = "ERROR"
    code: str
    reason: str
    SPEC: ClassVar[dict[str, FieldCheck]] = {"code": _str(16, ERROR_CODES), "reason": _str(MAX_REASON_CHARS)}

    @classmethod
    def make(cls, code: str, reason: object) -> ErrorMsg:
        return cls(code, _one_line(reason))


MESSAGE_CLASSES: dict[str, type[Message]] = {
    cls.TYPE: cls
    for cls in (
        HelloMsg,
        ChallengeMsg,
        AuthMsg,
        WelcomeMsg,
        PlanMsg,
        DraftMsg,
        VerdictMsg,
        QPayloadMsg,
        CorrectionMsg,
        CommitMsg,
        ByeMsg,
        ErrorMsg,
    )
}
MESSAGE_TYPES: tuple[str, ...] = tuple(MESSAGE_CLASSES)
_FIELD_NAMES: dict[type[Message], tuple[str, ...]] = {
    cls: tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    for cls in MESSAGE_CLASSES.values()
}
# what `_build` reads per message, made once per type: the keys a wire map may hold, and each
# field's name, its "TYPE.field" for error messages, its check and whether it may be absent
_WIRE_KEYS: dict[type[Message], frozenset[str]] = {cls: frozenset(cls.SPEC) | {"t"} for cls in _FIELD_NAMES}
_FIELD_PLAN: dict[type[Message], tuple[tuple[str, str, FieldCheck, bool], ...]] = {
    cls: tuple(
        (name, f"{cls.TYPE}.{name}", cls.SPEC[name], getattr(cls.SPEC[name], "optional", False)) for name in names
    )
    for cls, names in _FIELD_NAMES.items()
}


# --------------------------------------------------------------------------------------------
# Encode / decode
# --------------------------------------------------------------------------------------------


def _no_ext(code: int, data: bytes) -> NoReturn:
    raise ProtocolError(f"message: msgpack extension type {code} is not allowed")


def _build(cls: type[Message], obj: dict, lim: Limits) -> Message:
    keys = _WIRE_KEYS[cls]
    if not keys.issuperset(obj):
        key = next(k for k in obj if k not in keys)
        raise ProtocolError(f"{cls.TYPE}.{_one_line(key, 40)}: unknown field")
    kwargs = {}
    for name, where, check, optional in _FIELD_PLAN[cls]:
        if name not in obj:
            if optional:
                continue
            raise ProtocolError(f"{where}: missing")
        kwargs[name] = check(where, obj[name], lim)
    msg = cls(**kwargs)
    msg.validate(lim)
    return msg


def decode_message(raw: bytes, limits: Limits, allowed: Iterable[str] | None = None) -> Message:
    """Bytes from the wire -> a validated message; ProtocolError (one line) on any violation."""
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"message: expected bytes (got {type(raw).__name__})")
    n = len(raw)
    if allowed is not None and type(allowed) is not tuple:
        allowed = tuple(allowed)
    biggest = limits.max_bytes_of(allowed)
    if n > biggest:
        raise ProtocolError(f"message: {n} bytes exceeds the largest allowed message ({biggest} bytes)")
    try:
        obj = msgpack.unpackb(
            raw if type(raw) is bytes else bytes(raw), raw=False, strict_map_key=True, ext_hook=_no_ext
        )
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack raises several types (ExtraData, ValueError, UnicodeError...)
        detail = _one_line(exc, 80)
        raise ProtocolError(
            f"message: malformed msgpack ({type(exc).__name__}{': ' + detail if detail else ''})"
        ) from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"message: expected a msgpack map (got {type(obj).__name__})")
    t = obj.get("t")
    if type(t) is not str:
        raise ProtocolError(f"message.t: missing or not a string (got {_show(t)})")
    cls = MESSAGE_CLASSES.get(t)
    if cls is None:
        raise ProtocolError(f"message.t: unknown message type {_one_line(t, 40)!r}")
    limit = limits.max_bytes(t)
    if n > limit:
        raise ProtocolError(f"{t}: message of {n} bytes exceeds its limit of {limit} bytes")
    if allowed is not None:
        if t not in allowed:
            raise ProtocolError(f"{t}: not allowed here (expected {' or '.join(allowed)})")
    return _build(cls, obj, limits)


# one Packer reused (packb builds a Packer per call); not thread-safe, so one per thread
_packers = threading.local()


def _pack(obj: dict) -> bytes:
    packer = getattr(_packers, "p", None)
    if packer is None:
        packer = _packers.p = msgpack.Packer(use_bin_type=True)
    return packer.pack(obj)


def encode_message(msg: Message, limits: Limits | None = None) -> bytes:
    """A message -> one msgpack frame. With `limits`, the sender checks what it sends exactly as
    the receiver will (a bug on our side then fails here, not on the far end)."""
    wire = msg.to_wire()
    raw = _pack(wire)
    if limits is not None:
        limit = limits.max_bytes(msg.TYPE)
        if len(raw) > limit:
            raise ProtocolError(f"{msg.TYPE}: message of {len(raw)} bytes exceeds its limit of {limit} bytes")
        _build(type(msg), wire, limits)  # the dict just packed: _build reads it, never changes it
    return raw


__all__ = [
    "AuthMsg",
    "ByeMsg",
    "ChallengeMsg",
    "CommitMsg",
    "CorrectionMsg",
    "DraftMsg",
    "ErrorMsg",
    "HelloMsg",
    "Limits",
    "Message",
    "MESSAGE_CLASSES",
    "MESSAGE_TYPES",
    "PlanMsg",
    "PROTOCOL_VERSION",
    "QPayloadMsg",
    "TokenDigest",
    "VerdictMsg",
    "WelcomeMsg",
    "decode_message",
    "encode_message",
    "token_digest",
]
