"""The server's sans-I/O protocol object without a socket: the handshake and admission (every
refusal), every session message in every connection state, every violation, commits and BYE."""

from __future__ import annotations

import pytest

from multispin.runtime.round.engine import RoundRecord
from multispin.runtime.security.auth import compute_mac
from multispin.runtime.security.limits import ConnectionLimits
from multispin.runtime.wire import messages as P
from multispin.runtime.wire.server_protocol import ConnState, ServerProtocol

SECRET = b"server-protocol-test-secret"
NONCE = b"n" * 32
V = 16
LIMITS = P.Limits(vocab_size=V, gamma_max=8, ul_payload_bytes=4 * V, dl_payload_bytes=4 * V)
WELCOME = dict(
    pair="tiny",
    vocab_size=V,
    gamma_max=8,
    seed=0,
    temperature=1.0,
    top_k=0,
    top_p=1.0,
    ul_codec="dense-fp32",
    dl_codec="dense-fp32",
    max_new_tokens=12,
    max_prompt_tokens=4096,
    eos_ids=(2,),
)
PROMPT = (3, 4, 5)


def enc(msg: P.Message) -> list[bytes]:
    return [P.encode_message(msg)]


def make(max_devices: int = 4, keys: dict[str, int] | None = None, **options) -> ServerProtocol:
    """A protocol in secret mode, or in key mode when `keys` maps allowed public keys to ids."""
    records: dict[int, list[int]] = {}

    def check_claim(key, d):
        owner = (keys or {}).get(key)
        return None if owner == d else ("key not allowed" if owner is None else f"device {owner}'s key")

    return ServerProtocol(
        None if keys is not None else SECRET,
        LIMITS,
        records,
        lambda d, prompt, peer: records.setdefault(d, list(prompt)),
        WELCOME,
        max_devices=max_devices,
        handshake_timeout_s=10.0,
        nonce=lambda: NONCE,
        check_claim=check_claim if keys is not None else None,
        **options,
    )


def sent(proto: ServerProtocol) -> list[tuple[bytes, P.Message]]:
    out = [(identity, msg) for identity, _, msg in proto.outbox]
    proto.outbox.clear()
    return out


def events(proto: ServerProtocol) -> list[str]:
    out = [e["event"] for e in proto.events]
    proto.events.clear()
    return out


def join(
    proto: ServerProtocol,
    identity: bytes,
    d: int = 0,
    prompt=PROMPT,
    resume: bool = True,
    secret: bytes = SECRET,
    now: float = 0.0,
):
    proto.receive(identity, enc(P.HelloMsg(d, tuple(prompt), resume, "mid")), now)
    assert sent(proto) == [(identity, P.ChallengeMsg(NONCE))]
    proto.receive(identity, enc(P.AuthMsg(d, compute_mac(secret, NONCE, d))), now)
    return sent(proto)


def joined(proto: ServerProtocol, identity: bytes = b"a", d: int = 0):
    out = join(proto, identity, d)
    assert isinstance(out[0][1], P.WelcomeMsg)
    events(proto)
    return proto.conns[identity]


# --------------------------------------------------------------------------------------------
# handshake and admission


def test_join_then_resume_replaces_the_live_session():
    proto = make()
    out = join(proto, b"a")
    ((ident, welcome),) = out
    assert ident == b"a" and welcome.tokens == PROMPT and not welcome.resumed and welcome.next_round == 0
    assert welcome.pair == "tiny" and welcome.eos_ids == (2,)
    assert proto.records[0] == list(PROMPT) and events(proto) == ["join"]
    proto.records[0].append(9)
    proto.round_idx = 3
    out = join(proto, b"b")
    assert out[0] == (b"a", P.ErrorMsg.make("replaced", "replaced by a new authenticated session"))
    welcome = out[1][1]
    assert out[1][0] == b"b" and welcome.resumed and welcome.tokens == PROMPT + (9,) and welcome.next_round == 3
    assert events(proto) == ["drop", "resume"]
    assert proto.devices[0].sessions == 2 and proto.devices[0].conn is proto.conns[b"b"]
    assert b"a" in proto.banned and b"a" not in proto.conns


