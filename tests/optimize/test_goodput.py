"""Goodput (§3): token and latency formulas, SAA with common random numbers, Monte Carlo agreement."""

from __future__ import annotations

import numpy as np
import pytest
from _builders import make_instance

from multispin.errors import ConfigError
from multispin.optimize.draft_lengths import local_search
from multispin.optimize.goodput import (
    SAAObjective,
    acceptance_prob,
    exact_goodput,
    expected_tokens,
    g_max,
    goodput,
    outcomes,
    rejection_prob,
    t_comp_s,
)
from multispin.optimize.montecarlo import simulate_rounds
from multispin.system import World, get_preset


def test_token_formulas_match_the_closed_forms():
    alpha = np.array([0.82, 0.9, 0.95])
    inst = make_instance([1.0, 1.0, 1.0], alpha=alpha)
    for g in (0, 1, 5, 20):
        assert np.allclose(expected_tokens(inst, g), (1 - alpha ** (g + 1)) / (1 - alpha))
        assert np.allclose(rejection_prob(inst, g), 1 - alpha**g)
    assert np.allclose(expected_tokens(inst, 0), 1.0) and np.all(rejection_prob(inst, 0) == 0)
    per_pos = make_instance([1.0], alpha=np.array([[0.9, 0.5] + [0.8] * 18]))
    assert expected_tokens(per_pos, [2])[0] == pytest.approx(1 + 0.9 + 0.45)
    assert rejection_prob(per_pos, [2])[0] == pytest.approx(1 - 0.45)


def test_t_comp_formula():
    inst = make_instance([1.0, 1.0, 1.0], draft_latency_s=[0.01, 0.02, 0.015], t_ver=(0.04, 0.005, 0.001))
    g = np.array([4, 1, 3])
    # max(0.04, 0.02, 0.045) + 0.04 + 3·0.005 + 0.001·(5 + 2 + 4)
    assert t_comp_s(inst, g) == pytest.approx(0.045 + 0.04 + 0.015 + 0.011)
    assert t_comp_s(inst, [0, 0, 0]) == pytest.approx(0.04 + 0.015 + 0.003)
    batch = t_comp_s(inst, np.array([[4, 1, 3], [0, 0, 0]]))
    assert batch.shape == (2,)
    with pytest.raises(ConfigError, match="gamma"):
        t_comp_s(inst, [1, 2])
    with pytest.raises(ConfigError, match="gamma"):
        t_comp_s(inst, [1, 2, 21])


def test_common_random_numbers_make_outcomes_monotone(qwen_world):
    inst = qwen_world.instance(0)
    u = qwen_world.saa_uniforms(0)
    prev = outcomes(inst, 0, u)
    assert not prev.any()
    for g in range(1, 21):
        cur = outcomes(inst, g, u)
        assert np.all(cur >= prev)  # raising γ only adds rejections, sample by sample
        prev = cur
    # and the rejection frequencies are the rejection probabilities
    assert np.allclose(outcomes(inst, 6, u).mean(axis=0), rejection_prob(inst, 6), atol=0.06)


def test_saa_converges_to_the_exact_expectation():
    sc = get_preset("paper-qwen").override({"devices.count": 8})
    w = World(sc)
    inst = w.instance(0)
    gamma = np.array([3, 5, 7, 2, 0, 9, 4, 6])
    exact = exact_goodput(inst, gamma)
    big = goodput(inst, gamma, np.random.default_rng(0).random((200_000, 8)))
    assert big.e_t_comm_s == pytest.approx(exact.e_t_comm_s, rel=0.01)
    assert big.goodput_tokens_per_s == pytest.approx(exact.goodput_tokens_per_s, rel=0.002)
    assert exact.g_max_tokens_per_s == pytest.approx(g_max(inst, gamma))
    assert exact.goodput_tokens_per_s < exact.g_max_tokens_per_s


@pytest.mark.parametrize("delta", [1, -1])
def test_incremental_moves_equal_direct_evaluation(qwen_world, delta):
    inst = qwen_world.instance(1)
    u = qwen_world.saa_uniforms(1)[:300]
    mu = qwen_world.mode_uniforms(1)[:300]
    rng = np.random.default_rng(delta + 5)
    for modes in ("optimal", "all_dl", "random"):
        obj = SAAObjective(inst, u, modes=modes, mode_uniforms=mu if modes == "random" else None)
        g = rng.integers(1, 20, inst.num_devices)
        values, (cand, rows, t_new) = obj.step_values(g, obj.t_comm_samples(g), delta)
        for k in range(inst.num_devices):
            h = g.copy()
            h[k] += delta
            assert values[k] == pytest.approx(obj.value(h), rel=1e-12)
            assert np.allclose(t_new[cand == k], obj.t_comm_samples(h)[rows[cand == k]])


def test_optimized_split_objective_caches_outcomes(qwen_world):
    inst = qwen_world.instance(0)
    u = qwen_world.saa_uniforms(0)[:200]
    obj = SAAObjective(inst, u, split="optimized")
    g = np.full(inst.num_devices, 4)
    first = obj.evaluate(g)
    solves = obj.num_solves
    assert obj.evaluate(g) == first and obj.num_solves == solves  # all cached
    eq = SAAObjective(inst, u).evaluate(g)
    assert first.e_t_comm_s <= eq.e_t_comm_s * (1 + 1e-9)


# ----------------------------------------------------------------------------- Monte Carlo


