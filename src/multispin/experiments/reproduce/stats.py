"""Per-point summaries over drops: the mean and a 95% confidence interval of every metric.

Signed quantities (gains in %) get the Student t interval. Quantities that cannot be negative
(goodputs, draft lengths, fractions, latencies) get a bootstrap interval instead: a t interval
over a few drops of a skewed, non-negative quantity reaches below zero (γ̄ "−4 tokens"), which
no reader can use. The bootstrap interval is the *expanded* percentile interval (Hesterberg 2015,
"What teachers should know about the bootstrap", §4.4): percentiles at Φ(±√(n/(n−1))·t_{0.975,n−1}),
which widens the plain percentile interval to match t at small n (the plain one under-covers) and
still stays inside the range of the data, hence inside the quantity's support. Its resamples
are drawn from a generator seeded by n alone, so the same drops give the same CSV bytes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

# Metrics that are undefined in some drops (no rejected device, no drafting device): their
# summaries carry the number of drops that define them, ``<metric>_n``.
SOMETIMES_UNDEFINED = ("dl_fraction", "gamma_mean_drafting")
NOT_METRICS = ("drop", "drop_seed")


def t_quantile(n: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, n - 1)) if n > 1 else float("nan")


def _finite(values: Iterable[float]) -> tuple[np.ndarray, tuple[float, float, float, int] | None]:
    """The finite values, and the summary (mean, low, high, n) already when there are too few of
    them for an interval (none: all NaN; one: its value, no interval)."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return v, (float("nan"), float("nan"), float("nan"), 0)
    if v.size == 1:
        return v, (float(v[0]), float("nan"), float("nan"), 1)
    return v, None


def mean_ci(values: Iterable[float]) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of the finite values: mean ± t_{0.975, n−1}·s/√n."""
    v, too_few = _finite(values)
    if too_few:
        return too_few
    n, m = int(v.size), float(np.mean(v))
    half = t_quantile(n) * float(np.std(v, ddof=1)) / math.sqrt(n)
    return m, m - half, m + half, n


# Metrics that are non-negative by definition (by name prefix): bootstrap intervals.
NON_NEGATIVE_PREFIXES = (
    "goodput",
    "g_max",
    "g_ratio",
    "g_comm_bound",
    "gap_comm_bound",
    "gamma_",
    "frac_",
    "dl_fraction",
    "rejected_mean",
    "e_t_comm_ms",
    "t_comp_ms",
    "tokens_per_round",
    "payload_bits_",
    "capacity_",
    "jain",  # Jain's index, in [1/K, 1]
    "energy_per_token",
    "tpot_",  # a time per output token
)
BOOTSTRAP_RESAMPLES = 4000


def non_negative(metric: str) -> bool:
    return metric.startswith(NON_NEGATIVE_PREFIXES)


def expanded_percentile(replicates, n: int) -> tuple[float, float]:
    """The 95% expanded percentile interval (module doc) from bootstrap ``replicates`` of a
    statistic of ``n`` independent units (resampled with replacement): the replicates' quantiles
    at Φ(∓√(n/(n−1))·t_{0.975,n−1}). NaN where n < 2 or no replicate is finite."""
    from scipy.stats import norm

    r = np.asarray(replicates, dtype=float)
    r = r[np.isfinite(r)]
    if n < 2 or not r.size:
        return float("nan"), float("nan")
    tail = float(norm.sf(math.sqrt(n / (n - 1)) * t_quantile(n)))
    lo, hi = np.quantile(r, [tail, 1.0 - tail])
    return float(lo), float(hi)


def bootstrap_mean_ci(values: Iterable[float]) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of the finite values, expanded-percentile bootstrap (module doc): the
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


# gain-of-means metrics: name -> (numerator, denominator) per-drop metrics
GAINS_OF_MEANS = {
    "gom_vs_all_ul_pct": ("goodput", "goodput_all_ul"),
    "gom_vs_all_dl_pct": ("goodput", "goodput_all_dl"),
    "gom_vs_random_pct": ("goodput", "goodput_random"),
    "gom_vs_best_uniform_pct": ("goodput", "goodput_best_uniform"),
    "gom_vs_computation_only_pct": ("goodput", "goodput_computation_only"),
    "gom_vs_greedy_paper_pct": ("goodput", "goodput_greedy_paper"),
    # claims 6 and 7 for the paper's own two-phase greedy, next to the shipped search's
    "gom_paper_vs_best_uniform_pct": ("goodput_greedy_paper", "goodput_best_uniform"),
    "gom_paper_vs_computation_only_pct": ("goodput_greedy_paper", "goodput_computation_only"),
    "gom_opt_split_pct": ("goodput_opt_split", "goodput"),
    "gom_lattice_pct": ("goodput_lattice", "goodput"),
    # figure 8 (channel knowledge): naive and robust planning against perfect knowledge and each other,
    # and the adaptive gain over the fixed modes under each kind of knowledge
    "gom_naive_vs_perfect_pct": ("goodput_naive", "goodput_perfect"),
    "gom_robust_vs_perfect_pct": ("goodput_robust", "goodput_perfect"),
    "gom_robust_vs_naive_pct": ("goodput_robust", "goodput_naive"),
    **{
        f"gom_{k}_vs_{b}_pct": (f"goodput_{k}", f"goodput_{k}_{b}")
        for k in ("perfect", "naive", "robust")
        for b in ("all_ul", "all_dl")
    },
    # the sweep's objective (multispin.experiments.sweep): what it costs in sum goodput against
    # the sum's plan, and adaptive's service columns against each mode baseline's, paired as goodput is
    "gom_objective_vs_sum_pct": ("goodput", "goodput_sum_objective"),
    **{
        f"gom_{m}_vs_{b}_pct": (metric, f"{metric}_{b}")
        for m, metric in (
            ("worst", "goodput_worst"),
            ("jain", "jain"),
            ("energy_per_token", "energy_per_token_j"),
            ("tpot_p95", "tpot_p95_s"),
        )
        for b in ("all_ul", "all_dl", "random", "best_uniform", "computation_only", "greedy_paper")
    },
}


def summarise_drops(params: dict[str, Any], rows: list[dict[str, float]]) -> dict[str, Any]:
    """One CSV row: the point's parameters, ``n_drops``, and ``m``, ``m_lo``, ``m_hi`` per metric."""
    out: dict[str, Any] = dict(params)
    out["n_drops"] = len(rows)
    metrics = sorted({k for r in rows for k in r if k not in NOT_METRICS})
    for m in metrics:
        ci = bootstrap_mean_ci if non_negative(m) else mean_ci
        mean, lo, hi, n = ci(r.get(m, float("nan")) for r in rows)
        out[m] = mean
        out[f"{m}_lo"] = lo
        out[f"{m}_hi"] = hi
        if m in SOMETIMES_UNDEFINED:
            out[f"{m}_n"] = n
    for name, (a, b) in GAINS_OF_MEANS.items():
        if a in metrics and b in metrics:
            g, lo, hi = ratio_of_means_ci([r.get(a) for r in rows], [r.get(b) for r in rows])
            out[name], out[f"{name}_lo"], out[f"{name}_hi"] = g, lo, hi
    return dict(sorted(out.items(), key=lambda kv: (kv[0] not in params, kv[0] != "n_drops")))
