"""Baselines (§5.3) and the extensions' gains (§5.4)."""

from __future__ import annotations

import numpy as np
import pytest

from multispin.optimize.baselines import baselines
from multispin.optimize.draft_lengths import local_search
from multispin.optimize.goodput import SAAObjective, goodput
from multispin.optimize.reactive import fixed_modes_latency_s, optimal_modes_batch, policy_ul_mask
from multispin.system import World, get_preset


def test_optimal_modes_dominate_every_fixed_policy_outcome_by_outcome(qwen_world):
    inst = qwen_world.instance(0)
    rng = np.random.default_rng(0)
    masks = rng.random((500, inst.num_devices)) < 0.5
    best = optimal_modes_batch(masks, inst).latency_s
    for modes in ("all_ul", "all_dl", "random"):
        ul = policy_ul_mask(masks, modes, rng.random(masks.shape))
        assert np.all(best <= fixed_modes_latency_s(masks, ul, inst) * (1 + 1e-12))


def test_random_baseline_is_deterministic_given_its_coins(qwen_world):
    inst = qwen_world.instance(0)
    u, mu = qwen_world.saa_uniforms(0)[:200], qwen_world.mode_uniforms(0)[:200]
    g = np.full(inst.num_devices, 5)
    a = goodput(inst, g, u, modes="random", mode_uniforms=mu)
    assert a == goodput(inst, g, u, modes="random", mode_uniforms=mu)
    assert a != goodput(inst, g, u, modes="random", mode_uniforms=1 - mu)


@pytest.mark.parametrize("pdl_dbm", [16.0, 22.0])
def test_adaptive_beats_every_mode_baseline_on_the_preset(pdl_dbm):
    w = World(get_preset("paper-qwen").override({"radio.p_dl_dbm": pdl_dbm}))
    inst, u, mu = w.instance(0), w.saa_uniforms(0), w.mode_uniforms(0)
    base = baselines(inst, u, mu)
    ours = local_search(SAAObjective(inst, u), {n: dp.draft_len for n, dp in base.items()})
    assert set(base) == {"all_ul", "all_dl", "random", "best_uniform", "computation_only", "greedy_paper"}
    for name, dp in base.items():
        assert ours.goodput_tokens_per_s >= dp.goodput_tokens_per_s * (1 - 1e-12), name
    for modes in ("all_ul", "all_dl", "random"):
        assert ours.goodput_tokens_per_s > base[modes].goodput_tokens_per_s
        # each mode baseline planned its own γ: on its own objective it beats our γ
        obj = SAAObjective(inst, u, modes=modes, mode_uniforms=mu if modes == "random" else None)
        assert base[modes].goodput_tokens_per_s >= obj.value(ours.draft_len) * (1 - 1e-12)


def test_dl_set_grows_with_dl_power(qwen_world):
    """As P^dl grows more rejected devices are served in DL, but not all of them (paper, §6)."""
    inst = qwen_world.instance(0)
    masks = np.random.default_rng(0).random((2000, inst.num_devices)) < 0.5
    shares = []
    for ratio in (1, 4, 16, 64):
        d = optimal_modes_batch(masks, inst.with_radio(p_dl_w=0.01 * ratio), return_modes=True)
        shares.append(float((masks & ~d.is_ul).sum() / masks.sum()))
    assert all(b >= a for a, b in zip(shares, shares[1:]))
    assert 0 < shares[0] and shares[-1] < 1


def test_mode_baselines_have_their_own_draft_lengths(qwen_world):
    inst, u, mu = qwen_world.instance(2), qwen_world.saa_uniforms(2)[:300], qwen_world.mode_uniforms(2)[:300]
    out = baselines(inst, u, mu, policy="best_uniform", draft_lengths=False)
    assert {k: v.draft_len.shape for k, v in out.items()} == {m: (20,) for m in ("all_ul", "all_dl", "random")}


def test_verification_cost_per_token_changes_the_plan_and_aware_planning_gains():
    """Extension T_ver^tok > 0: planning with it beats planning as if it were 0 (the paper's model)."""
    w = World(get_preset("paper-qwen"))
    inst, u = w.instance(0), w.saa_uniforms(0)
    real = inst.with_compute(t_ver_tok_s=0.002)
    naive = local_search(SAAObjective(inst, u)).draft_len
    aware = local_search(SAAObjective(real, u)).draft_len
    g_naive = SAAObjective(real, u).value(naive)
    g_aware = SAAObjective(real, u).value(aware)
    assert aware.sum() < naive.sum()  # costlier verification: shorter drafts
    assert g_aware > g_naive
