"""The coupled rule on the wire: PLAN and COMMIT say the rule, a coupled DRAFT is token ids only
and a standard one carries its q scalars (each refused in one line otherwise), the device reads
its accepted count off the COMMIT, and the bits a coupled round is charged are the bits it sends."""

from __future__ import annotations

import pytest
from test_server_protocol import LIMITS, PROMPT, enc, joined, make, sent

from multispin.errors import LocalProtocolError, RemoteProtocolError
from multispin.runtime.round.engine import RoundRecord
from multispin.runtime.wire import messages as P
from multispin.runtime.wire.device_protocol import DeviceProtocol, DraftRequested
from multispin.runtime.wire.server_protocol import ConnState
from multispin.speculative.codecs import make_codec
from multispin.system.payload import RoundBits, WirePayload
from multispin.vocabulary import COUPLED


def test_plan_and_commit_carry_the_rule_and_round_trip():
    for msg in (P.PlanMsg(0, 3, True), P.CommitMsg(0, (1, 2), 5, b"d" * 32, 4, True)):
        assert P.decode_message(P.encode_message(msg, LIMITS), LIMITS) == msg
    assert P.decode_message(P.encode_message(P.PlanMsg(0, 3), LIMITS), LIMITS).coupled is None  # standard


def test_a_tokens_only_draft_decodes_and_carries_no_q_bytes():
    coupled = P.DraftMsg.make(0, (1, 2, 3), ())
    standard = P.DraftMsg.make(0, (1, 2, 3), (0.5,) * 3)
    assert coupled.tokens_only and not standard.tokens_only
    assert P.decode_message(P.encode_message(coupled, LIMITS), LIMITS) == coupled
    # the wire difference is exactly the three float64 scalars
    assert len(P.encode_message(standard)) - len(P.encode_message(coupled)) == 3 * P.Q_SCALAR_BYTES


@pytest.mark.parametrize(
    ("coupled", "draft", "reason"),
    [
        (
            True,
            P.DraftMsg.make(0, (1, 2), (0.5, 0.5)),
            "DRAFT.q: 16 bytes of q scalars, but the PLAN put this device under the coupled rule",
        ),
        (False, P.DraftMsg.make(0, (1, 2), ()), "DRAFT.q: missing: a standard draft needs one q̂ scalar per token"),
    ],
)
def test_a_draft_of_the_wrong_form_is_refused_in_one_line(coupled, draft, reason):
    proto = make()
    conn = joined(proto)
    proto.plan(conn, 0, 2, coupled)
    ((_, plan),) = sent(proto)
    assert plan == P.PlanMsg(0, 2, True if coupled else None)
    proto.receive(b"a", enc(draft), 0.0)
    assert not conn.alive and reason in proto.devices[0].drops[-1] and "\n" not in proto.devices[0].drops[-1]


@pytest.mark.parametrize("coupled", [True, False])
def test_a_draft_of_the_right_form_is_taken(coupled):
    proto = make()
    conn = joined(proto)
    proto.plan(conn, 0, 2, coupled)
    proto.receive(b"a", enc(P.DraftMsg.make(0, (1, 2), () if coupled else (0.5, 0.5))), 0.0)
    assert conn.alive and conn.state is ConnState.IDLE and isinstance(conn.inbox, P.DraftMsg)


def test_commit_carries_the_next_rule_to_the_connection():
    proto = make()
    conn = joined(proto)
    proto.records[0].extend([6])
    proto.commit(
        conn, 0, [6], RoundRecord(0, 0, 0, None, None, 1, 0, 0, 0), finished=False, next_gamma=2, next_coupled=True
    )
    ((_, commit),) = sent(proto)
    assert commit.next_coupled is True and conn.coupled and conn.gamma == 2


def _device_in_round(coupled: bool, draft=(5, 6, 7)) -> DeviceProtocol:
    dev = DeviceProtocol(0, None, PROMPT)
    dev.hello(resume=False)
    dev.receive(P.WelcomeMsg(0, **{**_welcome(), "tokens": PROMPT, "num_prompt": 3, "next_round": 0, "resumed": False}))
    assert dev.receive(P.PlanMsg(0, len(draft), True if coupled else None)) == DraftRequested(0, len(draft), coupled)
    dev.send_draft(draft, () if coupled else (0.5,) * len(draft))
    return dev


def _welcome():
    from test_server_protocol import WELCOME

    return WELCOME


@pytest.mark.parametrize(("commit", "accepted"), [((5, 9), 1), ((9,), 0), ((5, 6, 7, 8), 3), ((5, 6), 2)])
def test_the_device_reads_its_accepted_count_off_the_commit(commit, accepted):
    """x* differs from the draft where the rule stopped, so the common prefix is the accepted count
    (the last case: a budget/EOS clip inside the accepted drafts)."""
    dev = _device_in_round(True)
    ev = dev.receive(P.CommitMsg(0, commit, 3 + len(commit), P.token_digest(PROMPT + commit)))
    assert ev.num_accepted == accepted and ev.tokens == commit


def test_a_coupled_device_refuses_a_verdict_and_q_scalars():
    dev = _device_in_round(True)
    with pytest.raises(RemoteProtocolError, match="never rejected"):
        dev.receive(P.VerdictMsg(0, 1, "ul"))
    dev2 = DeviceProtocol(0, None, PROMPT)
    dev2.hello(resume=False)
    dev2.receive(
        P.WelcomeMsg(0, **{**_welcome(), "tokens": PROMPT, "num_prompt": 3, "next_round": 0, "resumed": False})
    )
    dev2.receive(P.PlanMsg(0, 2, True))
    with pytest.raises(LocalProtocolError, match="token ids only"):
        dev2.send_draft((1, 2), (0.5, 0.5))


# ---- bits: what a coupled round is charged is what it sends ----


def test_coupled_round_bits_are_ids_up_and_count_plus_x_star_down():
    w = WirePayload.from_codecs(make_codec("dense-fp32"), make_codec("dense-fp32"), 256, 20)
    assert w.round_bits(3, None, COUPLED) == RoundBits(3 * 8, 5 + 8, 0, 0)
    assert w.round_bits(0, None, COUPLED) == RoundBits(0, 5 + 8, 0, 0)
    # the standard round of the same γ moves 3 q scalars more up
    assert w.round_bits(3, None).uplink - w.round_bits(3, None, COUPLED).uplink == 3 * w.q_scalar_bits
    from multispin.errors import ConfigError

    with pytest.raises(ConfigError, match="a coupled device is never corrected"):
        w.round_bits(3, "ul", COUPLED)


def test_the_charged_uplink_is_the_drafts_wire_content():
    """The DRAFT's payload beyond its envelope is what the record charges: token ids (msgpack
    ints here, ⌈log2 V⌉ bits each in the model) and, for a standard draft only, the q scalars."""
    w = WirePayload.from_codecs(make_codec("dense-fp32"), make_codec("dense-fp32"), 256, 20)
    for gamma in (1, 4, 8):
        toks = tuple(range(1, gamma + 1))
        std = len(P.encode_message(P.DraftMsg.make(0, toks, (0.5,) * gamma)))
        cpl = len(P.encode_message(P.DraftMsg.make(0, toks, ())))
        charged = w.round_bits(gamma, None).uplink - w.round_bits(gamma, None, COUPLED).uplink
        assert 8 * (std - cpl) == charged  # the scalars are the whole difference, bit for bit
