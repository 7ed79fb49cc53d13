"""Messages of the networked round protocol: round trips, size limits derived from V and γ_max,
every format violation refused with a one-line ProtocolError naming the field, payload bytes on
the wire equal to the codec's size, and the challenge-response MAC."""

from __future__ import annotations

import math

import msgpack
import numpy as np
import pytest

from multispin.errors import ConfigError, ProtocolError
from multispin.runtime.security.auth import (
    SECRET_ENV,
    check_mac,
    compute_mac,
    new_nonce,
    resolve_secret,
)
from multispin.runtime.wire import messages as P
from multispin.speculative.codecs import make_codec

V, GMAX = 256, 20
UL, DL = make_codec("dense-fp32"), make_codec("sparse-v64-q16")
LIM = P.Limits.for_session(V, GMAX, UL, DL, max_prompt_tokens=64, max_new_tokens=128)
DIGEST = P.token_digest([1, 2, 3])


def _samples() -> list[P.Message]:
    rng = np.random.default_rng(0)
    q = rng.dirichlet(np.ones(V))
    return [
        P.HelloMsg(3, (1, 2, 3), True, "close"),
        P.ChallengeMsg(new_nonce()),
        P.AuthMsg(3, compute_mac(b"secret-secret", b"n" * 32, 3)),
        P.WelcomeMsg(3, "tiny", V, GMAX, 7, 0.8, 5, 0.9, UL.name, DL.name, 128, 64, (2,), (1, 2, 3, 4), 3, 11, True),
        P.PlanMsg(11, 4),
        P.DraftMsg.make(11, [5, 6, 255], [0.5, 1.0, 1e-9], compute_s=0.01),
        P.DraftMsg.make(11, [], []),
        P.VerdictMsg(11, 2, "dl", DL.encode(q)),
        P.VerdictMsg(11, 0, "ul"),
        P.QPayloadMsg(11, UL.encode(q)),
        P.CorrectionMsg(11, 42, 0.002),
        P.CommitMsg(11, (5, 6, 42), 10, DIGEST),
        P.CommitMsg(11, (5, 6, 42), 10, DIGEST, next_gamma=GMAX),  # with the next round's PLAN
        P.ByeMsg.make("done", [1, 2, 3]),
        P.ByeMsg.make("leaving"),
        P.ErrorMsg.make("timeout", "no DRAFT within 2 s\nin round 3"),
    ]


@pytest.mark.parametrize("msg", _samples(), ids=lambda m: m.TYPE)
def test_every_message_round_trips_and_fits_its_limit(msg):
    raw = P.encode_message(msg, LIM)
    assert len(raw) <= LIM.max_bytes(msg.TYPE)
    assert P.decode_message(raw, LIM) == msg


def test_message_list_is_complete():
    assert set(P.MESSAGE_TYPES) == {
        "HELLO",
        "CHALLENGE",
        "AUTH",
        "WELCOME",
        "PLAN",
        "DRAFT",
        "VERDICT",
        "Q_PAYLOAD",
        "CORRECTION",
        "COMMIT",
        "BYE",
        "ERROR",
    }
    assert P.PROTOCOL_VERSION == 3  # 2: PLAN in COMMIT, p_j in VERDICT, no VERDICT when all accepted; 3: coupled rule


def test_reasons_are_one_line_and_capped():
    e = P.ErrorMsg.make("protocol", "x\n" * 500)
    assert "\n" not in e.reason and len(e.reason) <= P.MAX_REASON_CHARS


@pytest.mark.parametrize(
    "spec", ["dense-fp32", "dense-fp16", "dense-bf16", "sparse-v64-q16", "sparse-v32-q32", "lattice-l100"]
)
def test_payload_bytes_on_the_wire_equal_codec_num_bytes(spec):
    codec = make_codec(spec)
    lim = P.Limits.for_session(V, GMAX, codec, codec)
    p = np.random.default_rng(1).dirichlet(np.ones(V) * 0.3)
    for msg in (P.QPayloadMsg(7, codec.encode(p)), P.VerdictMsg(7, 3, "dl", codec.encode(p))):
        raw = P.encode_message(msg, lim)
        wire = msgpack.unpackb(raw, raw=False)
        assert isinstance(wire["payload"], bytes)
        assert len(wire["payload"]) == codec.num_bytes(V) == math.ceil(codec.bits(V) / 8)
        assert len(raw) - codec.num_bytes(V) <= 60  # envelope: type tag, round, (count, mode), field names
        assert len(raw) <= lim.max_bytes(msg.TYPE) <= codec.num_bytes(V) + P.ENVELOPE_BYTES + 40


