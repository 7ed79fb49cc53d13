"""The coupled verification rule in the model and the three-way planner (optimize.verification)."""

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from pinned_three_way import PINNED, pinned_drop
from reference_plans import FAST_CASES, fast_drop, grid_drop, load

from multispin.errors import ConfigError
from multispin.optimize.draft_lengths import exhaustive_oracle
from multispin.optimize.goodput import SAAObjective, exact_goodput, t_comp_s
from multispin.optimize.incremental import IncrementalSAA
from multispin.optimize.plan import plan
from multispin.optimize.verification import CoupledSAA
from multispin.system import World, get_preset

RATIO = 0.97  # coupled/standard acceptance of the test instances


def _with_coupled_alpha(inst, ratio=RATIO):
    return inst.replace(alpha_coupled=inst.alpha * ratio)


def test_instance_coupled_device_never_rejected_and_gains_at_alpha_c():
    w = World(get_preset("paper-qwen").override({"devices.count": 4, "payload.count_signalling_bits": True}))
    inst = _with_coupled_alpha(w.instance(0))
    mask = np.array([True, False, True, False])
    c = inst.with_coupled(mask)
    a, ac = inst.alpha, inst.alpha_coupled
    g = 5
    np.testing.assert_allclose(c.expected_tokens[mask, g], ((1 - ac ** (g + 1)) / (1 - ac))[mask])
    np.testing.assert_allclose(c.expected_tokens[~mask, g], ((1 - a ** (g + 1)) / (1 - a))[~mask])
    assert np.all(c.survival[mask] == 1.0) and np.all(c.survival[~mask] == inst.survival[~mask])
    np.testing.assert_allclose(c.accepted_survival[mask, g], (ac**g)[mask])
    # drafting uploads without q scalars: cheaper per token, standard devices unchanged
    assert np.all(c.token_latency_s[mask] < inst.token_latency_s[mask])
    assert np.all(c.token_latency_s[~mask] == inst.token_latency_s[~mask])


def test_coupled_mask_needs_a_coupled_acceptance():
    inst = World(get_preset("paper-qwen").override({"devices.count": 3})).instance(0)
    with pytest.raises(ConfigError, match="coupled"):
        inst.with_coupled(np.array([True, False, False]))
    with pytest.raises(ConfigError, match="coupled"):
        plan(inst, rng=np.random.default_rng(0), n_saa=50, verify="coupled")
    with pytest.raises(ConfigError, match="verify"):
        plan(inst, rng=np.random.default_rng(0), n_saa=50, verify="neither")
    # no coupled acceptance: "choose" has no coupled option and plans the standard plan
    p = plan(inst, rng=np.random.default_rng(0), n_saa=50, verify="choose")
    q = plan(inst, rng=np.random.default_rng(0), n_saa=50)
    assert not p.coupled.any() and np.array_equal(p.draft_len, q.draft_len)


@pytest.mark.parametrize("case", [FAST_CASES[0], FAST_CASES[3], FAST_CASES[110]])
def test_standard_plans_unchanged_bit_for_bit_with_a_coupled_acceptance_present(case):
    """The paper's two-way plan (the default verify="standard") is the stored shipped plan, with
    or without a coupled acceptance on the instance."""
    stored = load("shipped_fast_grid")[",".join(map(str, case))]
    obj = fast_drop(*case, deep_fade=case[0] % 4 == 3)
    plain = plan(obj.inst, uniforms=obj.uniforms)
    with_c = plan(_with_coupled_alpha(obj.inst), uniforms=obj.uniforms)
    assert np.array_equal(plain.draft_len, stored) and np.array_equal(with_c.draft_len, stored)
    assert with_c.goodput == plain.goodput and not with_c.coupled.any()


def test_coupled_saa_equals_the_objective_on_the_masked_instance():
    inst, u, _ = grid_drop(1, n_saa=300, k=12)
    inst = _with_coupled_alpha(inst.with_radio(p_ul_w=1e-3))
    cs = CoupledSAA(SAAObjective(inst, u))
    rng = np.random.default_rng(0)
    for _ in range(5):
        c = rng.random(12) < 0.5
        g = rng.integers(0, 21, 12)
        want = SAAObjective(inst.with_coupled(c), u).evaluate(g)
        assert cs.evaluate(c, g).goodput_tokens_per_s == pytest.approx(want.goodput_tokens_per_s, rel=1e-12)
        # every move's value is the objective's at the move it names (solver's flips: exact)
        table = cs.move_table(c, g, IncrementalSAA(cs.obj, np.where(c, 0, g)))
        for rule, k, gk in zip(rng.integers(0, 2, 8), rng.integers(0, 12, 8), rng.integers(0, 21, 8)):
            c2, g2 = c.copy(), g.copy()
            c2[k], g2[k] = bool(rule), gk
            got = SAAObjective(inst.with_coupled(c2), u).evaluate(g2).goodput_tokens_per_s
            assert table[rule, k, gk] == pytest.approx(got, rel=1e-12)


