"""The project's confidence intervals, one family: which estimator fits which data, and why.

Every interval is two-sided at `LEVEL` (95%) and reads the same way ("not significant" when a
difference's interval covers 0). What differs is the unit of independence of the data:

**Independent units** (drops of a reproduce study, seeds of a demo, prompts of a measurement),
here:

- `mean_ci`: the mean with Student's t interval, mean ± t_{n−1}·s/√n, for signed quantities
  (gains in %);
- `bootstrap_mean_ci` / `expanded_percentile`: for quantities that cannot be negative (goodputs,
  draft lengths, fractions, latencies), where a t interval over a few units of a skewed quantity
  reaches below zero (γ̄ "−4 tokens"). The *expanded* percentile interval (Hesterberg 2015, "What
  teachers should know about the bootstrap", §4.4) takes the bootstrap replicates' quantiles at
  Φ(∓√(n/(n−1))·t_{0.975,n−1}), which widens the plain percentile interval to match t at small n
  (the plain one under-covers) and still stays inside the range of the data, hence inside the
  quantity's support. Its resamples come from a generator seeded by n alone, so the same units
  give the same bytes;
- `ratio_of_means_ci`: the **paired** gain of two means, 100·(mean(a)/mean(b) − 1), by the delta
  method on the pairs (a drop's two policies share its channel and samples).

**Dependent rounds** (one run's steady state, where a device's estimate, text and job carry over
from round to round): batch means with a leave-one-batch-out jackknife of the ratio of sums, on
the log scale, in `multispin.experiments.paired`: `paired_difference` (paired: two policies on
common random numbers, the same batch cuts for both), `goodput_interval` (one policy), and
`log_jackknife`, which `multispin.experiments.service_intervals` applies to the service metrics.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
from scipy.stats import norm, t

from multispin.experiments.paired import LEVEL

BOOTSTRAP_RESAMPLES = 4000


def t_quantile(n: int, level: float = LEVEL) -> float:
    """Student's t quantile of a two-sided ``level`` interval from ``n`` independent units."""
    return float(t.ppf((1 + level) / 2, n - 1)) if n > 1 else float("nan")


def _finite(values: Iterable[float]) -> tuple[np.ndarray, tuple[float, float, float, int] | None]:
    """The finite values, and the summary (mean, low, high, n) already when there are too few of
    them for an interval (none: all NaN; one: its value, no interval)."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return v, (float("nan"), float("nan"), float("nan"), 0)
    if v.size == 1:
        return v, (float(v[0]), float("nan"), float("nan"), 1)
    return v, None


def mean_ci(values: Iterable[float], level: float = LEVEL) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of the finite values: mean ± t_{(1+level)/2, n−1}·s/√n."""
    v, too_few = _finite(values)
    if too_few:
        return too_few
    n, m = int(v.size), float(np.mean(v))
    half = t_quantile(n, level) * float(np.std(v, ddof=1)) / math.sqrt(n)
    return m, m - half, m + half, n


def expanded_percentile(replicates, n: int) -> tuple[float, float]:
    """The 95% expanded percentile interval (module docstring) from bootstrap ``replicates`` of a
    statistic of ``n`` independent units (resampled with replacement): the replicates' quantiles
    at Φ(∓√(n/(n−1))·t_{0.975,n−1}). NaN where n < 2 or no replicate is finite."""
    r = np.asarray(replicates, dtype=float)
    r = r[np.isfinite(r)]
    if n < 2 or not r.size:
        return float("nan"), float("nan")
    tail = float(norm.sf(math.sqrt(n / (n - 1)) * t_quantile(n)))
    lo, hi = np.quantile(r, [tail, 1.0 - tail])
    return float(lo), float(hi)


def bootstrap_mean_ci(values: Iterable[float]) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of the finite values, expanded-percentile bootstrap (module docstring): the
    interval lies within [min, max] of the values."""
    v, too_few = _finite(values)
    if too_few:
        return too_few
    n, m = int(v.size), float(np.mean(v))
    if np.all(v == v[0]):
        return m, m, m, n
    rng = np.random.default_rng([0xB0075, n])
    means = v[rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))].mean(axis=1)
    lo, hi = expanded_percentile(means, n)
    # the mean itself is inside; round-off of the resampled means must not put it outside
    return m, min(lo, m), max(hi, m), n


def ratio_of_means_ci(num, den) -> tuple[float, float, float]:
    """100·(mean(num)/mean(den) − 1) with a 95% CI (paired delta method), over drops where both are finite."""
    pairs = [
        (a, b) for a, b in zip(num, den) if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)
    ]
    n = len(pairs)
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    a = np.array([p[0] for p in pairs])
    b = np.array([p[1] for p in pairs])
    ma, mb = float(a.mean()), float(b.mean())
    if mb <= 0:
        return float("nan"), float("nan"), float("nan")
    r = ma / mb
    if n == 1:
        return 100 * (r - 1), float("nan"), float("nan")
    resid = a - r * b  # linearisation of the ratio
    half = t_quantile(n) * float(np.std(resid, ddof=1)) / (math.sqrt(n) * mb)
    return 100 * (r - 1), 100 * (r - half - 1), 100 * (r + half - 1)