def test_paper_sized_payload_at_qwen_vocab():
    vocab = 151_665
    codec = make_codec("sparse-v1024-q16")
    assert codec.bits(vocab) == 34_816
    lim = P.Limits.for_session(vocab, GMAX, codec, codec)
    p = np.zeros(vocab)
    p[np.random.default_rng(2).choice(vocab, 2000, replace=False)] = 1 / 2000
    raw = P.encode_message(P.QPayloadMsg(0, codec.encode(p)), lim)
    assert len(msgpack.unpackb(raw)["payload"]) == 34_816 // 8
    # A maximal DRAFT (γ_max ids near V) fits its limit; the limit grows with γ_max.
    draft = P.DraftMsg.make(2**31 - 1, [vocab - 1] * GMAX, [0.123456789] * GMAX, 1.5)
    assert len(P.encode_message(draft, lim)) <= lim.max_bytes("DRAFT")
    bigger = P.Limits.for_session(vocab, 2 * GMAX, codec, codec)
    assert bigger.max_bytes("DRAFT") > lim.max_bytes("DRAFT")
    assert lim.max_bytes("DRAFT") < 2 * P.ENVELOPE_BYTES + GMAX * 13 + 20


def _wire(msg: P.Message, **changes) -> bytes:
    obj = msg.to_wire()
    for k, v in changes.items():
        if v is _DELETE:
            obj.pop(k)
        else:
            obj[k] = v
    return msgpack.packb(obj, use_bin_type=True)


_DELETE = object()
_PLAN = P.PlanMsg(3, 2)
_DRAFT = P.DraftMsg.make(3, [1, 2], [0.5, 0.25])
_HELLO = P.HelloMsg(1, (10, 11), True, "mid")


