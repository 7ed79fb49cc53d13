"""The device's sans-I/O protocol object without a socket: full rounds (accepted, UL, DL), every
server message in every state, and every violation (remote and local)."""

from __future__ import annotations

import pytest

from multispin.runtime.security.auth import compute_mac
from multispin.runtime.wire import messages as P
from multispin.runtime.wire.device_protocol import (
    Closed,
    Committed,
    CorrectionRequested,
    DeviceProtocol,
    DeviceState,
    DraftRequested,
    LocalProtocolError,
    QRequested,
    RemoteProtocolError,
    Welcomed,
)

PROMPT = (65, 66, 67)
DRAFT = (5, 6, 7)
Q = (0.5, 0.25, 0.125)


SECRET = b"device-protocol-secret"
NONCE = b"n" * 32


def _welcome(tokens=PROMPT):
    return P.WelcomeMsg(
        device_id=7,
        pair="tiny",
        vocab_size=256,
        gamma_max=20,
        seed=0,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        ul_codec="dense-fp32",
        dl_codec="dense-fp32",
        max_new_tokens=32,
        max_prompt_tokens=4096,
        eos_ids=(2,),
        tokens=tuple(tokens),
        num_prompt=len(PROMPT),
        next_round=0,
        resumed=False,
    )


def _session(tokens=PROMPT) -> DeviceProtocol:
    """A protocol object through the handshake (HELLO, CHALLENGE, AUTH, WELCOME)."""
    proto = DeviceProtocol(7, SECRET, PROMPT, "mid")
    assert proto.state is DeviceState.START
    assert proto.hello(resume=True) == P.HelloMsg(7, PROMPT, True, "mid")
    assert proto.allowed == ("CHALLENGE", "WELCOME", "ERROR")
    assert proto.receive(P.ChallengeMsg(NONCE)) == P.AuthMsg(7, compute_mac(SECRET, NONCE, 7))
    assert proto.allowed == ("WELCOME", "ERROR")
    w = _welcome(tokens)
    assert proto.receive(w) == Welcomed(w) and proto.state is DeviceState.IDLE
    assert "PLAN" in proto.allowed and proto.digest.digest() == P.token_digest(tokens)
    return proto


def test_handshake_messages_out_of_order_are_remote_errors():
    proto = DeviceProtocol(7, SECRET, PROMPT)
    with pytest.raises(RemoteProtocolError, match="CHALLENGE: unexpected in state start"):
        proto.receive(P.ChallengeMsg(NONCE))
    proto.hello(resume=False)
    with pytest.raises(RemoteProtocolError, match="WELCOME: unexpected in state await_challenge"):
        proto.receive(_welcome())
    with pytest.raises(RemoteProtocolError, match="PLAN: unexpected in state await_challenge"):
        proto.receive(P.PlanMsg(0, 1))
    with pytest.raises(LocalProtocolError, match="HELLO: not allowed"):
        proto.hello(resume=False)
    with pytest.raises(RemoteProtocolError, match="CHALLENGE: unexpected in state idle"):
        _session().receive(P.ChallengeMsg(NONCE))


def test_key_mode_handshake_is_hello_then_welcome():
    """With keys the transport authenticated both ends: WELCOME answers HELLO directly, and a
    CHALLENGE (a plaintext server) is refused rather than answered without a secret."""
    proto = DeviceProtocol(7, None, PROMPT, "mid")
    proto.hello(resume=True)
    w = _welcome()
    assert proto.receive(w) == Welcomed(w) and proto.state is DeviceState.IDLE
    plain = DeviceProtocol(7, None, PROMPT)
    plain.hello(resume=True)
    with pytest.raises(RemoteProtocolError, match="asks for a shared secret"):
        plain.receive(P.ChallengeMsg(NONCE))


def test_a_resumed_session_checks_commits_against_the_record_in_welcome():
    record = PROMPT + (9, 10)
    proto = _session(record)
    proto.receive(P.PlanMsg(5, 1))
    proto.send_draft((4,), (0.5,))
    assert proto.receive(_commit((4, 3), r=5, prompt=record)).length == len(record) + 2


def _commit(tokens, r=0, prompt=PROMPT, next_gamma=None):
    record = list(prompt) + list(tokens)
    return P.CommitMsg(r, tuple(tokens), len(record), P.token_digest(record), next_gamma)