def _wrong_goodput_without_bonus(inst, gamma, uniforms) -> float:
    """A deliberately wrong formula: forgets the bonus/correction token (E[N] − 1)."""
    res = goodput(inst, gamma, uniforms)
    return (res.expected_tokens - inst.num_devices) / (res.t_comp_s + res.e_t_comm_s)


def _wrong_goodput_off_by_one_rejection(inst, gamma, uniforms) -> float:
    """A subtler wrong formula: rejection probability 1 − α^{γ+1} instead of 1 − α^γ."""
    shifted = np.minimum(np.asarray(gamma) + 1, inst.gamma_max)
    o = outcomes(inst, shifted, uniforms)
    from multispin.optimize.reactive import t_comm_batch

    res = goodput(inst, gamma, uniforms)
    return res.expected_tokens / (res.t_comp_s + t_comm_batch(o, inst).mean())


@pytest.mark.parametrize("pdl_dbm", [10.0, 16.0, 22.0])
def test_analytic_goodput_matches_a_monte_carlo_of_rounds(pdl_dbm):
    """paper-qwen, K = 20, greedy γ on N_SAA = 1000 samples; 30,000 simulated rounds with sampled
    acceptances and outcomes: within 2%. Two deliberately wrong formulas are caught (> 2% off)."""
    w = World(get_preset("paper-qwen").override({"radio.p_dl_dbm": pdl_dbm}))
    inst = w.instance(0)
    u = w.saa_uniforms(0)
    gamma = local_search(SAAObjective(inst, u)).draft_len
    analytic = goodput(inst, gamma, u).goodput_tokens_per_s
    mc = simulate_rounds(inst, gamma, 30_000, np.random.default_rng(17))
    assert mc.goodput_tokens_per_s == pytest.approx(analytic, rel=0.02)
    assert np.allclose(mc.rejection_rate, rejection_prob(inst, gamma), atol=0.015)
    assert np.allclose(mc.mean_tokens, expected_tokens(inst, gamma), rtol=0.02)
    # negative controls: the same check rejects wrong formulas
    assert abs(_wrong_goodput_without_bonus(inst, gamma, u) / mc.goodput_tokens_per_s - 1) > 0.02
    off = _wrong_goodput_off_by_one_rejection(inst, gamma, u)
    assert abs(off / mc.goodput_tokens_per_s - 1) > abs(analytic / mc.goodput_tokens_per_s - 1)


def test_monte_carlo_matches_the_exact_expectation_on_small_k():
    w = World(get_preset("paper-r1").override({"devices.count": 6, "radio.p_dl_dbm": 22.0}))
    inst = w.instance(3)
    gamma = np.array([2, 4, 6, 8, 0, 5])
    exact = exact_goodput(inst, gamma)
    mc = simulate_rounds(inst, gamma, 40_000, np.random.default_rng(1))
    assert mc.goodput_tokens_per_s == pytest.approx(exact.goodput_tokens_per_s, rel=0.01)
    assert mc.mean_t_comm_s == pytest.approx(exact.e_t_comm_s, rel=0.03)
    for modes in ("all_ul", "all_dl"):
        ex = exact_goodput(inst, gamma, modes=modes)
        sim = simulate_rounds(inst, gamma, 20_000, np.random.default_rng(2), modes=modes)
        assert sim.goodput_tokens_per_s == pytest.approx(ex.goodput_tokens_per_s, rel=0.015)


def test_monte_carlo_follows_the_coupled_rule_and_the_budget_caps():
    # devices 0-2 verify coupled (their own α, no correction over the air), device 4 is capped
    # at 2 tokens: the simulator must agree with the exact expectation on both
    w = World(get_preset("paper-r1").override({"devices.count": 6, "radio.p_dl_dbm": 22.0}))
    base = w.instance(3)
    inst = base.replace(
        alpha_coupled=np.clip(base.alpha - 0.15, 0.0, 1.0),
        coupled=np.array([True, True, True, False, False, False]),
        gamma_cap=np.array([8, 8, 8, 8, 2, 8]),
    )
    gamma = np.array([3, 5, 7, 4, 6, 5])
    exact = exact_goodput(inst, gamma)
    mc = simulate_rounds(inst, gamma, 40_000, np.random.default_rng(3))
    assert mc.goodput_tokens_per_s == pytest.approx(exact.goodput_tokens_per_s, rel=0.01)
    assert mc.mean_t_comm_s == pytest.approx(exact.e_t_comm_s, rel=0.03)
    assert np.allclose(mc.mean_tokens, expected_tokens(inst, gamma), rtol=0.02)
    assert np.all(mc.rejection_rate[:3] == 0)
    # negative control: the same rounds simulated as if nobody were coupled or capped miss it
    plain = simulate_rounds(base, gamma, 40_000, np.random.default_rng(3))
    assert abs(plain.goodput_tokens_per_s / exact.goodput_tokens_per_s - 1) > 0.05


def test_bad_objective_arguments(qwen_world):
    inst = qwen_world.instance(0)
    with pytest.raises(ConfigError, match="uniforms"):
        SAAObjective(inst, np.zeros((10, 3)))
    with pytest.raises(ConfigError, match="mode_uniforms"):
        SAAObjective(inst, np.zeros((10, 20)), modes="random")
    with pytest.raises(ConfigError, match="modes"):
        SAAObjective(inst, np.zeros((10, 20)), modes="best")
    assert np.all(acceptance_prob(inst, 0) == 1)
