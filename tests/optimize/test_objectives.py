"""Objectives beyond the sum (optimize/objectives.py) against brute force at small K, their
properties, and negative controls (a flipped sign, a wrong energy constant)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from multispin import api as ms
from multispin.optimize import objectives as obj
from multispin.optimize.goodput import t_comp_s
from multispin.optimize.modes import dl_latency_s, ul_latency_s
from multispin.optimize.plan import plan
from multispin.optimize.reactive import fixed_modes_latency_s
from multispin.system.energy import device_round_energy
from multispin.system.scenario import EnergyConfig

DROPS = 20
N_SAA = 48
# a radio where the sum optimum stops far devices drafting (P^ul 0 dBm, P^dl 10 dBm), so that the
# objectives differ; at the paper's radio every objective drafts γ_max everywhere and tests nothing
RADIO = dict(p_ul_dbm=0.0, p_dl_dbm=10.0)


def _drop(seed: int, k: int, gamma_max: int):
    sc = ms.scenario("paper-qwen", devices=k, seed=seed, **RADIO, fields={"optimizer.gamma_max": gamma_max})
    return sc, ms.instance(sc, 0), np.random.default_rng([seed, 99]).random((N_SAA, k))


def _cases():
    # K ≤ 5 with the γ grid small enough to enumerate in the oracle
    return [(seed, 3 + seed % 3, {3: 3, 4: 2, 5: 1}[3 + seed % 3]) for seed in range(DROPS)]


def _modes(rejected: np.ndarray):
    idx = np.flatnonzero(rejected)
    for bits in itertools.product((False, True), repeat=idx.size):
        ul = np.zeros(rejected.size, dtype=bool)
        ul[idx] = bits
        yield ul


def _brute(inst, u, objective: str):
    """Best objective over every γ of the grid and, per sample, every UL/DL split (the objectives
    increase as the round gets shorter, so each sample takes its shortest split)."""
    best = (-np.inf, None)
    k = inst.num_devices
    for gamma in itertools.product(range(inst.gamma_max + 1), repeat=k):
        g = np.array(gamma)
        n = np.array([inst.survival[j, : g[j] + 1].sum() for j in range(k)])
        rej = u > inst.survival[np.arange(k), g][None, :]
        comm = [
            min(fixed_modes_latency_s(r[None, :], ul[None, :], inst)[0] for ul in _modes(r)) if r.any() else 0.0
            for r in rej
        ]
        dev = n / (float(t_comp_s(inst, g)) + float(np.mean(comm)))
        v = {"sum": dev.sum(), "proportional-fair": np.log(dev).sum(), "max-min": dev.min()}[objective]
        if v > best[0]:
            best = (float(v), g)
    return best


@pytest.mark.parametrize("objective", ["sum", "proportional-fair", "max-min"])
def test_the_search_equals_brute_force_over_gamma_and_modes(objective):
    for seed, k, gmax in _cases():
        sc, inst, u = _drop(seed, k, gmax)
        got, exact = obj.ObjectiveSearch(inst, u, objective).search()
        want, _ = _brute(inst, u, objective)
        assert exact and got.value == pytest.approx(want, rel=1e-9, abs=1e-12), (seed, k)


def _energy_brute(inst, u, e: EnergyConfig, w: float) -> float:
    """The energy objective's optimum: every γ, every sample's every split, each device's joules
    from `system.energy`, and the ratio's optimum by bisection on λ (Σ E[N] = mean_s min_m (w·J + λ·T))."""
    k = inst.num_devices
    best = -np.inf
    t_up_tok = inst.token_latency_s - inst.draft_latency_s
    for gamma in itertools.product(range(inst.gamma_max + 1), repeat=k):
        g = np.array(gamma)
        n = sum(inst.survival[j, : g[j] + 1].sum() for j in range(k))
        tc = float(t_comp_s(inst, g))
        rej = u > inst.survival[np.arange(k), g][None, :]
        per_sample = []  # (joules, T) of every split of each sample
        for r in rej:
            options = []
            for ul in _modes(r):
                m = int(r.sum())
                bw = inst.radio.bandwidth_hz / max(m, 1)
                tcomm = fixed_modes_latency_s(r[None, :], ul[None, :], inst)[0] if m else 0.0
                dl = r & ~ul
                tau_dl = dl_latency_s(dl[None, :], inst, np.array([bw]))[0] if dl.any() else 0.0
                tau_ul = ul_latency_s(inst, bw)
                t = tc + tcomm
                joules = sum(
                    device_round_energy(
                        e,
                        round_s=t,
                        draft_compute_s=g[j] * inst.draft_latency_s[j],
                        draft_upload_s=g[j] * t_up_tok[j],
                        p_ul_w=inst.p_ul_w[j],
                        mode=("ul" if ul[j] else "dl") if r[j] else None,
                        airtime_s=(tau_ul[j] if ul[j] else tau_dl) if r[j] else 0.0,
                        correction_power_w=inst.p_ul_w[j],
                    ).total_j
                    for j in range(k)
                )
                options.append((joules, t))
            per_sample.append(options)
        # (samples, splits, 2): a sample with fewer splits repeats its first, which leaves its min as is
        widest = max(len(o) for o in per_sample)
        opts = np.array([o + [o[0]] * (widest - len(o)) for o in per_sample])
        lo, hi = -1e4, 1e4
        for _ in range(200):
            lam = (lo + hi) / 2
            h = n - np.mean(np.min(w * opts[:, :, 0] + lam * opts[:, :, 1], axis=1))
            lo, hi = (lam, hi) if h > 0 else (lo, lam)
        best = max(best, lo)
    return best