def _refusal(proto, identity, code, match, out=None):
    out = sent(proto) if out is None else out
    assert out and out[-1][0] == identity and isinstance(out[-1][1], P.ErrorMsg), out
    assert out[-1][1].code == code and match in out[-1][1].reason
    assert identity in proto.banned and identity not in proto.conns


def test_every_handshake_refusal():
    proto = make(max_devices=1)
    proto.receive(b"v", enc(P.HelloMsg(0, PROMPT, version=P.PROTOCOL_VERSION + 1)), 0.0)
    _refusal(proto, b"v", "refused", "HELLO.version")
    proto.receive(b"x", enc(P.AuthMsg(0, b"m" * 32)), 0.0)  # AUTH before HELLO
    _refusal(proto, b"x", "protocol", "AUTH")
    out = join(proto, b"w", secret=b"wrong-secret-wrong-secret")
    _refusal(proto, b"w", "auth", "wrong secret", out)
    proto.receive(b"i", enc(P.HelloMsg(0, PROMPT)), 0.0)
    sent(proto)
    proto.receive(b"i", enc(P.AuthMsg(1, compute_mac(SECRET, NONCE, 1))), 0.0)
    _refusal(proto, b"i", "auth", "differs from HELLO's 0")
    proto.receive(b"h", enc(P.HelloMsg(0, PROMPT)), 0.0)
    sent(proto)
    proto.receive(b"h", enc(P.HelloMsg(0, PROMPT)), 0.0)  # HELLO twice
    _refusal(proto, b"h", "protocol", "HELLO")
    proto.receive(b"s", enc(P.HelloMsg(0, PROMPT)), 0.0)
    sent(proto)
    proto.expire(10.5)
    _refusal(proto, b"s", "auth", "no AUTH within 10 s")
    proto.receive(b"f", [b"x", b"y"], 0.0)
    _refusal(proto, b"f", "protocol", "expected one frame (got 2)")
    joined(proto, b"ok", 0)
    out = join(proto, b"full", d=1)
    _refusal(proto, b"full", "refused", "server full (1 devices)", out)
    out = join(proto, b"nr", d=0, resume=False)
    _refusal(proto, b"nr", "refused", "HELLO.resume", out)
    out = join(proto, b"np", d=0, prompt=(7, 7))
    _refusal(proto, b"np", "refused", "HELLO.prompt", out)
    proto.closing = True
    out = join(proto, b"late", d=0)
    _refusal(proto, b"late", "shutdown", "shutting down", out)
    assert proto.refused == 11
    proto.receive(b"late", enc(P.HelloMsg(0, PROMPT)), 0.0)  # banned: ignored
    assert sent(proto) == []


def test_too_many_handshakes_in_flight():
    proto = make(connections=ConnectionLimits(max_connections=100, max_pending=8))
    for i in range(8):
        proto.receive(i.to_bytes(4, "big"), enc(P.HelloMsg(0, PROMPT)), 0.0)
    sent(proto)
    proto.receive(b"one-more", enc(P.HelloMsg(0, PROMPT)), 0.0)
    ((ident, err),) = sent(proto)
    assert ident == b"one-more" and err.code == "busy" and "too many pending handshakes" in err.reason
    assert b"one-more" not in proto.banned  # refused for now, not banned: a slot frees up
    proto.expire(10.5)  # the eight stalled handshakes expire and free their slots
    assert proto.budget.pending == 0
    assert [m.code for _, m in sent(proto)] == ["auth"] * 8
    joined(proto, b"one-more")


