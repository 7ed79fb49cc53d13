"""The communication-aware upper bound: above every plan of every method, equal to the
relaxed objective's exact maximum, and a deliberately wrong bound is caught by the same checks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from _builders import random_preset_instances

from multispin.optimize.bound import (
    communication_bound,
    conjugate_offsets,
    max_ascending_weights,
    max_chain_weights,
    maximise_ratio,
    single_device_latency_s,
    subset_bits,
    t_comm_table,
)
from multispin.optimize.draft_lengths import (
    best_uniform,
    computation_only,
    exhaustive_oracle,
    local_search,
    paper_greedy,
)
from multispin.optimize.goodput import SAAObjective, t_comp_s
from multispin.system import World, get_preset

_GMAX_FOR_K = {1: 20, 2: 20, 3: 12, 4: 8, 5: 6, 6: 4}  # every γ vector enumerable


def _varied(inst, i: int):
    """Drop i's variant: T_ver^tok, S^dl ≠ S^ul, mode policy and split vary with i."""
    if i % 5 == 1:
        inst = inst.with_compute(t_ver_tok_s=2e-3)
    if i % 7 == 2:
        inst = inst.replace(dl_payload_bits=inst.payload_bits / 4)
    modes = ("optimal", "optimal", "all_ul", "all_dl", "random")[i % 5]
    split = "optimized" if i % 11 == 3 and inst.num_devices <= 4 else "equal"
    return inst.replace(gamma_max=_GMAX_FOR_K[inst.num_devices]), modes, split


def _check_drops(n: int, wrong: bool) -> list[float]:
    """Per drop: bound / best plan found (exhaustive optimum where the mode policy allows);
    asserts the bound is at or above the objective at its own maximiser."""
    rng = np.random.default_rng(27)
    ratios = []
    for i, inst in enumerate(random_preset_instances(n, seed=2027, max_devices=6, deep_fade_prob=0.15)):
        inst, modes, split = _varied(inst, i)
        k = inst.num_devices
        u = rng.random((100, k))
        obj = SAAObjective(inst, u, modes, split, rng.random((100, k)) if modes == "random" else None)
        plans = [local_search(obj), paper_greedy(obj), best_uniform(obj), computation_only(obj)]
        if modes != "random":
            plans.append(exhaustive_oracle(obj))
        best = max(p.goodput_tokens_per_s for p in plans)
        incumbent = max(plans, key=lambda p: p.goodput_tokens_per_s).draft_len
        # the wrong bound: DL latencies as if each device had only a 1000th of the budget
        latency = single_device_latency_s(inst, p_dl_w=inst.radio.p_dl_w / 1e3) if wrong else None
        cb = communication_bound(obj, incumbent, latency=latency, table=not wrong)
        if not wrong:
            assert cb.value >= obj.value(cb.draft_len) * (1 - 1e-12)
            assert cb.value <= cb.free_communication
        ratios.append(min(cb.values) / best)
    return ratios


@pytest.mark.slow
def test_bound_is_above_every_plan_on_200_drops(capsys):
    """200 drops (K 1–6, both pairs, deep fades, P^dl/P^ul 1–64, with and without reciprocity,
    T_ver^tok, S^dl = S^ul/4, every mode policy, the optimized split): the bound is never below
    the plan of any method, the exhaustive optimum included; the same checks catch a bound built
    on a wrong inequality (the power budget shrunk instead of relaxed)."""
    ratios = np.asarray(_check_drops(200, wrong=False))
    with capsys.disabled():
        print(
            f"\n[bound / best plan on 200 drops: median {np.median(ratios):.4f}, 90th pct "
            f"{np.percentile(ratios, 90):.4f}, max {ratios.max():.4f}]"
        )
    assert np.all(ratios >= 1 - 1e-12)
    wrong = np.asarray(_check_drops(60, wrong=True))
    assert np.any(wrong < 1 - 1e-6)  # negative control: the wrong bound falls below a plan


def test_bound_is_above_the_exhaustive_optimum_quick():
    """A fast subset of the 200-drop test (runs in the default suite), with its negative control."""
    assert np.all(np.asarray(_check_drops(12, wrong=False)) >= 1 - 1e-12)
    assert np.any(np.asarray(_check_drops(12, wrong=True)) < 1 - 1e-6)


def test_maximise_ratio_is_the_exact_maximum():
    """The relaxed ratio's maximum equals brute force over every γ in a box (K = 3, γ_max = 6)."""
    rng = np.random.default_rng(3)
    for trial in range(6):
        inst = random_preset_instances(1, seed=100 + trial, max_devices=3)[0].replace(gamma_max=6)
        if trial % 2:
            inst = inst.with_compute(t_ver_tok_s=3e-3)
        k = inst.num_devices
        a = np.cumsum(rng.random((k, 7)) * 0.02, axis=1)
        a[:, 0] = 0.0
        lo = rng.integers(0, 3, k)
        hi = lo + rng.integers(0, 4, k)
        res = maximise_ratio(inst, a, 0.01, lo=lo, hi=hi)
        best = -np.inf
        for g in itertools.product(*[range(low, h + 1) for low, h in zip(lo, hi)]):
            g = np.array(g)
            den = t_comp_s(inst, g) + a[np.arange(k), g].sum() - 0.01
            best = max(best, inst.expected_tokens[np.arange(k), g].sum() / den)
        assert res.value == pytest.approx(best, rel=1e-9) and res.value >= best
        assert np.all((lo <= res.draft_len) & (res.draft_len <= hi))


