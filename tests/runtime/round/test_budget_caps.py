"""Budget-aware planning: no device is planned a draft longer than its job can use (remaining
budget − 1, the round engine's clip), and the model of a capped device is what the engine does."""

from __future__ import annotations

import numpy as np
import pytest
from tests.optimize._builders import random_preset_instances

from multispin.errors import ConfigError
from multispin.optimize.goodput import expected_tokens, rejection_prob
from multispin.optimize.plan import plan
from multispin.runtime.round.engine import PlannedRound, RoundEngine
from multispin.runtime.round.planner import ScenarioPlanner
from multispin.speculative.codecs import make_codec
from multispin.system.payload import WirePayload
from multispin.system.scenario import get_preset

CODEC = make_codec("dense-fp32")
WIRE = WirePayload.from_codecs(CODEC, CODEC, 12, 20)


def test_past_its_cap_a_device_gains_nothing_and_risks_nothing():
    inst = random_preset_instances(1, seed=1, max_devices=4)[0]
    k = inst.num_devices
    cap = np.arange(k) % 3
    capped = inst.replace(gamma_cap=cap)
    for g in range(inst.gamma_max + 1):
        gamma = np.full(k, g)
        same = np.minimum(gamma, cap)
        assert np.allclose(expected_tokens(capped, gamma), expected_tokens(inst, same))
        assert np.allclose(rejection_prob(capped, gamma), rejection_prob(inst, same))
    assert capped.subset([k - 1]).gamma_cap.tolist() == [cap[-1]]
    with pytest.raises(ConfigError, match="gamma_cap"):
        inst.replace(gamma_cap=np.full(k, inst.gamma_max + 1))


def test_plans_never_exceed_the_caps():
    rng = np.random.default_rng(5)
    for inst in random_preset_instances(12, seed=7, max_devices=8):
        cap = rng.integers(0, 6, inst.num_devices)
        u = rng.random((200, inst.num_devices))
        free = plan(inst, uniforms=u)
        capped = plan(inst.replace(gamma_cap=cap), uniforms=u)
        assert np.all(capped.draft_len <= cap)
        # the cap only removes choices: never a better plan than the uncapped one on the same samples
        assert capped.goodput_tokens_per_s <= free.goodput_tokens_per_s + 1e-9


def _planner(k=6, seed=3):
    sc = get_preset("paper-qwen").override({"devices.count": k, "seed": seed, "optimizer.n_saa": 200})
    return ScenarioPlanner(sc, range(k), WIRE, policy="adaptive", online=False)


def test_the_scenario_planner_plans_within_each_jobs_remaining_budget():
    planner = _planner()
    rng = np.random.default_rng(11)
    for r in range(20):
        caps = {d: int(c) for d, c in enumerate(rng.integers(0, 4, 6))}
        rp = planner.plan(r, range(6), caps)
        assert all(rp.draft_lengths[d] <= caps[d] for d in range(6)), (caps, rp.draft_lengths)
        assert rp.instance.gamma_cap.tolist() == [caps[d] for d in range(6)]
    # negative control: told nothing, the same planner drafts past those small budgets
    planned = [max(_planner().plan(r, range(6)).draft_lengths.values()) for r in range(5)]
    assert max(planned) > 3


class _Verifier:
    """Just enough of a VerifierServer for the engine's plan step."""

    gamma_max = 20

    def __init__(self, generated):
        self.counts = generated

    def num_generated(self, d):
        return self.counts[d]


class _CapRecorder:
    def __init__(self):
        self.caps = None

    def plan(self, round_idx, active, caps=None):
        self.caps = dict(caps)
        return PlannedRound(round_idx, {d: 20 for d in active})


def test_the_engine_tells_the_policy_each_devices_cap_and_clips_to_it():
    policy = _CapRecorder()
    engine = RoundEngine(_Verifier({0: 0, 1: 60, 2: 63}), policy, max_new_tokens=64, eos_ids=(), wire=WIRE)
    out = engine.plan(0, [0, 1, 2])
    assert policy.caps == {0: 20, 1: 3, 2: 0}
    assert out.gammas == policy.caps
