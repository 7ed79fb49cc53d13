"""The round engine on plain arrays (order-2 Markov tables, no torch, no transport): the γ clip,
the policies' answers checked, UL ≡ DL corrections, the commit clipped to budget and EOS, the
bits of every record, "finished", and the rollback of a device that never commits."""

from __future__ import annotations

import pytest

from doubles import FixedDraftLengths
from multispin.errors import ConfigError
from multispin.models.synthetic import MarkovBatchedLM, MarkovSequenceLM, make_tables
from multispin.runtime.round.engine import PlannedRound, PolicyPair, RoundEngine, clip_new_tokens
from multispin.runtime.round.local import FixedLink
from multispin.runtime.round.roles import Draft, DraftDevice, VerifierServer
from multispin.speculative.codecs import make_codec
from multispin.speculative.warp import SamplingParams
from multispin.system.payload import WirePayload

V = 12
SAMPLING = SamplingParams(temperature=1.0)
CODEC = make_codec("dense-fp32")


def _setup(gammas, mode="ul", max_new=20, eos=(), seed=3, gamma_max=20, draft_noise=1.5):
    target, draft = make_tables(V, 0, draft_noise=draft_noise)
    verifier = VerifierServer(MarkovBatchedLM(target), SAMPLING, CODEC, CODEC, seed, gamma_max=gamma_max)
    devices = {d: DraftDevice(d, MarkovSequenceLM(draft), SAMPLING, CODEC, CODEC, seed, [1, 2]) for d in gammas}
    for d, dev in devices.items():
        verifier.open(d, dev.tokens)
    wire = WirePayload.from_codecs(CODEC, CODEC, V, gamma_max)
    policy = mode if callable(mode) else FixedLink(mode)
    engine = RoundEngine(verifier, PolicyPair(FixedDraftLengths(gammas), policy), max_new, eos, wire)
    return engine, devices


def _drafts(out, devices):
    return {d: devices[d].draft(out.gammas[d]) for d in out.gammas}


def _finish(engine, out, devices):
    """The in-process correction step for every verified device; returns each one's final token."""
    finals = {}
    for d, v in out.verdicts.items():
        dev = devices[d]
        if not v.rejected:
            finals[d] = v.bonus_token
        elif out.modes[d] == "ul":
            finals[d] = engine.correct_remotely(out, d, dev.upload_q(v.num_accepted))
        else:
            finals[d] = dev.correct_locally(v.num_accepted, engine.p_payload(out, d))
        dev.commit(v.num_accepted, engine.commit(out, d, finals[d]))
    return finals


def test_clip_new_tokens_stops_at_budget_and_first_eos():
    assert clip_new_tokens([5, 6, 7], eos_ids=(9,), budget=2) == [5, 6]
    assert clip_new_tokens([5, 9, 7], eos_ids=(9,), budget=5) == [5, 9]
    assert clip_new_tokens([], eos_ids=(9,), budget=5) == []


def test_plan_clips_gamma_to_budget_and_gamma_max():
    engine, _ = _setup({0: 9, 1: 3, 2: 0, 3: -2}, max_new=5, gamma_max=6)
    out = engine.plan(0, [0, 1, 2, 3])
    assert out.gammas == {0: 4, 1: 3, 2: 0, 3: 0}  # γ + 1 ≤ budget 5; negative → 0
    engine, _ = _setup({0: 9}, max_new=50, gamma_max=6)
    assert engine.plan(0, [0]).gammas == {0: 6}


def test_policy_answers_are_checked_with_one_line_errors():
    engine, _ = _setup({0: 2})
    engine.policy = PolicyPair(lambda r, active: {}, FixedLink("ul"))
    with pytest.raises(ConfigError, match="no integer γ for device 0 in round 0"):
        engine.plan(0, [0])
    engine, devices = _setup(
        {d: 6 for d in range(4)}, mode=lambda r, rejected: {d: "up" for d in rejected}, draft_noise=4.0
    )
    out = engine.plan(0, list(devices))
    with pytest.raises(ConfigError, match="mode policy: need 'ul' or 'dl'"):
        engine.verify(out, _drafts(out, devices))


@pytest.mark.parametrize("seed", range(4))
def test_ul_and_dl_corrections_give_the_same_tokens(seed):
    runs = {}
    for mode in ("ul", "dl"):
        engine, devices = _setup({0: 3, 1: 5, 2: 1}, mode=mode, seed=seed)
        out = engine.plan(0, [0, 1, 2])
        engine.verify(out, _drafts(out, devices))
        runs[mode] = (_finish(engine, out, devices), dict(out.kept), list(out.rejected))
    assert runs["ul"] == runs["dl"]
    assert runs["ul"][2], "some device should have been rejected"