@pytest.mark.parametrize("weights", [max_chain_weights, max_ascending_weights])
def test_max_weights_are_below_the_max_on_every_set(weights):
    """w_s(R) ≤ max_{k∈R} v_k for all 2^6 sets R, with equality at R_s (the greedy-vector argument)."""
    rng = np.random.default_rng(1)
    v = rng.random(6)
    rejected = rng.random((40, 6)) < 0.5
    w = weights(v, rejected)
    assert np.all(w >= 0)
    sets = subset_bits(0, 64, 6)
    f = np.where(sets, v[None, :], 0.0).max(axis=1)
    assert np.all(sets.astype(float) @ w.T <= f[:, None] + 1e-12)
    at_own = (w * rejected).sum(axis=1)
    assert np.allclose(at_own, np.where(rejected, v[None, :], 0.0).max(axis=1))


def test_single_device_latency_is_below_t_comm_of_every_set():
    """max_{k∈R} ℓ_k ≤ T*(R) on every set, for every deterministic mode policy and both splits."""
    for inst in random_preset_instances(8, seed=7, max_devices=5):
        for modes, split in (("optimal", "equal"), ("all_ul", "equal"), ("all_dl", "equal"), ("optimal", "optimized")):
            obj = SAAObjective(inst, np.zeros((1, inst.num_devices)), modes, split)
            table = t_comm_table(obj)
            sets = subset_bits(0, table.size, inst.num_devices)
            lower = np.where(sets, single_device_latency_s(inst)[None, :], 0.0).max(axis=1)
            assert np.all(lower <= table * (1 + 1e-9))


def test_conjugate_offsets_make_every_weight_vector_valid():
    inst = random_preset_instances(1, seed=11, max_devices=6)[0]
    table = t_comm_table(SAAObjective(inst, np.zeros((1, inst.num_devices))))
    w = np.random.default_rng(0).random((5, inst.num_devices)) * table.max()
    h = conjugate_offsets(table, w)
    sets = subset_bits(0, table.size, inst.num_devices).astype(float)
    assert np.all(sets @ w.T - h[None, :] <= table[:, None])


def test_bound_on_the_paper_scenario_is_tighter_than_free_communication():
    """K = 20 drop of the paper's scenario (P^dl 22 dBm, noise figure 10 dB): above the plan, and
    much closer to it than the free-communication bound."""
    w = World(
        get_preset("paper-qwen").override(
            {"seed": 5006, "radio.p_dl_dbm": 22.0, "radio.noise_figure_db": 10.0, "optimizer.n_saa": 300}
        )
    )
    obj = SAAObjective(w.instance(0), w.saa_uniforms(0))
    plan = local_search(obj)
    cb = communication_bound(obj, plan.draft_len)
    g = plan.goodput_tokens_per_s
    assert g <= cb.value < cb.free_communication
    assert cb.value >= obj.value(cb.draft_len)
    assert 1 - g / cb.value < 0.5 * (1 - g / cb.free_communication)


def test_table_by_doubling_equals_the_solver_set_by_set():
    """The 2^K table built set by set (optimal modes, equal split, one payload size) equals the
    objective's own solver on every set, deep fades included; instances outside its case (S^dl ≠
    S^ul) still go to the solver."""
    from multispin.optimize.bound import _optimal_table_by_doubling
    from multispin.optimize.reactive import t_comm_batch

    checked = 0
    for inst in random_preset_instances(12, seed=21, max_devices=9, deep_fade_prob=0.3):
        inst = inst.replace(payload_bits=np.full(inst.num_devices, inst.payload_bits[0]), dl_payload_bits=None)
        k = inst.num_devices
        solver = t_comm_batch(subset_bits(0, 1 << k, k), inst)
        assert np.allclose(_optimal_table_by_doubling(inst), solver, rtol=1e-13, atol=0)
        assert np.allclose(t_comm_table(SAAObjective(inst, np.zeros((1, k)))), solver, rtol=1e-13, atol=0)
        checked += 1
    w = World(get_preset("paper-qwen").override({"devices.count": 14, "seed": 3}))
    inst = w.instance(0)
    assert np.allclose(_optimal_table_by_doubling(inst), t_comm_batch(subset_bits(0, 1 << 14, 14), inst), rtol=1e-13)
    assert checked == 12
    # control: the device order matters (bits given in index order, not by x = P^ul·h^ul, differ)
    shuffled = inst.replace(gain_ul=inst.gain_ul[::-1].copy())
    assert not np.allclose(_optimal_table_by_doubling(shuffled), t_comm_batch(subset_bits(0, 1 << 14, 14), inst))


def test_conjugate_offsets_are_the_maximum_over_every_set():
    """The blocked computation equals the plain maximum of w(R) − T*(R) over all sets (up to the
    widening for rounding) on a K = 14 table: the least valid offset, not a looser one."""
    w = World(get_preset("paper-qwen").override({"devices.count": 14, "seed": 4}))
    inst = w.instance(0)
    table = t_comm_table(SAAObjective(inst, np.zeros((1, 14))))
    weights = np.random.default_rng(1).random((20, 14)) * table.max() / 3
    h = conjugate_offsets(table, weights)
    direct = np.maximum(0.0, (subset_bits(0, table.size, 14).astype(float) @ weights.T - table[:, None]).max(axis=0))
    widen = 4 * 14 * np.finfo(float).eps * (weights.sum(axis=1) + table.max())
    assert np.all(h >= direct) and np.all(h <= direct + 2 * widen)
