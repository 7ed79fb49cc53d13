"""The claims checker of `multispin reproduce` on fabricated tables (no optimiser runs)."""

from __future__ import annotations

import pytest

from multispin.experiments.reproduce import claims
from multispin.experiments.reproduce.claims import FAIL, NA, PASS


def _users(gain_ul: float, gain_dl: float = 5.0, gain_rand: float = 5.0):
    rows = []
    for ratio in (4, 16):
        for k in (2, 10, 20, 30):
            g_ul = gain_ul + (3.0 if ratio == 16 else 0.0) + 0.1 * k
            g_dl = gain_dl + (0.5 * k if ratio == 4 else 0.1 * k)
            rows.append({"preset": "paper-qwen", "pdl_ratio": ratio, "devices": k, "n_drops": 100,
                         "goodput": 300.0, "goodput_all_ul": 300.0 / (1 + g_ul / 100),
                         "gom_vs_all_ul_pct": g_ul, "gom_vs_all_ul_pct_lo": g_ul - 1, "gom_vs_all_ul_pct_hi": g_ul + 1,
                         "gom_vs_all_dl_pct": g_dl, "gom_vs_random_pct": gain_rand})
    return rows


def _by_id(results):
    return {c.id: c for c in results}


def test_adaptive_losing_to_all_ul_fails():
    res = _by_id(claims.check_beats_baselines(_users(gain_ul=-8.0)))
    assert res["1a"].status == FAIL
    assert "-" in res["1a"].measured and "gain ≤ 0 on" in res["1a"].measured
    assert res["1b"].status == PASS and res["1c"].status == PASS


def test_adaptive_winning_over_all_ul_passes():
    res = _by_id(claims.check_beats_baselines(_users(gain_ul=4.0)))
    assert res["1a"].status == PASS
    assert "smallest gain" in res["1a"].measured


def test_a_single_losing_row_fails_the_claim():
    rows = _users(gain_ul=4.0)
    rows[5]["gom_vs_all_ul_pct"] = -0.5
    assert _by_id(claims.check_beats_baselines(rows))["1a"].status == FAIL


def test_all_dl_degrades_and_all_ul_capped():
    rows = _users(gain_ul=4.0)
    assert claims.check_all_dl_degrades(rows).status == PASS
    assert claims.check_all_ul_capped(rows).status == PASS
    flat = [{**r, "gom_vs_all_dl_pct": 5.0 - 0.1 * r["devices"]} for r in rows]
    assert claims.check_all_dl_degrades(flat).status == FAIL
    same = [{**r, "gom_vs_all_ul_pct": 4.0} for r in rows]
    assert claims.check_all_ul_capped(same).status == FAIL


def _pdl(gammas, dl, preset="paper-qwen"):
    ratios = (1, 2, 4, 8, 16, 32, 64)
    return [{"preset": preset, "pdl_ratio": r, "gamma_mean": g, "dl_fraction": d, "dl_fraction_hi": min(1.0, d + 0.05),
             "gom_vs_best_uniform_pct": 10.0, "gom_vs_computation_only_pct": 7.0}
            for r, g, d in zip(ratios, gammas, dl)]


def test_draft_length_trend_and_dl_share():
    ok = _pdl([1.0, 2.0, 2.5, 4.0, 6.0, 7.0, 8.0], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
    assert claims.check_draft_length_trend(ok)[0].status == PASS
    assert claims.check_dl_share(ok)[0].status == PASS
    flat = _pdl([10.0] * 7, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 1.0])
    assert claims.check_draft_length_trend(flat)[0].status == FAIL
    assert claims.check_dl_share(flat)[0].status == FAIL  # everybody in DL at the top: "not all" fails


def test_scheme_gains_inside_and_outside_the_band():
    rows = _pdl([1.0] * 7, [0.1] * 7)
    assert claims.check_beats_uniform(rows)[0].status == PASS
    assert claims.check_beats_computation_only(rows)[0].status == PASS
    big = [{**r, "gom_vs_best_uniform_pct": 40.0} for r in rows]
    assert claims.check_beats_uniform(big)[0].status == FAIL
    neg = [{**r, "gom_vs_computation_only_pct": -1.0 if r["pdl_ratio"] == 4 else 8.0} for r in rows]
    assert claims.check_beats_computation_only(neg)[0].status == FAIL


def test_defaults_claim_and_missing_tables():
    good = {"devices": 20, "bandwidth_mhz": 10.0, "p_ul_dbm": 10.0, "pdl_ratios": "1 2 4 8 16", "acceptance_min": 0.84,
            "acceptance_max": 0.93, "tasks": 4, "n_saa": 1000}
    assert claims.check_defaults(good).status == PASS
    bad = claims.check_defaults({**good, "n_saa": 200})
    assert bad.status == FAIL and "N_SAA" in bad.measured
    res = claims.check_all({})
    assert {c.status for c in res} == {NA}


@pytest.mark.parametrize("x,y,sign", [([1, 2, 3, 4], [1, 3, 2, 5], 1), ([1, 2, 3], [3, 2, 1], -1)])
def test_spearman_sign(x, y, sign):
    assert sign * claims.spearman(x, y) > 0
