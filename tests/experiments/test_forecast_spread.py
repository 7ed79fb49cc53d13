"""The forecast with prompts that differ (`forecast_goodput(spread=...)`): no spread is the forecast
it always was, and jobs' α drawn around the device's α gain more tokens at the same plans than
every job at the device's α (E[N] is convex in α), by about what the Beta's mean of E[N] says."""

from __future__ import annotations

import numpy as np
import pytest

from multispin.experiments.forecast import JobAlphas, forecast_goodput, van_der_corput
from multispin.system.payload import WirePayload
from multispin.system.scenario_io import resolve_scenario

K, ALPHA = 4, 0.8


def _scenario():
    return resolve_scenario("paper-qwen").override({"devices.count": K, "devices.acceptance": [ALPHA] * K})


def _payload(gamma_max: int) -> WirePayload:
    return WirePayload(vocab_size=1000, ul_distribution_bits=16_000, dl_distribution_bits=16_000, gamma_max=gamma_max)


def _forecast(spread, **kw) -> dict[str, float]:
    sc = _scenario()
    return forecast_goodput(sc, _payload(sc.optimizer.gamma_max), "all_ul", rounds=200, horizon=1, spread=spread, **kw)


def test_no_spread_is_the_forecast_without_one():
    base = _forecast(None, max_new_tokens=16, online=True)
    assert _forecast([0.0] * K, max_new_tokens=16, online=True) == base


def test_jobs_drawn_around_the_device_alpha_gain_the_convexity_of_expected_tokens():
    # planned on the device's α (no estimator) and prompts that never end: the same γ every round
    # with or without spread, so T_comp is the same and the free-air goodput is the tokens' ratio
    flat = _forecast(None)["forecast_free_comm_tokens_per_s"]
    spread = _forecast([0.08] * K)["forecast_free_comm_tokens_per_s"]
    rng = np.random.default_rng(0)
    sd, gamma = 0.08, np.arange(1, 9)
    c = ALPHA * (1 - ALPHA) / sd**2 - 1
    a = rng.beta(ALPHA * c, (1 - ALPHA) * c, 100_000)[:, None]
    gain = ((1 - a ** (gamma + 1)) / (1 - a)).mean(0) / ((1 - ALPHA ** (gamma + 1)) / (1 - ALPHA))
    # whatever γ the plans chose (1-8), the gain lies within what the Beta's mean of E[N] gives
    assert gain.min() - 0.02 < spread / flat < gain.max() + 0.02
    assert spread / flat > 1.01


def test_spread_needs_one_sd_per_device():
    with pytest.raises(ValueError, match="spread"):
        _forecast([0.05] * (K + 1))


def test_each_device_s_jobs_take_evenly_spread_quantiles():
    assert list(van_der_corput(np.arange(8))) == [0, 0.5, 0.25, 0.75, 0.125, 0.625, 0.375, 0.875]
    jobs = JobAlphas(np.full(2, 0.8), np.full(2, 0.05), np.random.default_rng(0))
    drawn = np.array([jobs.next(np.arange(2)) for _ in range(64)])
    # 64 jobs per device: the mean and the sd of the Beta almost exactly (independent draws: ±0.006)
    assert np.allclose(drawn.mean(0), 0.8, atol=0.002) and np.allclose(drawn.std(0), 0.05, atol=0.003)


def test_a_truth_apart_from_the_planners_prior_moves_the_tokens_not_the_plans():
    # the truth at the prior is the forecast without one; a higher truth, planned on the same prior
    # (no estimator: the same γ every round), gains tokens at the same T_comp
    base = _forecast(None)
    assert _forecast(None, truth_alpha=[ALPHA] * K) == base
    higher = _forecast(None, truth_alpha=[ALPHA + 0.05] * K)
    gain = higher["forecast_free_comm_tokens_per_s"] / base["forecast_free_comm_tokens_per_s"]
    # E[N] = (1 − α^{γ+1}) / (1 − α): at any γ ≥ 1 the ratio lies in (1, (1 − α) / (1 − α')]
    assert 1.0 < gain <= (1 - ALPHA) / (1 - ALPHA - 0.05)
    with pytest.raises(ValueError, match="truth_alpha"):
        _forecast(None, truth_alpha=[ALPHA] * (K + 1))