def test_the_energy_objective_equals_brute_force_with_device_joules():
    e = EnergyConfig()
    for seed, k, gmax in _cases()[:8]:  # the oracle prices every split of every sample: fewer drops
        sc, inst, u = _drop(seed, k, min(gmax, 2))
        model = obj.EnergyModel(e.pa_efficiency, e.rx_power_w, e.draft_power_w, e.idle_power_w, 5.0)
        got, exact = obj.ObjectiveSearch(inst, u, "energy", model).search()
        assert exact and got.value == pytest.approx(_energy_brute(inst, u, e, 5.0), rel=1e-7), (seed, k)


def test_the_energy_objective_without_weight_is_the_sum():
    sc, inst, u = _drop(3, 4, 2)
    free = obj.EnergyModel(weight_tokens_per_j=0.0)
    assert obj.ObjectiveSearch(inst, u, "energy", free).search()[0].value == pytest.approx(
        obj.ObjectiveSearch(inst, u, "sum").search()[0].value, rel=1e-12
    )


def test_the_sum_objective_is_the_shipped_plans_objective():
    for seed in range(5):
        sc, inst, u = _drop(seed, 4, 2)
        shipped = plan(inst, uniforms=u, policy="oracle")
        best, _ = obj.ObjectiveSearch(inst, u, "sum").search()
        assert best.value == pytest.approx(shipped.goodput_tokens_per_s, rel=1e-9)


def test_max_min_worst_device_is_at_least_the_sum_optimums_worst_device():
    for seed, k, gmax in _cases():
        sc, inst, u = _drop(seed, k, gmax)
        s_sum = obj.ObjectiveSearch(inst, u, "sum").search()[0]
        s_mm = obj.ObjectiveSearch(inst, u, "max-min").search()[0]
        assert s_mm.device_goodput.min() >= s_sum.device_goodput.min() - 1e-12