def _small_drop(i: int):
    """K ∈ 2..5, γ_max cut so that every (mask, γ) is enumerable, UL power spread over 10..−10 dBm."""
    k = 2 + i % 4
    gmax = {2: 8, 3: 6, 4: 5, 5: 4}[k]
    pul = (10.0, 0.0, -10.0, 5.0)[i % 4]
    w = World(
        get_preset(("paper-qwen", "paper-r1")[i % 2]).override(
            {"devices.count": k, "seed": 900 + i, "radio.p_ul_dbm": pul, "radio.p_dl_dbm": pul + 6.0}
        )
    )
    inst = w.instance(0).replace(gamma_max=gmax)
    ratio = np.random.default_rng(i).uniform(0.9, 1.0, k)
    return inst.replace(alpha_coupled=inst.alpha * ratio), w.saa_uniforms(0, 300)


def _brute_force(inst, u):
    best, arg = -np.inf, None
    for bits in itertools.product((False, True), repeat=inst.num_devices):
        c = np.array(bits)
        dp = exhaustive_oracle(SAAObjective(inst.with_coupled(c), u))
        if dp.goodput_tokens_per_s > best:
            best, arg = dp.goodput_tokens_per_s, (c, dp.draft_len)
    return best, arg


@pytest.mark.slow
def test_three_way_choice_equals_brute_force_and_never_loses_to_a_single_rule():
    gaps = []
    for i in range(20):
        inst, u = _small_drop(i)
        best, _ = _brute_force(inst, u)
        chosen = plan(inst, uniforms=u, verify="choose", policy="oracle")
        g = chosen.goodput_tokens_per_s
        gaps.append(1 - g / best)
        # its goodput is what the masked instance gives (no hidden bookkeeping)
        again = SAAObjective(inst.with_coupled(chosen.coupled), u).evaluate(chosen.draft_len)
        assert again.goodput_tokens_per_s == pytest.approx(g, rel=1e-12)
        for modes in ("all_ul", "all_dl"):
            base = plan(inst, uniforms=u, modes=modes, policy="oracle")
            assert g >= base.goodput_tokens_per_s * (1 - 1e-12), (i, modes)
        allc = plan(inst, uniforms=u, verify="coupled", policy="oracle")
        assert g >= allc.goodput_tokens_per_s * (1 - 1e-12), i
        assert g <= best * (1 + 1e-12)
    assert max(gaps) <= 1e-9, gaps


def test_brute_force_comparison_detects_a_search_without_toggles():
    """Negative control: the better of all-standard and all-coupled alone (no per-device choice)
    falls short of the brute force on some drop, so the equality above tests the toggles."""
    short = []
    for i in range(8):
        inst, u = _small_drop(i)
        best, (c, _) = _brute_force(inst, u)
        single = max(
            plan(inst, uniforms=u, verify=v, policy="oracle").goodput_tokens_per_s for v in ("standard", "coupled")
        )
        short.append(1 - single / best)
    assert max(short) > 1e-3, short


def test_choice_matches_exact_enumeration_of_outcomes_on_the_chosen_plan():
    inst, u = _small_drop(2)
    p = plan(inst, uniforms=u, verify="choose", policy="oracle")
    ex = exact_goodput(inst.with_coupled(p.coupled), p.draft_len)
    # SAA and the exact expectation agree within sampling error (300 samples)
    assert p.goodput_tokens_per_s == pytest.approx(ex.goodput_tokens_per_s, rel=0.05)


@pytest.mark.parametrize("objective", ["sum", "proportional-fair", "max-min", "energy"])
def test_three_way_choice_under_every_objective_never_loses_and_meets_brute_force(objective):
    """K = 3, γ_max = 3: every (mask, γ) enumerable; the choice is never below all-standard or
    all-coupled (each searched exactly) and equals the brute force over masks here."""
    from multispin.optimize.objectives import ObjectiveSearch, plan_objective

    mixed_wins = 0
    for i in range(3):
        w = World(get_preset("paper-qwen").override({"devices.count": 3, "seed": 40 + i, "radio.p_ul_dbm": -5.0}))
        inst = _with_coupled_alpha(w.instance(0).replace(gamma_max=3), 0.95)
        u = w.saa_uniforms(0, 100)
        _, best, _ = plan_objective(inst, objective, uniforms=u, verify="choose")
        singles = [plan_objective(inst, objective, uniforms=u, verify=v)[1].value for v in ("standard", "coupled")]
        brute = max(
            ObjectiveSearch(inst.with_coupled(np.array(bits)), u, objective).search((), True)[0].value
            for bits in itertools.product((False, True), repeat=3)
        )
        assert best.value >= max(singles) - 1e-12 * abs(max(singles))
        assert best.value == pytest.approx(brute, rel=1e-9, abs=1e-9)
        mixed_wins += best.value > max(singles) * (1 + 1e-9)
    assert mixed_wins >= 1  # the drops need a per-device choice: the starts alone would fail


