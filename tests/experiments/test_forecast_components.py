"""The forecast's parts beside its goodput (tokens, T_comp and T_comm per model round, how its
planner drafted, how far its estimates sat from the prior) and `estimate_figures`: the parts
recombine to the goodput, and the estimate figures see what the estimator did (0 offline, below
0 when the jobs accept less than the prior says)."""

from __future__ import annotations

import numpy as np
import pytest

from multispin.experiments.forecast import estimate_figures, forecast_goodput
from multispin.system.payload import WirePayload
from multispin.system.scenario_io import resolve_scenario

K = 4
WIRE = WirePayload(vocab_size=1000, ul_distribution_bits=16_000, dl_distribution_bits=16_000, gamma_max=8)


def _forecast(**kw) -> dict[str, float]:
    sc = resolve_scenario("paper-qwen").override({"devices.count": K, "devices.acceptance": [0.8] * K})
    return forecast_goodput(sc, WIRE, "adaptive", rounds=40, horizon=20, max_new_tokens=32, seed=3, **kw)


def test_the_parts_recombine_to_the_goodput():
    out = _forecast(online=True)
    per_round = out["forecast_t_comp_s"] + out["forecast_t_comm_s"]
    assert out["forecast_tokens_per_round"] / per_round == pytest.approx(out["forecast_tokens_per_s"], rel=1e-12)
    assert out["forecast_tokens_per_round"] / out["forecast_t_comp_s"] == pytest.approx(
        out["forecast_free_comm_tokens_per_s"], rel=1e-12
    )
    assert 0 < out["forecast_drafting_share"] <= 1 and 0 < out["forecast_mean_gamma"] <= 8


def test_the_estimate_figures_follow_the_estimator():
    offline = _forecast(online=False)  # plans on the prior itself: no gap, no spread
    assert offline["forecast_estimate_minus_prior_mean"] == 0 == offline["forecast_estimate_minus_prior_sd"]
    online = _forecast(online=True)
    assert online["forecast_estimate_minus_prior_sd"] > 0
    # jobs that accept far less than the prior: the estimates fall below it (the control: at the
    # prior they stay within a few points of it)
    low = _forecast(online=True, truth_alpha=[0.5] * K)
    assert low["forecast_estimate_minus_prior_mean"] < -0.1 < online["forecast_estimate_minus_prior_mean"]


def test_estimate_figures_are_the_mean_and_sd_of_the_gap():
    est = np.array([[0.7, 0.9], [0.8, 0.8]])
    fig = estimate_figures(est, np.array([0.8, 0.8]))
    assert fig["estimate_minus_prior_mean"] == pytest.approx(0.0, abs=1e-15)
    assert fig["estimate_minus_prior_sd"] == pytest.approx(np.sqrt(0.005))
