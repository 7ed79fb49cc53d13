"""Per-point summaries over drops: mean and 95% confidence interval (Student t) of every metric."""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

# Metrics that are undefined in some drops (no rejected device, no drafting device): their
# summaries carry the number of drops that define them, ``<metric>_n``.
SOMETIMES_UNDEFINED = ("dl_fraction", "gamma_mean_drafting")
NOT_METRICS = ("drop", "drop_seed")


def t_quantile(n: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, n - 1)) if n > 1 else float("nan")


def mean_ci(values: Iterable[float]) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of the finite values: mean ± t_{0.975, n−1}·s/√n."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    n = int(v.size)
    if n == 0:
        return float("nan"), float("nan"), float("nan"), 0
    m = float(np.mean(v))
    if n == 1:
        return m, float("nan"), float("nan"), 1
    half = t_quantile(n) * float(np.std(v, ddof=1)) / math.sqrt(n)
    return m, m - half, m + half, n


def summarise(params: dict[str, Any], rows: list[dict[str, float]]) -> dict[str, Any]:
    """One CSV row: the point's parameters, ``n_drops``, and ``m``, ``m_lo``, ``m_hi`` per metric."""
    out: dict[str, Any] = dict(params)
    out["n_drops"] = len(rows)
    metrics = sorted({k for r in rows for k in r if k not in NOT_METRICS})
    for m in metrics:
        mean, lo, hi, n = mean_ci(r.get(m, float("nan")) for r in rows)
        out[m] = mean
        out[f"{m}_lo"] = lo
        out[f"{m}_hi"] = hi
        if m in SOMETIMES_UNDEFINED:
            out[f"{m}_n"] = n
    return out
