"""Paired batch-means intervals: known differences are covered, identical runs are "not
significant", and the intervals keep their coverage on dependent rounds (where an interval that
ignores the dependence, one round per batch, does not: the negative control)."""

from __future__ import annotations

import numpy as np
import pytest

from multispin.errors import ConfigError
from multispin.experiments.paired import RoundLog, goodput_interval, paired_difference


def _ar1(rng, shape, rho, scale):
    """Autocorrelated noise along the last axis (AR(1), stationary)."""
    e = rng.normal(0, scale, shape)
    x = np.empty(shape)
    x[..., 0] = e[..., 0] / np.sqrt(1 - rho**2)
    for t in range(1, shape[-1]):
        x[..., t] = rho * x[..., t - 1] + e[..., t]
    return x


def _pair(rng, rounds=60, seeds=1, gain=0.10, rho=0.0):
    """Policy b on a shared, fluctuating channel; a gets (1 + gain)× b's tokens in every round plus
    its own zero-mean noise, on the same latencies: G_a / G_b − 1 → gain."""
    latency = 0.1 + 0.02 * np.abs(_ar1(rng, (seeds, rounds), rho, 1.0))
    tokens_b = 8.0 + _ar1(rng, (seeds, rounds), rho, 1.5)
    tokens_a = (1 + gain) * tokens_b + _ar1(rng, (seeds, rounds), rho, 1.0)
    return RoundLog.of(tokens_a, latency), RoundLog.of(tokens_b, latency)


def test_a_known_difference_is_inside_the_interval():
    a, b = _pair(np.random.default_rng(0), rounds=200, gain=0.10)
    d = paired_difference(a, b, ("a", "b"))
    assert d.pct.low < 10.0 < d.pct.high
    assert d.significant and "a ahead" in d.verdict


def test_identical_runs_cover_zero_and_say_not_significant():
    a, _ = _pair(np.random.default_rng(1), rounds=40)
    d = paired_difference(a, a, ("adaptive", "all_ul"))
    assert d.pct.low == d.pct.high == d.pct.estimate == 0.0
    assert not d.significant and d.verdict.endswith("not significant")
    # two policies equal in law (no true difference) on the same channel: not significant either
    rng = np.random.default_rng(2)
    latency = 0.1 + 0.01 * rng.random((1, 80))
    same = [RoundLog.of(8 + rng.normal(0, 1, (1, 80)), latency) for _ in range(2)]
    assert not paired_difference(*same).significant
    # the same rounds up to rounding (two policies that made identical choices): not significant
    nudged = RoundLog.of(a.tokens * (1 + 1e-15), a.latency_s)
    assert not paired_difference(nudged, a).significant


def _coverage(rho, batches=None, trials=300, rounds=60, seeds=1):
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(trials):
        a, b = _pair(rng, rounds=rounds, seeds=seeds, gain=0.0, rho=rho)
        d = paired_difference(a, b, batches=batches)
        hits += d.pct.low <= 0.0 <= d.pct.high
    return hits / trials


@pytest.mark.parametrize("rho, rounds", [(0.0, 60), (0.6, 60), (0.3, 24), (0.6, 24)])
def test_batch_means_keep_their_coverage_on_dependent_rounds(rho, rounds):
    # AR(1) rounds; 300 trials: the nominal 95% minus a margin for the binomial noise (± 2.5%)
    assert _coverage(rho, rounds=rounds) >= 0.88


def test_negative_control_an_interval_that_ignores_dependence_undercovers():
    # one round per batch treats rounds as independent: on dependent rounds it covers far less often
    assert _coverage(rho=0.9, batches=60) < 0.5
    assert _coverage(rho=0.6, batches=60) < 0.80


def test_seeds_are_resampled_and_single_policy_interval_contains_its_estimate():
    a, b = _pair(np.random.default_rng(3), rounds=30, seeds=4, gain=0.2)
    d = paired_difference(a, b)
    assert d.seeds == 4 and d.rounds == 30 and d.pct.low < d.pct.estimate < d.pct.high
    g = goodput_interval(a)
    assert g.low < g.estimate < g.high and g.estimate == pytest.approx(a.goodput)


def test_unpaired_shapes_are_refused():
    a, _ = _pair(np.random.default_rng(4), rounds=10)
    b, _ = _pair(np.random.default_rng(5), rounds=12)
    with pytest.raises(ConfigError, match="paired runs"):
        paired_difference(a, b)


def _linear_interval(values_loo: np.ndarray, full: float, level: float = 0.95) -> tuple[float, float]:
    """The interval the module used before: full ± t · jackknife s.e. on the linear scale (the
    negative control of the test below)."""
    from scipy import stats

    m = values_loo.size
    se = np.sqrt((m - 1) / m * np.sum((values_loo - values_loo.mean()) ** 2))
    half = stats.t.ppf((1 + level) / 2, m - 1) * se
    return full - half, full + half


def test_goodput_and_ratio_intervals_stay_inside_the_possible_values_with_few_batches():
    """3 rounds = 2 batches (t = 12.7): the interval of a goodput stays above 0 and the paired
    difference above −100%; on the same numbers the linear-scale interval reaches below both (the
    negative control: the data do exercise the problem)."""
    tokens_a = np.array([[30.0, 10.0, 12.0]])
    tokens_b = np.array([[9.0, 10.0, 11.0]])
    latency = np.array([[0.2, 0.2, 0.2]])
    a, b = RoundLog.of(tokens_a, latency), RoundLog.of(tokens_b, latency)
    g = goodput_interval(a)
    assert 0.0 < g.low < g.estimate < g.high and g.estimate == pytest.approx(a.goodput)
    # by hand, the two batches are rounds {0} and {1, 2} (cuts at 0, 2 of 3 rounds: round(1.5) = 2)
    n, t = np.array([30.0 + 10.0, 12.0]), np.array([0.4, 0.2])
    loo = np.array([n[1] / t[1], n[0] / t[0]])
    assert _linear_interval(loo, a.goodput)[0] < 0.0  # the control: linear goes below 0
    # on the log scale: exp(log G ± t·se(log)), the same jackknife on log(loo)
    lo, hi = _linear_interval(np.log(loo), np.log(a.goodput))
    assert (g.low, g.high) == pytest.approx((np.exp(lo), np.exp(hi)))
    d = paired_difference(a, b)
    assert -100.0 < d.pct.low < d.pct.estimate < d.pct.high and not d.significant
    ratio_loo = loo / np.array([11.0 / 0.2, 19.0 / 0.4])
    assert 100 * (_linear_interval(ratio_loo, a.goodput / b.goodput)[0] - 1) < -100.0  # the control


def test_an_uninformative_interval_is_zero_to_infinity_not_negative():
    one = RoundLog.of([[10.0]], [[0.5]])
    assert (goodput_interval(one).low, goodput_interval(one).high) == (0.0, np.inf)
    d = paired_difference(one, one)
    assert d.pct.low == -100.0 and d.pct.high == np.inf and not d.significant