def test_commit_records_bits_tokens_and_finished():
    engine, devices = _setup({0: 4, 1: 0, 2: 6}, mode="dl", max_new=3, draft_noise=2.0)
    out = engine.plan(0, [0, 1, 2])
    assert out.gammas == {0: 2, 1: 0, 2: 2}
    engine.verify(out, _drafts(out, devices))
    _finish(engine, out, devices)
    wire = engine.wire
    for d, rec in out.records.items():
        assert rec.round == 0 and rec.draft_len == out.gammas[d]
        assert rec.mode == out.modes.get(d)
        bits = wire.round_bits(rec.draft_len, rec.mode)
        assert (rec.uplink_bits, rec.downlink_bits, rec.payload_bits, rec.correction_bits) == (
            bits.uplink,
            bits.downlink,
            bits.distribution,
            bits.correction,
        )
        assert rec.tokens_gained == len(out.kept[d]) == len(engine.generated(d))
        assert engine.generated(d) == devices[d].generated
        assert (d in out.finished) == engine.finished(d)
    assert out.records[1].tokens_gained == 1 and out.records[1].rejection_position is None
    # a device at its budget is finished; EOS finishes it too
    assert all(engine.finished(d) == (len(engine.generated(d)) >= 3) for d in out.records)
    engine.eos_ids = (engine.generated(1)[-1],)
    assert engine.finished(1)


def test_close_rolls_back_a_device_that_never_commits():
    engine, devices = _setup({0: 3, 1: 3})
    out = engine.plan(0, [0, 1])
    engine.verify(out, _drafts(out, devices))
    record = list(engine.verifier.records[1])
    v = out.verdicts[0]
    final = v.bonus_token if not v.rejected else engine.correct_remotely(out, 0, devices[0].upload_q(v.num_accepted))
    engine.commit(out, 0, final)
    engine.close(out)  # device 1 vanished before its commit
    assert 1 not in out.records and engine.verifier.records[1] == record
    assert engine.verifier.lm.length(1) == len(record) - 1  # the next verify feeds the last token
    # and the next round verifies device 1 as if the lost round never happened
    out = engine.plan(1, [1])
    engine.verify(out, {1: Draft([], [])})
    assert out.verdicts[1].num_accepted == 0 and not out.verdicts[1].rejected


class _Recorder:
    """A round policy that records what the engine hands it."""

    def __init__(self):
        self.calls = []

    def plan(self, round_idx, active, caps=None):
        self.calls.append(("plan", round_idx, tuple(active)))
        return PlannedRound(round_idx, {d: 4 for d in active})

    def modes(self, plan, rejected):
        self.calls.append(("modes", plan, tuple(rejected)))
        return {d: "dl" for d in rejected}

    def observe(self, outcome):
        self.calls.append(("observe", outcome))


def test_policy_gets_its_plan_back_and_observes_the_outcome():
    engine, devices = _setup({0: 0, 1: 0, 2: 0}, draft_noise=4.0)
    policy = engine.policy = _Recorder()
    for r in range(2):
        out = engine.plan(r, [0, 1, 2])
        engine.verify(out, _drafts(out, devices))
        _finish(engine, out, devices)
        engine.close(out)
        plan_call, modes_call, observe_call = policy.calls[3 * r : 3 * r + 3]
        assert plan_call == ("plan", r, (0, 1, 2))
        assert modes_call[1] is out.plan and modes_call[2] == tuple(out.rejected)
        assert observe_call == ("observe", out) and out.plan.round == r
        assert set(out.records) == {0, 1, 2}


def _run(engine, devices, rounds, between=lambda r: None):
    for r in range(rounds):
        out = engine.plan(r, [d for d in devices if not engine.finished(d)])
        engine.verify(out, _drafts(out, devices))
        _finish(engine, out, devices)
        engine.close(out)
        between(r)
    return {d: dev.generated for d, dev in devices.items()}


def test_a_released_cache_is_rebuilt_from_the_record_with_the_same_tokens():
    """The server frees a detached device's target cache; the next verify prefills it from the
    record, and the tokens are those of a run that kept the cache."""
    kept = _run(*_setup({0: 3, 1: 2}, mode="dl"), rounds=6)
    engine, devices = _setup({0: 3, 1: 2}, mode="dl")
    lengths = []

    def release(r):
        engine.verifier.release(0)
        lengths.append(engine.verifier.lm.length(0))

    assert _run(engine, devices, 6, release) == kept
    assert lengths == [0] * 6


def _skipping_run(current_round):
    engine, devices = _setup({0: 3, 1: 2})
    for r in range(12):
        current_round[0] = r
        active = [d for d in devices if not engine.finished(d) and not (d == 0 and r in (1, 2, 5))]
        out = engine.plan(r, active)
        engine.verify(out, _drafts(out, devices))
        _finish(engine, out, devices)
        engine.close(out)
    return {d: dev.generated for d, dev in devices.items()}


def test_a_device_that_skips_rounds_draws_the_same_tokens():
    """Randomness is keyed on the committed length, not the round: device 0 sitting out rounds
    (detached, stalled) ends with the text of a run where it took part in every round."""
    assert _skipping_run([0]) == _run(*_setup({0: 3, 1: 2}), rounds=12)


def test_control_round_keyed_randomness_changes_a_skipping_device(monkeypatch):
    """Negative control: key the draws on the server round instead, and the device that sat out
    rounds ends with another text (so the test above can fail)."""
    import numpy as np

    from multispin.runtime.round import roles

    current = [0]
    monkeypatch.setattr(
        roles, "step_rng", lambda seed, d, pos, purpose: np.random.default_rng([seed, d, current[0], purpose])
    )
    ref = _setup({0: 3, 1: 2})
    engine, devices = ref

    def track(r):
        current[0] = r + 1

    full = _run(engine, devices, 12, track)
    skipped = _skipping_run(current)
    assert skipped[1] == full[1] and skipped[0] != full[0]