def test_accepted_round_is_committed_without_a_verdict_then_bye():
    proto = _session()
    assert proto.receive(P.PlanMsg(0, 3)) == DraftRequested(0, 3)
    msg = proto.send_draft(DRAFT, Q, 0.01)
    assert isinstance(msg, P.DraftMsg) and msg.tokens == DRAFT and msg.q_values == list(Q)
    assert proto.state is DeviceState.DRAFTED
    ev = proto.receive(_commit(DRAFT + (9,)))  # every draft token accepted, 9 the bonus
    assert ev == Committed(0, 3, DRAFT + (9,), 7, P.token_digest(PROMPT + DRAFT + (9,)))
    assert proto.state is DeviceState.IDLE
    bye = P.ByeMsg.make("done", PROMPT + DRAFT + (9,))
    assert proto.receive(bye) == Closed("done", bye.digest) and proto.state is DeviceState.CLOSED
    assert proto.digest.digest() == bye.digest


def test_commit_carrying_the_next_plan_starts_the_next_draft():
    proto = _session()
    proto.receive(P.PlanMsg(0, 3))
    proto.send_draft(DRAFT, Q)
    ev = proto.receive(_commit(DRAFT + (9,), next_gamma=2))
    assert ev.next == DraftRequested(1, 2) and ev.tokens == DRAFT + (9,)
    assert proto.state is DeviceState.DRAFTING and proto.round == 1
    with pytest.raises(RemoteProtocolError, match="PLAN: unexpected in state drafting"):
        proto.receive(P.PlanMsg(1, 2))  # the COMMIT was that PLAN: a second one is the server's error
    assert proto.send_draft((4, 5), (0.5, 0.5)).round == 1
    after = PROMPT + DRAFT + (9,)
    assert proto.receive(_commit((4, 5, 6), r=1, prompt=after)).next is None  # the last round
    assert proto.state is DeviceState.IDLE
    # negative control: without next_gamma the same COMMIT leaves the device idle, owing nothing
    plain = _session()
    plain.receive(P.PlanMsg(0, 3))
    plain.send_draft(DRAFT, Q)
    assert plain.receive(_commit(DRAFT + (9,))).next is None and plain.state is DeviceState.IDLE


def test_bye_overtaking_a_planned_round_ends_the_session():
    """The server stops after sending COMMIT + next PLAN: BYE reaches a device that drafts."""
    proto = _session()
    proto.receive(P.PlanMsg(0, 3))
    proto.send_draft(DRAFT, Q)
    proto.receive(_commit(DRAFT + (9,), next_gamma=3))
    proto.send_draft(DRAFT, Q)  # round 1's DRAFT goes out; the server already said BYE
    bye = P.ByeMsg.make("rounds", PROMPT + DRAFT + (9,))
    assert proto.receive(bye) == Closed("rounds", bye.digest) and proto.digest.digest() == bye.digest


def test_ul_round_learns_its_correction_from_the_commit():
    proto = _session()
    proto.receive(P.PlanMsg(4, 3))
    proto.send_draft(DRAFT, Q)
    assert proto.receive(P.VerdictMsg(4, 1, "ul")) == QRequested(1)
    assert proto.send_q(b"q") == P.QPayloadMsg(4, b"q")
    assert proto.state is DeviceState.WAIT_COMMIT
    assert proto.receive(_commit((5, 11), r=4)).tokens == (5, 11)


def test_dl_round_gets_p_in_the_verdict_and_commit_clipped_to_budget():
    proto = _session()
    proto.receive(P.PlanMsg(0, 3))
    proto.send_draft(DRAFT, Q)
    assert proto.receive(P.VerdictMsg(0, 2, "dl", b"p")) == CorrectionRequested(2, b"p")
    assert proto.send_correction(12, 0.001) == P.CorrectionMsg(0, 12, 0.001)
    assert proto.receive(_commit((5,))).num_accepted == 2  # the server kept only the budget


# --------------------------------------------------------------------------------------------
# every message in every state


def _to(state: str) -> DeviceProtocol:
    """A protocol object driven into `state` of round 0 (WAIT_COMMIT through a DL correction 11
    after one accepted token)."""
    proto = _session()
    if state == "idle":
        return proto
    proto.receive(P.PlanMsg(0, 3))
    if state == "drafting":
        return proto
    proto.send_draft(DRAFT, Q)
    if state == "drafted":
        return proto
    if state == "sending_q":
        proto.receive(P.VerdictMsg(0, 1, "ul"))
    elif state in ("correcting", "wait_commit"):
        proto.receive(P.VerdictMsg(0, 1, "dl", b"p"))
        if state == "wait_commit":
            proto.send_correction(11)
    elif state == "closed":
        proto.receive(P.ByeMsg.make("shutdown"))
    assert proto.state.value == state
    return proto


