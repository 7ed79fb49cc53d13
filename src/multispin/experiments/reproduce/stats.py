"""Per-point summaries over drops: the mean and a 95% confidence interval of every metric.

Signed quantities (gains in %) get the Student t interval; quantities that cannot be negative
(goodputs, draft lengths, fractions, latencies) the expanded-percentile bootstrap, which stays
inside their support; gains of means the paired delta method. The estimators and why each is
used are in `multispin.experiments.intervals`; this module decides which metric gets which.
"""

from __future__ import annotations

from typing import Any

from multispin.experiments.intervals import bootstrap_mean_ci, mean_ci, ratio_of_means_ci
from multispin.experiments.reproduce.long_form import KNOWLEDGE, column, gain_column, per_drop_gain_column
from multispin.vocabulary import REFERENCE, policies_in

# Metrics that are undefined in some drops (no rejected device, no drafting device): their
# summaries carry the number of drops that define them, ``<metric>_n``.
SOMETIMES_UNDEFINED = ("dl_fraction", "gamma_mean_drafting")
NOT_METRICS = ("drop", "drop_seed")


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


def non_negative(metric: str) -> bool:
    return metric.startswith(NON_NEGATIVE_PREFIXES)


# the baselines a drop plans beside the reference (their per-drop gains, their service columns)
_BASELINES = tuple(p.name for p in (*policies_in("modes"), *policies_in("drafts")))
# the channel-knowledge study's fixed-mode rules (the reference's gains over them, per knowledge)
_CSI_BASELINES = tuple(p.name for p in policies_in(kind="csi") if p.name != REFERENCE)
# the leads beside the reference (the three-way plan): each against the reference and its own group
_LEADS = tuple(p for p in policies_in() if p.lead and p.name != REFERENCE)
_GOODPUT = "goodput"


def _lead_gains() -> dict[str, tuple[str, str]]:
    out = {}
    for lead in _LEADS:
        for base in (REFERENCE, *(p.name for p in policies_in(lead.group) if p is not lead)):
            out[gain_column(base, lead.name)] = (column(_GOODPUT, lead.name), column(_GOODPUT, base))
    return out


# gain-of-means metrics: name -> (numerator, denominator) per-drop metrics
GAINS_OF_MEANS = {
    **{gain_column(b): (_GOODPUT, column(_GOODPUT, b)) for b in _BASELINES},
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
        gain_column(b, k): (column(_GOODPUT, knowledge=k), column(_GOODPUT, b, k))
        for k in KNOWLEDGE
        for b in _CSI_BASELINES
    },
    # the sweep's objective (multispin.experiments.sweep): what it costs in sum goodput against
    # the sum's plan, and adaptive's service columns against each mode baseline's, paired as goodput is
    "gom_objective_vs_sum_pct": ("goodput", "goodput_sum_objective"),
    # coupled verification (experiments.reproduce.coupled): the three-way plan against the paper's
    # adaptive and all-coupled, and adaptive against both (the sweep's adaptive_gain_pct)
    **_lead_gains(),
    **{gain_column(p.name): (_GOODPUT, column(_GOODPUT, p.name)) for p in policies_in("coupled")},
    **{
        gain_column(b, metric=m): (metric, column(metric, b))
        for m, metric in (
            ("worst", "goodput_worst"),
            ("jain", "jain"),
            ("energy_per_token", "energy_per_token_j"),
            ("tpot_p95", "tpot_p95_s"),
        )
        for b in _BASELINES
    },
}


def with_drop_gains(row: dict[str, float]) -> dict[str, float]:
    """``row`` and, for each baseline it has, the reference's per-drop gain over it
    (``gain_vs_<policy>_pct``: 100·(G / G_policy − 1), NaN where G_policy is 0)."""
    out = dict(row)
    g = row.get(_GOODPUT)
    for b in _BASELINES:
        gb = row.get(column(_GOODPUT, b))
        if g is not None and gb is not None:
            out[per_drop_gain_column(b)] = 100.0 * (g / gb - 1.0) if gb > 0 else float("nan")
    return out


def summarise_drops(params: dict[str, Any], rows: list[dict[str, float]]) -> dict[str, Any]:
    """One CSV row: the point's parameters, ``n_drops``, and ``m``, ``m_lo``, ``m_hi`` per metric, the
    per-drop gains (`with_drop_gains`) and the gains of means (GAINS_OF_MEANS) among them."""
    out: dict[str, Any] = dict(params)
    out["n_drops"] = len(rows)
    rows = [with_drop_gains(r) for r in rows]
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
