"""The device's sans-I/O protocol object without a socket: full rounds (accepted, UL, DL), every
server message in every state, and every violation (remote and local)."""

from __future__ import annotations

import pytest

from multispin.runtime.wire import messages as P
from multispin.runtime.security.auth import compute_mac
from multispin.runtime.wire.device_protocol import (
    Closed, Committed, CorrectionRequested, DeviceProtocol, DeviceState, DraftRequested,
    LocalProtocolError, QRequested, RemoteProtocolError, Welcomed,
)

PROMPT = (65, 66, 67)
DRAFT = (5, 6, 7)
Q = (0.5, 0.25, 0.125)


SECRET = b"device-protocol-secret"
NONCE = b"n" * 32


def _welcome(tokens=PROMPT):
    return P.WelcomeMsg(device_id=7, pair="tiny", vocab_size=256, gamma_max=20, seed=0, temperature=1.0,
                        top_k=0, top_p=1.0, ul_codec="dense-fp32", dl_codec="dense-fp32", max_new_tokens=32,
                        max_prompt_tokens=4096, eos_ids=(2,), tokens=tuple(tokens), num_prompt=len(PROMPT),
                        next_round=0, resumed=False)


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
    proto.receive(P.VerdictMsg(5, 1, False, 3, None))
    assert proto.receive(_commit((4, 3), r=5, prompt=record)).length == len(record) + 2


def _commit(tokens, r=0, prompt=PROMPT):
    record = list(prompt) + list(tokens)
    return P.CommitMsg(r, tuple(tokens), len(record), P.token_digest(record))


def test_accepted_round_then_bye():
    proto = _session()
    assert proto.receive(P.PlanMsg(0, 3)) == DraftRequested(0, 3)
    msg = proto.send_draft(DRAFT, Q, 0.01)
    assert isinstance(msg, P.DraftMsg) and msg.tokens == DRAFT and msg.q_values == list(Q)
    assert proto.receive(P.VerdictMsg(0, 3, False, 9, None)) is None
    assert proto.state is DeviceState.WAIT_COMMIT
    ev = proto.receive(_commit(DRAFT + (9,)))
    assert ev == Committed(0, 3, DRAFT + (9,), 7, P.token_digest(PROMPT + DRAFT + (9,)))
    assert proto.state is DeviceState.IDLE
    bye = P.ByeMsg.make("done", PROMPT + DRAFT + (9,))
    assert proto.receive(bye) == Closed("done", bye.digest) and proto.state is DeviceState.CLOSED
    assert proto.digest.digest() == bye.digest


def test_ul_round():
    proto = _session()
    proto.receive(P.PlanMsg(4, 3))
    proto.send_draft(DRAFT, Q)
    assert proto.receive(P.VerdictMsg(4, 1, True, None, "ul")) == QRequested(1)
    assert proto.send_q(b"q") == P.QPayloadMsg(4, b"q")
    assert proto.receive(P.CorrectionMsg(4, 11)) is None
    assert proto.receive(_commit((5, 11), r=4)).tokens == (5, 11)


def test_dl_round_and_commit_clipped_to_budget():
    proto = _session()
    proto.receive(P.PlanMsg(0, 3))
    proto.send_draft(DRAFT, Q)
    assert proto.receive(P.VerdictMsg(0, 2, True, None, "dl")) is None
    assert proto.receive(P.PPayloadMsg(0, b"p")) == CorrectionRequested(2, b"p")
    assert proto.send_correction(12, 0.001) == P.CorrectionMsg(0, 12, 0.001)
    assert proto.receive(_commit((5,))).num_accepted == 2  # the server kept only the budget


# --------------------------------------------------------------------------------------------
# every message in every state


def _to(state: str) -> DeviceProtocol:
    """A protocol object driven into `state` of round 0 (WAIT_COMMIT through an accepted verdict)."""
    proto = _session()
    if state == "idle":
        return proto
    proto.receive(P.PlanMsg(0, 3))
    if state == "drafting":
        return proto
    proto.send_draft(DRAFT, Q)
    if state == "drafted":
        return proto
    if state in ("sending_q", "wait_correction"):
        proto.receive(P.VerdictMsg(0, 1, True, None, "ul"))
        if state == "wait_correction":
            proto.send_q(b"q")
    elif state in ("wait_p", "correcting"):
        proto.receive(P.VerdictMsg(0, 1, True, None, "dl"))
        if state == "correcting":
            proto.receive(P.PPayloadMsg(0, b"p"))
    elif state == "wait_commit":
        proto.receive(P.VerdictMsg(0, 3, False, 9, None))
    elif state == "closed":
        proto.receive(P.ByeMsg.make("shutdown"))
    assert proto.state.value == state
    return proto


MESSAGES = {
    "PLAN": P.PlanMsg(0, 2),
    "VERDICT": P.VerdictMsg(0, 3, False, 9, None),
    "P_PAYLOAD": P.PPayloadMsg(0, b"p"),
    "CORRECTION": P.CorrectionMsg(0, 11),
    "COMMIT": _commit(DRAFT + (9,)),
    "BYE": P.ByeMsg.make("done"),
    "CHALLENGE": P.ChallengeMsg(b"n" * 32),
    "WELCOME": _welcome(),
    "DRAFT": P.DraftMsg.make(0, DRAFT, Q),
}
ALLOWED = {
    "idle": {"PLAN"}, "drafting": set(), "drafted": {"VERDICT"}, "sending_q": set(),
    "wait_correction": {"CORRECTION"}, "wait_p": {"P_PAYLOAD"}, "correcting": set(),
    "wait_commit": {"COMMIT"}, "closed": set(),
}


@pytest.mark.parametrize("state", list(ALLOWED))
@pytest.mark.parametrize("kind", list(MESSAGES))
def test_every_message_in_every_state(state, kind):
    proto = _to(state)
    if kind == "BYE" or kind in ALLOWED[state]:
        proto.receive(MESSAGES[kind])  # no error
        return
    with pytest.raises(RemoteProtocolError, match=f"^{kind}"):
        proto.receive(MESSAGES[kind])


# --------------------------------------------------------------------------------------------
# violations


@pytest.mark.parametrize("msg, match", [
    (P.VerdictMsg(1, 3, False, 9, None), r"VERDICT.round: 1 but this device is in round 0"),
    (P.VerdictMsg(0, 4, False, 9, None), r"VERDICT.num_accepted: 4 > drafted 3"),
    (P.VerdictMsg(0, 3, True, None, "ul"), r"VERDICT.rejected: no drafted token left"),
])
def test_bad_verdicts(msg, match):
    with pytest.raises(RemoteProtocolError, match=match):
        _to("drafted").receive(msg)


def test_commit_that_does_not_extend_the_round_or_disagrees_with_the_record():
    with pytest.raises(RemoteProtocolError, match="COMMIT.tokens"):
        _to("wait_commit").receive(_commit(DRAFT + (8,)))
    with pytest.raises(RemoteProtocolError, match="COMMIT.digest"):
        _to("wait_commit").receive(_commit(DRAFT + (9,), prompt=(1, 2, 3)))
    bad_len = P.CommitMsg(0, DRAFT + (9,), 99, P.token_digest(PROMPT + DRAFT + (9,)))
    with pytest.raises(RemoteProtocolError, match="COMMIT.digest"):
        _to("wait_commit").receive(bad_len)


@pytest.mark.parametrize("state", list(ALLOWED))
def test_local_sends_only_in_their_state(state):
    sends = {"drafting": lambda p: p.send_draft(DRAFT, Q), "sending_q": lambda p: p.send_q(b"q"),
             "correcting": lambda p: p.send_correction(3)}
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