def test_an_overdue_handshake_is_refused_and_forgotten_when_the_next_peer_arrives():
    """A new peer after the deadline frees the overdue slot; the overdue HELLO (with its prompt)
    is refused and dropped, not kept."""
    proto = make(connections=ConnectionLimits(max_connections=100, max_pending=1, handshake_deadline_s=10.0))
    proto.receive(b"slow", enc(P.HelloMsg(0, PROMPT)), 0.0)
    sent(proto)
    proto.receive(b"next", enc(P.HelloMsg(1, PROMPT)), 11.0)
    out = sent(proto)
    assert [m.code for i, m in out if i == b"slow"] == ["auth"] and isinstance(out[-1][1], P.ChallengeMsg)
    assert set(proto.pending) == {b"next"}


def test_connection_limit_counts_sessions_and_handshakes():
    proto = make(connections=ConnectionLimits(max_connections=2, max_pending=2))
    joined(proto, b"a", 0)
    proto.receive(b"h", enc(P.HelloMsg(1, PROMPT)), 0.0)  # pending
    sent(proto)
    proto.receive(b"x", enc(P.HelloMsg(2, PROMPT)), 0.0)
    ((_, err),) = sent(proto)
    assert err.code == "busy" and "too many connections" in err.reason
    proto.drop(proto.conns[b"a"], "timeout", "late")  # a session ends: its slot frees up
    sent(proto)
    proto.receive(b"y", enc(P.HelloMsg(2, PROMPT)), 0.0)
    assert isinstance(sent(proto)[0][1], P.ChallengeMsg)


# --------------------------------------------------------------------------------------------
# key mode: the transport authenticated the key; HELLO's device id must be the key's


def test_key_mode_welcomes_the_key_owner_without_a_challenge():
    proto = make(keys={"KEY0": 0, "KEY1": 1})
    proto.receive(b"a", enc(P.HelloMsg(0, PROMPT)), 0.0, peer_key="KEY0")
    ((ident, welcome),) = sent(proto)
    assert ident == b"a" and isinstance(welcome, P.WelcomeMsg) and proto.conns[b"a"].peer == "KEY0"


@pytest.mark.parametrize(
    "key, why", [("KEY1", "device 1's key"), ("STRANGER", "key not allowed"), (None, "key not allowed")]
)
def test_key_mode_refuses_a_claim_of_another_id(key, why):
    proto = make(keys={"KEY0": 0, "KEY1": 1})
    proto.receive(b"a", enc(P.HelloMsg(0, PROMPT)), 0.0, peer_key="KEY0")
    sent(proto)
    records = list(proto.records[0])
    proto.receive(b"evil", enc(P.HelloMsg(0, PROMPT, True)), 0.0, peer_key=key)
    _refusal(proto, b"evil", "auth", why)
    # device 0's session is untouched: same connection, same record, no drop
    assert proto.devices[0].conn is proto.conns[b"a"] and proto.records[0] == records
    assert proto.devices[0].sessions == 1 and proto.devices[0].drops == []


def test_key_mode_refuses_an_auth_message():
    proto = make(keys={"KEY0": 0})
    proto.receive(b"a", enc(P.AuthMsg(0, b"m" * 32)), 0.0, peer_key="KEY0")
    _refusal(proto, b"a", "protocol", "AUTH")


def test_finished_device_that_resumes_gets_bye():
    proto = make()
    conn = joined(proto)
    proto.devices[0].finished = True
    proto.drop(conn, "timeout", "late")
    sent(proto)
    out = join(proto, b"b")
    assert isinstance(out[0][1], P.WelcomeMsg) and isinstance(out[1][1], P.ByeMsg)
    assert proto.conns[b"b"].state is ConnState.AWAIT_BYE


# --------------------------------------------------------------------------------------------
# every session message in every state

STATES = [ConnState.IDLE, ConnState.AWAIT_DRAFT, ConnState.AWAIT_Q, ConnState.AWAIT_CORRECTION, ConnState.AWAIT_BYE]
MESSAGES = {
    "DRAFT": P.DraftMsg.make(0, (1, 2), (0.5, 0.5)),
    "Q_PAYLOAD": P.QPayloadMsg(0, b"q" * (4 * V)),
    "CORRECTION": P.CorrectionMsg(0, 7),
    "BYE": P.ByeMsg.make("ack", PROMPT),
    "ERROR": P.ErrorMsg.make("protocol", "confused"),
}