def test_per_round_three_way_never_below_its_single_rule_plans():
    """policy fast (the per-round search, subsample climb): never below the fast standard plan
    or all-coupled on the round's samples, K = 20."""
    for seed in (0, 3):
        w = World(get_preset("paper-qwen").override({"seed": seed}))
        inst = _with_coupled_alpha(w.instance(0))
        u = w.saa_uniforms(0)
        three = plan(inst, uniforms=u, policy="fast", verify="choose")
        std = plan(inst, uniforms=u, policy="fast")
        allc = plan(inst, uniforms=u, verify="coupled")
        assert three.goodput_tokens_per_s >= max(std.goodput_tokens_per_s, allc.goodput_tokens_per_s) * (1 - 1e-12)
        again = SAAObjective(inst.with_coupled(three.coupled), u).evaluate(three.draft_len)
        assert again.goodput_tokens_per_s == pytest.approx(three.goodput_tokens_per_s, rel=1e-12)


def test_three_way_certificate_bounds_every_mask_and_gamma():
    """The communication-aware bound with the coupled option is above the brute-force optimum over
    (mask, γ), at or below the free-communication bound over masks, and that one is the exact
    max over masks of G_max (brute force at K ≤ 4). Negative control: the all-standard bound alone
    is below the three-way optimum on some drop (it does not cover coupled devices)."""
    from multispin.optimize.bound import communication_bound
    from multispin.optimize.plan import three_way_certificate

    below = 0
    for i in range(6):
        inst, u = _small_drop(i)
        if inst.num_devices > 4:
            continue
        best, (c, g) = _brute_force(inst, u)
        p = plan(inst, uniforms=u, verify="choose", policy="oracle")
        cert = three_way_certificate(inst, u, "equal", p, {"adaptive": 1.0})
        assert cert.communication_bound_tokens_per_s >= best * (1 - 1e-12)
        assert cert.communication_bound_tokens_per_s <= cert.upper_bound_tokens_per_s * (1 + 1e-9)
        grid = np.array(list(itertools.product(range(inst.gamma_max + 1), repeat=inst.num_devices)))
        free = 0.0
        for bits in itertools.product((False, True), repeat=inst.num_devices):
            m = inst.with_coupled(np.array(bits))
            n = m.expected_tokens[np.arange(m.num_devices)[None, :], grid].sum(axis=1)
            free = max(free, float(np.max(n / t_comp_s(m, grid))))
        assert cert.upper_bound_tokens_per_s == pytest.approx(free, rel=1e-9)
        std_only = communication_bound(SAAObjective(inst, u), p.draft_len).value
        below += std_only < best * (1 - 1e-9)
    assert below >= 1


def test_three_way_plans_equal_the_pinned_ones():
    """The three-way plans (mask, γ, goodput) on the pinned instances equal those the search gave
    before its speed-up (recorded in data/three_way_pinned_plans.json): a refactor of the search
    must not change a plan. Negative control: on some of them the better single-rule plan alone
    (no moves) differs from the pinned plan, so the comparison sees the climb's result."""
    stored = json.loads((Path(__file__).with_name("data") / "three_way_pinned_plans.json").read_text())["plans"]
    assert set(stored) == set(PINNED)
    climbed = 0
    for name, want in stored.items():
        inst, u, policy = pinned_drop(name)
        p = plan(inst, uniforms=u, policy=policy, verify="choose")
        assert p.coupled.astype(int).tolist() == want["coupled"], name
        assert p.draft_len.tolist() == want["draft_len"], name
        assert p.goodput_tokens_per_s == pytest.approx(want["goodput"], rel=1e-12), name
        single = [plan(inst, uniforms=u, policy=policy, verify=v) for v in ("standard", "coupled")]
        climbed += all(
            s.coupled.tolist() != p.coupled.tolist() or s.draft_len.tolist() != p.draft_len.tolist() for s in single
        )
    assert climbed >= 3, climbed