def test_proportional_fair_drafts_a_device_the_sum_stops_only_when_its_log_gain_exceeds_the_others_loss():
    """Where the sum optimum gives device k γ = 0 and PF drafts it, k's log-utility gain over γ_k = 0
    in PF's plan exceeds what the others lose; where PF leaves a device at 0, drafting it loses."""
    seen = 0
    for seed, k, gmax in _cases():
        sc, inst, u = _drop(seed, k, gmax)
        search = obj.ObjectiveSearch(inst, u, "proportional-fair")
        pf = search.search()[0]
        s_sum = obj.ObjectiveSearch(inst, u, "sum").search()[0]
        for j in range(k):
            off = pf.draft_len.copy()
            off[j] = 0
            other = search.evaluate(off)
            if s_sum.draft_len[j] == 0 and pf.draft_len[j] > 0:
                seen += 1
                gain = np.log(pf.device_goodput[j]) - np.log(other.device_goodput[j])
                loss = sum(np.log(other.device_goodput[i]) - np.log(pf.device_goodput[i]) for i in range(k) if i != j)
                assert gain > loss
            if pf.draft_len[j] == 0:
                for v in range(1, gmax + 1):
                    up = pf.draft_len.copy()
                    up[j] = v
                    assert search.evaluate(up).value <= pf.value + 1e-12
    assert seen > 0, "no drop where PF drafts a device the sum stops: the property was not exercised"


def test_local_search_is_never_below_its_start_and_reports_the_gap():
    gaps = []
    for seed, k, gmax in _cases():
        sc, inst, u = _drop(seed, k, gmax)
        for name in ("proportional-fair", "max-min"):
            search = obj.ObjectiveSearch(inst, u, name)
            start = obj.ObjectiveSearch(inst, u, "sum").search()[0].draft_len
            local = search.search(starts=[start], exact=False)[0]
            assert local.value >= search.evaluate(start).value - 1e-12
            gaps.append(local.value >= search.search()[0].value - 1e-9)
    assert np.mean(gaps) > 0  # the share of drops where local search finds the optimum (reported)


def test_a_flipped_objective_sign_is_caught(monkeypatch):
    """Negative control: a search that minimises PF is caught by the brute-force check."""
    caught = 0
    real = obj.score
    for seed, k, gmax in _cases()[:6]:
        sc, inst, u = _drop(seed, k, gmax)
        want, _ = _brute(inst, u, "proportional-fair")
        monkeypatch.setattr(obj, "score", lambda o, g: -real(o, g))
        flipped = obj.ObjectiveSearch(inst, u, "proportional-fair").search()[0]
        monkeypatch.setattr(obj, "score", real)
        caught += real("proportional-fair", flipped.device_goodput) != pytest.approx(want, rel=1e-9)
    assert caught == 6


def test_a_wrong_energy_constant_is_caught():
    e = EnergyConfig()
    sc, inst, u = _drop(1, 3, 2)
    want = _energy_brute(inst, u, e, 5.0)
    for wrong in (
        obj.EnergyModel(e.pa_efficiency, e.rx_power_w, 2 * e.draft_power_w, e.idle_power_w, 5.0),
        obj.EnergyModel(e.pa_efficiency, e.rx_power_w, e.draft_power_w, 2 * e.idle_power_w, 5.0),
    ):
        got = obj.ObjectiveSearch(inst, u, "energy", wrong).search()[0]
        assert got.value != pytest.approx(want, rel=1e-7)


def test_unknown_objective_is_a_config_error():
    from multispin.errors import ConfigError

    sc, inst, u = _drop(0, 3, 1)
    with pytest.raises(ConfigError, match="objective"):
        obj.ObjectiveSearch(inst, u, "fairest")


@pytest.mark.parametrize("modes", ["optimal", "all_ul", "all_dl", "random"])
def test_the_search_remembers_t_comm_per_rejected_set_with_the_batch_values(modes):
    """`ObjectiveSearch.t_comm` solves each rejected set once and returns what `t_comm_batch`
    gives row for row, over many γ; the random rule draws per sample, so it is never remembered."""
    from multispin.optimize.goodput import outcomes
    from multispin.optimize.reactive import t_comm_batch

    sc, inst, u = _drop(3, 8, 6)
    mu = np.random.default_rng(5).random(u.shape)
    search = obj.ObjectiveSearch(inst, u, "max-min", modes=modes, mode_uniforms=mu)
    rng = np.random.default_rng(0)
    for _ in range(30):
        rej = outcomes(inst, rng.integers(0, 7, size=8), u)
        np.testing.assert_array_equal(search.t_comm(rej), t_comm_batch(rej, inst, modes, "equal", mu))
    remembered = len(search._t_comm_of_set)
    assert remembered == 0 if modes == "random" else 0 < remembered < 30 * len(u)