@pytest.mark.parametrize("state", STATES, ids=lambda s: s.name)
@pytest.mark.parametrize("kind", list(MESSAGES))
def test_every_session_message_in_every_state(state, kind):
    proto = make()
    conn = joined(proto)
    proto._expect(conn, state, 0, gamma=2)
    proto.receive(b"a", enc(MESSAGES[kind]), 0.0)
    log = events(proto)
    if kind == "BYE" and state is ConnState.AWAIT_BYE:
        assert log == ["bye"] and not conn.alive and proto.devices[0].client_digest == MESSAGES["BYE"].digest
    elif kind == state.value:
        assert conn.inbox == MESSAGES[kind] and conn.state is ConnState.IDLE and log == []
    else:
        assert not conn.alive and log[-1] == "drop" and proto.devices[0].conn is None
        assert (kind in ("BYE", "ERROR")) == (sent(proto) == [])  # a leaving device gets no ERROR
    assert conn.bytes_in == len(enc(MESSAGES[kind])[0])


@pytest.mark.parametrize(
    "raw, reason",
    [
        (P.DraftMsg.make(1, (1, 2), (0.5, 0.5)), "DRAFT: unexpected (round 1; expected DRAFT for round 0)"),
        (P.DraftMsg.make(0, (1,), (0.5,)), "DRAFT.tokens: 1 ids but PLAN asked for γ = 2"),
        (P.HelloMsg(0, PROMPT), "HELLO"),
        (b"\xc1garbage", "message"),
    ],
)
def test_session_violations_drop_with_a_reason(raw, reason):
    proto = make()
    conn = joined(proto)
    proto._expect(conn, ConnState.AWAIT_DRAFT, 0, gamma=2)
    proto.receive(b"a", [raw] if isinstance(raw, bytes) else enc(raw), 0.0)
    assert not conn.alive and proto.devices[0].drops and reason in proto.devices[0].drops[-1]
    ((ident, err),) = sent(proto)
    assert ident == b"a" and err.code == "protocol"
    proto.receive(b"a", enc(MESSAGES["DRAFT"]), 0.0)  # banned afterwards
    assert sent(proto) == [] and conn.inbox is None


def test_commit_sends_digest_and_bye_when_finished():
    proto = make()
    conn = joined(proto)
    rec = RoundRecord(0, 2, 2, None, None, 3, 0, 0, 0)
    proto.records[0].extend([6, 7, 8])  # the engine appended them
    proto.commit(conn, 0, [6, 7, 8], rec, finished=False)
    ((_, commit),) = sent(proto)
    assert commit == P.CommitMsg(0, (6, 7, 8), 6, P.token_digest(PROMPT + (6, 7, 8)))
    assert conn.state is ConnState.IDLE and proto.devices[0].rounds == [rec]
    proto.records[0].append(2)
    proto.commit(conn, 1, [2], rec, finished=True)
    out = sent(proto)
    assert [m.TYPE for _, m in out] == ["COMMIT", "BYE"]
    assert out[1][1].digest == P.token_digest(PROMPT + (6, 7, 8, 2))
    assert proto.devices[0].finished and conn.state is ConnState.AWAIT_BYE