MESSAGES = {
    "PLAN": P.PlanMsg(0, 2),
    "VERDICT": P.VerdictMsg(0, 1, "ul"),
    "CORRECTION": P.CorrectionMsg(0, 11),  # a device sends it; the server no longer does
    "BYE": P.ByeMsg.make("done"),
    "CHALLENGE": P.ChallengeMsg(b"n" * 32),
    "WELCOME": _welcome(),
    "DRAFT": P.DraftMsg.make(0, DRAFT, Q),
}
# COMMIT fits the state it is sent in: all accepted in DRAFTED, the correction 11 in WAIT_COMMIT
COMMITS = {"drafted": _commit(DRAFT + (9,)), "wait_commit": _commit((5, 11))}
ALLOWED = {
    "idle": {"PLAN"},
    "drafting": set(),
    "drafted": {"VERDICT", "COMMIT"},
    "sending_q": set(),
    "correcting": set(),
    "wait_commit": {"COMMIT"},
    "closed": set(),
}


@pytest.mark.parametrize("state", list(ALLOWED))
@pytest.mark.parametrize("kind", [*MESSAGES, "COMMIT"])
def test_every_message_in_every_state(state, kind):
    proto = _to(state)
    msg = COMMITS.get(state, COMMITS["drafted"]) if kind == "COMMIT" else MESSAGES[kind]
    if kind == "BYE" or kind in ALLOWED[state]:
        proto.receive(msg)  # no error
        return
    with pytest.raises(RemoteProtocolError, match=f"^{kind}"):
        proto.receive(msg)


# --------------------------------------------------------------------------------------------
# violations


@pytest.mark.parametrize(
    "msg, match",
    [
        (P.VerdictMsg(1, 1, "ul"), r"VERDICT.round: 1 but this device is in round 0"),
        (P.VerdictMsg(0, 3, "ul"), r"VERDICT.num_accepted: 3 leaves no drafted token of 3 to reject"),
        (P.VerdictMsg(0, 4, "dl", b"p"), r"VERDICT.num_accepted: 4 leaves no drafted token"),
    ],
)
def test_bad_verdicts(msg, match):
    with pytest.raises(RemoteProtocolError, match=match):
        _to("drafted").receive(msg)
    _to("drafted").receive(P.VerdictMsg(0, 2, "ul"))  # control: the last token may be rejected


@pytest.mark.parametrize(
    "state, tokens",
    [
        ("drafted", DRAFT[:2] + (8,)),  # all accepted, but not this draft
        ("drafted", DRAFT + (9, 10)),  # more than γ + 1 tokens
        ("wait_commit", (5, 12)),  # not the device's own DL correction
        ("wait_commit", (6, 11)),  # not the accepted prefix
        ("wait_commit", (5, 11, 4)),  # past the rejected position
    ],
)
def test_commit_that_does_not_extend_the_round(state, tokens):
    with pytest.raises(RemoteProtocolError, match="COMMIT.tokens"):
        _to(state).receive(_commit(tokens))


def test_commit_that_disagrees_with_the_record():
    assert _to("wait_commit").receive(_commit((5, 11))).tokens == (5, 11)  # control
    with pytest.raises(RemoteProtocolError, match="COMMIT.digest"):
        _to("wait_commit").receive(_commit((5, 11), prompt=(1, 2, 3)))
    bad_len = P.CommitMsg(0, (5, 11), 99, P.token_digest(PROMPT + (5, 11)))
    with pytest.raises(RemoteProtocolError, match="COMMIT.digest"):
        _to("wait_commit").receive(bad_len)


@pytest.mark.parametrize("state", list(ALLOWED))
def test_local_sends_only_in_their_state(state):
    sends = {
        "drafting": lambda p: p.send_draft(DRAFT, Q),
        "sending_q": lambda p: p.send_q(b"q"),
        "correcting": lambda p: p.send_correction(3),
    }
    for own, send in sends.items():
        proto = _to(state)
        if own == state:
            send(proto)
        else:
            with pytest.raises(LocalProtocolError, match="not allowed in state"):
                send(proto)


def test_errors_are_protocol_errors_of_two_kinds():
    from multispin.errors import ProtocolError

    assert issubclass(LocalProtocolError, ProtocolError) and issubclass(RemoteProtocolError, ProtocolError)
    assert not issubclass(LocalProtocolError, RemoteProtocolError)