@pytest.mark.parametrize(
    "raw, needle",
    [
        (b"\xc1", "malformed msgpack"),
        (msgpack.packb([1, 2]), "expected a msgpack map"),
        (msgpack.packb({"round": 1}), "message.t: missing"),
        (msgpack.packb({"t": 5}), "message.t: missing or not a string"),
        (msgpack.packb({"t": "FOO"}), "unknown message type 'FOO'"),
        (msgpack.packb({"t": "PLAN", "round": 1, "gamma": 2}) + b"\x00", "ExtraData"),
        (msgpack.packb(msgpack.ExtType(3, b"xx")), "extension type"),
        (msgpack.packb({b"t": "PLAN"}, use_bin_type=True), "message.t: missing"),
        (_wire(_PLAN, gamma=_DELETE), "PLAN.gamma: missing"),
        (_wire(_PLAN, gamma=GMAX + 1), "PLAN.gamma: 21 is outside [0, 20]"),
        (_wire(_PLAN, gamma=-1), "PLAN.gamma"),
        (_wire(_PLAN, gamma=True), "PLAN.gamma: expected an integer"),
        (_wire(_PLAN, gamma=2.0), "PLAN.gamma: expected an integer"),
        (_wire(_PLAN, round="3"), "PLAN.round: expected an integer"),
        (_wire(_PLAN, extra=1), "PLAN.extra: unknown field"),
        (_wire(_DRAFT, tokens=[1, V]), "DRAFT.tokens[1]"),
        (_wire(_DRAFT, tokens=[1, "a"]), "DRAFT.tokens[1]"),
        (
            _wire(_DRAFT, tokens=list(range(GMAX + 1)), q=b"\x00" * 8 * (GMAX + 1)),
            "DRAFT.tokens: 21 ids, more than γ_max",
        ),
        (_wire(_DRAFT, tokens=b"\x01\x02"), "DRAFT.tokens: expected an array"),
        (_wire(_DRAFT, q=b"\x00" * 8), "DRAFT.q: 8 bytes for 2 tokens"),
        (_wire(_DRAFT, q=[0.5, 0.25]), "DRAFT.q: expected binary"),
        (_wire(_DRAFT, q=np.array([0.5, 0.0]).tobytes()), "DRAFT.q: every"),
        (_wire(_DRAFT, q=np.array([0.5, np.nan]).tobytes()), "DRAFT.q: every"),
        (_wire(_DRAFT, q=np.array([0.5, 1.5]).tobytes()), "DRAFT.q: every"),
        (_wire(_DRAFT, compute_s=-1.0), "DRAFT.compute_s"),
        (_wire(P.VerdictMsg(3, 1, "ul"), mode="xl"), "VERDICT.mode"),
        (_wire(P.VerdictMsg(3, 1, "ul"), mode=_DELETE), "VERDICT.mode: missing"),
        (_wire(P.VerdictMsg(3, GMAX, "ul")), "VERDICT.num_accepted: 20 is outside [0, 19]"),
        (_wire(P.VerdictMsg(3, 1, "ul"), payload=b"\x00" * DL.num_bytes(V)), "VERDICT.payload: a DL verdict"),
        (_wire(P.VerdictMsg(3, 1, "dl", b"\x00" * DL.num_bytes(V)), payload=_DELETE), "VERDICT.payload: a DL verdict"),
        (
            _wire(P.VerdictMsg(3, 1, "dl", b"\x00" * DL.num_bytes(V)), payload="text"),
            "VERDICT.payload: expected binary",
        ),
        (_wire(P.VerdictMsg(3, 1, "dl", b"\x00" * DL.num_bytes(V)), payload=b"\x00"), "VERDICT.payload: 1 bytes"),
        (_wire(P.VerdictMsg(3, 1, "ul"), bonus=4), "VERDICT.bonus: unknown field"),  # a version-1 verdict
        (
            _wire(P.QPayloadMsg(3, b"\x00" * UL.num_bytes(V)), payload=b"\x00" * (UL.num_bytes(V) - 1)),
            "Q_PAYLOAD.payload: 1023 bytes, the UL codec needs exactly 1024",
        ),
        (msgpack.packb({"t": "P_PAYLOAD", "round": 3, "payload": b"\x00"}), "unknown message type 'P_PAYLOAD'"),
        (_wire(P.CorrectionMsg(3, 4), token=V), "CORRECTION.token"),
        (_wire(P.CommitMsg(3, (1,), 5, DIGEST), digest=b"x" * 31), "COMMIT.digest: 31 bytes"),
        (_wire(P.CommitMsg(3, (1,), 5, DIGEST), tokens=[]), "COMMIT.tokens: 0 ids, need at least 1"),
        (_wire(P.CommitMsg(3, (1,), 5, DIGEST), next_gamma=GMAX + 1), "COMMIT.next_gamma: 21 is outside [0, 20]"),
        (_wire(P.CommitMsg(3, (1,), 5, DIGEST), next_gamma=-1), "COMMIT.next_gamma"),
        (_wire(_HELLO, prompt=[]), "HELLO.prompt: 0 ids"),
        (_wire(_HELLO, prompt=[1] * 65), "HELLO.prompt: 65 ids, more than max_prompt_tokens"),
        (_wire(_HELLO, draft="x" * 65), "HELLO.draft: 65 characters"),
        (_wire(_HELLO, device_id=2**31), "HELLO.device_id"),
        (_wire(_HELLO, resume=1), "HELLO.resume: expected true/false"),
        (_wire(P.AuthMsg(1, b"m" * 32), mac=b"m" * 31), "AUTH.mac: 31 bytes"),
        (_wire(P.ErrorMsg("auth", "x"), code="nope"), "ERROR.code"),
        (_wire(P.ByeMsg("done"), reason="r" * 201), "BYE.reason: 201 characters"),
    ],
)
def test_violations_raise_protocol_error_naming_the_field(raw, needle):
    with pytest.raises(ProtocolError) as info:
        P.decode_message(raw, LIM)
    text = str(info.value)
    assert needle in text, text
    assert "\n" not in text and len(text) < 300


