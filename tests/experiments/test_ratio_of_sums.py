"""`paired.ratio_of_sums`, the interval of the forecast check (realised / forecast over seeds):
its coverage on simulated seeds whose policies share a seed's luck, and the negative control
that treats those runs as independent and must under-cover."""

from __future__ import annotations

import numpy as np
import pytest

from multispin.experiments.paired import ratio_of_sums

SEEDS, POLICIES, TRIALS = 20, 3, 2000
SEED_SD, RUN_SD = 0.06, 0.03  # a seed's prompts and channel move all its policies' runs together


def _coverage(clustered: bool) -> float:
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(TRIALS):
        forecast = rng.uniform(80.0, 140.0, (SEEDS, POLICIES))
        shared = rng.normal(0.0, SEED_SD, (SEEDS, 1))
        own = rng.normal(0.0, RUN_SD, (SEEDS, POLICIES))
        # E[realised] = forecast exactly: the true ratio is 1
        realised = forecast * np.exp(shared + own - (SEED_SD**2 + RUN_SD**2) / 2)
        clusters = np.repeat(np.arange(SEEDS), POLICIES) if clustered else None
        r = ratio_of_sums(realised.ravel(), forecast.ravel(), clusters)
        hits += r.low <= 1.0 <= r.high
    return hits / TRIALS


@pytest.mark.slow
def test_clustered_by_seed_the_interval_covers_and_runs_as_independent_do_not():
    assert _coverage(clustered=True) >= 0.93
    assert _coverage(clustered=False) < 0.88  # the negative control: a seed's runs are not independent


def test_ratio_of_sums_weights_runs_by_their_denominator_and_checks_its_input():
    r = ratio_of_sums([90.0, 220.0, 100.0], [100.0, 200.0, 100.0], clusters=["a", "b", "b"])
    assert r.estimate == pytest.approx(410 / 400) and r.low < r.estimate < r.high
    with pytest.raises(ValueError, match="one cluster per run"):
        ratio_of_sums([1.0, 2.0], [1.0, 2.0], clusters=["a"])