def test_commit_carrying_the_next_plan_makes_the_connection_owe_that_draft():
    proto = make()
    conn = joined(proto)
    rec = RoundRecord(0, 2, 2, None, None, 3, 0, 0, 0)
    proto.records[0].extend([6, 7, 8])
    assert not proto.planned(conn, 1)
    proto.commit(conn, 0, [6, 7, 8], rec, finished=False, next_gamma=3)
    ((_, commit),) = sent(proto)  # one message: no PLAN of its own
    assert commit == P.CommitMsg(0, (6, 7, 8), 6, P.token_digest(PROMPT + (6, 7, 8)), next_gamma=3)
    assert conn.state is ConnState.AWAIT_DRAFT and (conn.round, conn.gamma) == (1, 3)
    assert proto.planned(conn, 1) and not proto.planned(conn, 0) and not proto.planned(conn, 2)
    draft = P.DraftMsg.make(1, (1, 2, 3), (0.5,) * 3)
    proto.receive(b"a", enc(draft), 0.0)  # it may arrive before the server starts round 1
    assert conn.inbox == draft and conn.state is ConnState.IDLE and proto.planned(conn, 1)
    # the γ promised in the COMMIT is enforced as a PLAN's is
    proto2 = make()
    c2 = joined(proto2)
    proto2.records[0].extend([6])
    proto2.commit(c2, 0, [6], rec, finished=False, next_gamma=3)
    proto2.receive(b"a", enc(P.DraftMsg.make(1, (1, 2), (0.5,) * 2)), 0.0)
    assert not c2.alive and "DRAFT.tokens: 2 ids but PLAN asked for γ = 3" in proto2.devices[0].drops[-1]
    from multispin.errors import LocalProtocolError

    with pytest.raises(LocalProtocolError, match="is done; it gets no next PLAN"):
        proto.commit(joined(make()), 0, [2], rec, finished=True, next_gamma=1)


def test_a_draft_the_bye_overtook_is_taken_and_ignored():
    """The server stopped after a COMMIT that carried round 1's PLAN: the device's DRAFT of round 1
    crosses the server's BYE; the session then ends on the device's BYE, not on a protocol drop."""
    proto = make()
    conn = joined(proto)
    proto.records[0].extend([6])
    proto.commit(conn, 0, [6], RoundRecord(0, 0, 0, None, None, 1, 0, 0, 0), finished=False, next_gamma=2)
    proto.bye(conn, "rounds")
    sent(proto)
    proto.receive(b"a", enc(P.DraftMsg.make(1, (1, 2), (0.5, 0.5))), 0.0)
    assert conn.alive and events(proto) == [] and sent(proto) == []
    proto.receive(b"a", enc(P.ByeMsg.make("ack", PROMPT + (6,))), 0.0)
    assert not conn.alive and events(proto) == ["bye"] and not proto.devices[0].drops
    # negative control: a DRAFT after a BYE that overtook nothing is the device's error
    proto = make()
    conn = joined(proto)
    proto.bye(conn, "rounds")
    proto.receive(b"a", enc(P.DraftMsg.make(1, (1, 2), (0.5, 0.5))), 0.0)
    assert not conn.alive and "DRAFT: unexpected" in proto.devices[0].drops[-1]


def test_closed_connection_gets_nothing_queued():
    proto = make()
    conn = joined(proto)
    proto.drop(conn, "timeout", "slow", notify=False)
    assert not proto.send(conn, P.PlanMsg(0, 1)) and sent(proto) == []
    assert events(proto) == ["drop"]


def test_a_lost_connection_ends_its_session_or_frees_its_handshake_slot():
    proto = make(connections=ConnectionLimits(max_connections=100, max_pending=1))
    conn = joined(proto, b"a", 0)
    proto.connection_lost(b"a", "connection lost")
    assert not conn.alive and proto.devices[0].conn is None and proto.devices[0].drops == ["connection lost"]
    assert sent(proto) == []  # nothing is sent to a closed connection
    assert [(e["event"], e["code"]) for e in proto.events] == [("drop", "gone")]
    proto.events.clear()
    proto.receive(b"h", enc(P.HelloMsg(1, PROMPT)), 0.0)  # a handshake in flight, the only slot
    sent(proto)
    proto.connection_lost(b"h", "connection lost")
    assert proto.pending == {} and proto.budget.pending == 0 and proto.refused == 1
    proto.connection_lost(b"never-seen", "connection lost")  # unknown or already closed: nothing
    proto.connection_lost(b"a", "connection lost")
    assert events(proto) == ["refused"] and proto.devices[0].drops == ["connection lost"]
    joined(proto, b"next", 1)  # the freed slot admits the next peer