def test_oversized_messages_are_refused_before_unpacking():
    limit = LIM.max_bytes("DRAFT")
    raw = _wire(_DRAFT, pad="x" * limit)
    with pytest.raises(ProtocolError, match=r"DRAFT: message of \d+ bytes exceeds its limit"):
        P.decode_message(raw, LIM)
    with pytest.raises(ProtocolError, match="exceeds the largest allowed message"):
        P.decode_message(b"\x00" * (LIM.max_message_bytes + 1), LIM)
    # A server that only takes session messages never unpacks a WELCOME-sized blob.
    session = ("DRAFT", "Q_PAYLOAD", "CORRECTION", "BYE", "ERROR")
    blob = msgpack.packb({"t": "DRAFT", "x": b"\x00" * 5000}, use_bin_type=True)
    with pytest.raises(ProtocolError, match="largest allowed message"):
        P.decode_message(blob, LIM, allowed=session)
    with pytest.raises(ProtocolError, match="PLAN: not allowed here"):
        P.decode_message(P.encode_message(_PLAN), LIM, allowed=session)
    with pytest.raises(ProtocolError, match="expected bytes"):
        P.decode_message("PLAN", LIM)  # type: ignore[arg-type]


def test_limits_follow_vocab_gamma_and_codecs():
    assert LIM.max_bytes("Q_PAYLOAD") == P.ENVELOPE_BYTES + 9 + 5 + UL.num_bytes(V)
    assert LIM.max_bytes("VERDICT") == P.ENVELOPE_BYTES + 3 * 9 + 5 + DL.num_bytes(V)
    assert LIM.max_bytes("COMMIT") > LIM.max_bytes("PLAN")
    with pytest.raises(ProtocolError, match="unknown message type"):
        LIM.max_bytes("NOPE")
    with pytest.raises(ProtocolError, match="limits.vocab_size"):
        P.Limits(vocab_size=0)
    with pytest.raises(ProtocolError, match="limits.gamma_max"):
        P.Limits(vocab_size=5, gamma_max=-1)


def test_sender_checks_what_it_sends():
    with pytest.raises(ProtocolError, match="PLAN.gamma"):
        P.encode_message(P.PlanMsg(1, GMAX + 1), LIM)
    with pytest.raises(ProtocolError, match="Q_PAYLOAD.payload"):
        P.encode_message(P.QPayloadMsg(1, b"\x00" * 3), LIM)
    with pytest.raises(ProtocolError, match="WELCOME.vocab_size"):
        P.encode_message(_samples()[3], P.Limits(vocab_size=V + 1))


def test_digest_incremental_equals_whole():
    toks = list(range(300))
    run = P.TokenDigest(toks[:10])
    run.update(toks[10:200])
    run.update([])
    run.update(iter(toks[200:]))
    assert run.digest() == P.token_digest(toks) and run.length == 300
    assert P.token_digest([1, 2]) != P.token_digest([2, 1])
    for bad in ([-1], [2**32], [1.5]):
        with pytest.raises(ProtocolError, match=r"ids must lie in \[0, 2\^32\)"):
            P.token_digest(bad)


def test_digest_and_q_scalars_keep_their_version_1_bytes():
    """struct instead of numpy changes no byte: the digest is sha256 of little-endian uint32 ids
    (numpy's '<u4'), the q scalars little-endian float64 ('<f8'); numpy ints are taken too."""
    import hashlib

    ids = [0, 1, 255, 2**32 - 1]
    assert P.token_digest(ids) == hashlib.sha256(np.array(ids, dtype="<u4").tobytes()).digest()
    assert P.token_digest(np.array(ids, dtype=np.int64)) == P.token_digest(ids)
    q = [0.5, 1e-9, 1.0]
    msg = P.DraftMsg.make(0, [1, 2, 3], np.array(q))
    assert msg.q == np.array(q, dtype="<f8").tobytes() and msg.q_values == q


def test_mac_binds_secret_nonce_and_device(monkeypatch):
    nonce = new_nonce()
    assert len(nonce) == 32 and nonce != new_nonce()
    mac = compute_mac(b"secret-secret", nonce, 4)
    assert check_mac(b"secret-secret", nonce, 4, mac)
    assert not check_mac(b"secret-secreT", nonce, 4, mac)
    assert not check_mac(b"secret-secret", new_nonce(), 4, mac)
    assert not check_mac(b"secret-secret", nonce, 5, mac)
    monkeypatch.setenv(SECRET_ENV, "from-the-environment")
    assert resolve_secret(None) == b"from-the-environment"
    assert resolve_secret("explicit-secret") == b"explicit-secret"
    monkeypatch.delenv(SECRET_ENV)
    with pytest.raises(ConfigError, match="secret: missing"):
        resolve_secret(None)
    with pytest.raises(ConfigError, match="at least 8 bytes"):
        resolve_secret("short")