def test_plan_and_verdict_send_their_message_and_set_what_the_connection_owes():
    """The protocol owns its transitions: PLAN leaves the connection owing the DRAFT, a UL
    VERDICT the Q_PAYLOAD, a DL one the CORRECTION; a step out of turn sends nothing."""
    from multispin.errors import LocalProtocolError

    proto = make()
    conn = joined(proto)
    proto.plan(conn, 0, 2)
    ((_, plan),) = sent(proto)
    assert plan == P.PlanMsg(0, 2) and (conn.state, conn.round, conn.gamma) == (ConnState.AWAIT_DRAFT, 0, 2)
    with pytest.raises(LocalProtocolError, match="still owes DRAFT"):
        proto.verdict(conn, 0, 1, "ul")
    assert sent(proto) == []
    proto.receive(b"a", enc(MESSAGES["DRAFT"]), 0.0)
    for mode, owes in (("ul", ConnState.AWAIT_Q), ("dl", ConnState.AWAIT_CORRECTION)):
        conn.state = ConnState.IDLE
        proto.verdict(conn, 0, 1, mode, None if mode == "ul" else b"p" * 8)
        ((_, verdict),) = sent(proto)
        assert (verdict.num_accepted, verdict.mode, conn.state) == (1, mode, owes)


def test_a_step_the_connection_state_does_not_allow_is_a_local_error():
    """The loop's own mistakes raise LocalProtocolError; the device's are drops (never raised)."""
    from multispin.errors import LocalProtocolError, RemoteProtocolError

    proto = make()
    conn = joined(proto)
    proto._expect(conn, ConnState.AWAIT_DRAFT, 0, gamma=2)
    with pytest.raises(LocalProtocolError, match="expect Q_PAYLOAD: device 0's connection still owes DRAFT"):
        proto._expect(conn, ConnState.AWAIT_Q, 0)
    with pytest.raises(LocalProtocolError, match="COMMIT: device 0's connection still owes DRAFT"):
        proto.commit(conn, 0, [6], RoundRecord(0, 2, 2, None, None, 1, 0, 0, 0), finished=False)
    assert sent(proto) == [] and conn.alive
    proto.receive(b"a", enc(P.CorrectionMsg(0, 7)), 0.0)  # the device's mistake: a drop, not a raise
    assert not conn.alive and not issubclass(LocalProtocolError, RemoteProtocolError)


@pytest.mark.parametrize("close_first", [False, True], ids=["replacing", "resuming-after-close"])
def test_new_sessions_of_one_device_are_bounded_per_minute(close_first):
    """Past max_replacements new sessions of a device in 60 s the next HELLO is told `busy`
    (retry later) and the live session, if any, is kept; closing the socket before each HELLO
    (a resume, not a replacement) does not get round it; a minute later it is welcome again."""
    proto = make(max_replacements=3)
    joined(proto, b"a0")
    for i in range(1, 4):
        if close_first:
            proto.connection_lost(b"a%d" % (i - 1), "gone")
        out = join(proto, b"a%d" % i, now=float(i))
        assert isinstance(out[-1][1], P.WelcomeMsg), out
    if close_first:
        proto.connection_lost(b"a3", "gone")
    out = join(proto, b"a4", now=10.0)
    assert out[-1][1] == P.ErrorMsg.make(
        "busy", "device 0's session was replaced 3 times in the last 60 s; retry later"
    )
    assert (proto.devices[0].conn is not None) == (not close_first)  # the live session is kept
    out = join(proto, b"a5", now=62.0)  # the first replacements have left the window
    assert isinstance(out[-1][1], P.WelcomeMsg)
