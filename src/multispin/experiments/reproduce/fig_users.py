"""Figure 2: sum goodput versus the number of devices K, adaptive against all-UL, all-DL and random.

Study ``users``: K from 2 to 20 and beyond to 50, at P^dl/P^ul = 4 and 16, for both model pairs
(column ``n_saa``: the SAA samples of each point).
Every baseline has its own draft lengths, optimised by the same policy on the same SAA samples.
"""

from __future__ import annotations

from pathlib import Path

from multispin.experiments.reproduce._figure import (
    PAIR_LABEL,
    STYLE,
    band,
    by,
    fmt_ci,
    legend,
    pyplot,
    save,
    select,
    value_ticks,
)
from multispin.experiments.reproduce.long_form import column, gain_column
from multispin.vocabulary import POLICY_TABLE, REFERENCE, policies_in

NAME = "fig2_goodput_vs_devices"
TITLE = "Sum goodput versus K: adaptive modes against all-UL, all-DL and random"
STUDIES = ("users",)
PARAMS = ("preset", "pdl_ratio", "devices", "n_saa")
# the mode baselines (vocabulary.POLICY_TABLE) against the plan: (column, label, policy)
_MODES = tuple(p.name for p in policies_in("modes"))
SCHEMES = (
    ("goodput", "adaptive (ours)", REFERENCE),
    *((column("goodput", p), POLICY_TABLE[p].label, p) for p in _MODES),
)
GAINS = tuple((gain_column(p), f"vs {POLICY_TABLE[p].label}", p) for p in _MODES)
METRICS = (
    "goodput",
    *(c for c, _, _ in SCHEMES[1:]),
    *(c for c, _, _ in GAINS),
    "goodput_best_known",
    "greedy_shortfall_pct",
    "g_ratio",
    "gamma_mean",
    "frac_no_draft",
    "g_ratio_bound",
    *(column("gamma", p) for p in _MODES),
)


def table(summaries: dict[str, list[dict]]) -> list[dict]:
    return select(summaries["users"], PARAMS, METRICS)


def plot(rows: list[dict], path: Path) -> None:
    """Rows: goodput and gains per model pair; columns: P^dl/P^ul."""
    plt = pyplot()
    pairs = by(rows, "preset")
    ratios = sorted({r["pdl_ratio"] for r in rows})
    fig, axes = plt.subplots(
        2 * len(pairs),
        len(ratios),
        figsize=(5.2 * len(ratios), 3.6 * 2 * len(pairs)),
        squeeze=False,
        layout="constrained",
    )
    for i, (preset, prs) in enumerate(pairs.items()):
        groups = by(prs, "pdl_ratio")
        for j, ratio in enumerate(ratios):
            rs = groups.get(ratio, [])
            ax, ax2 = axes[2 * i][j], axes[2 * i + 1][j]
            for m, label, c in SCHEMES:
                band(ax, rs, "devices", m, label, style=STYLE[c])
            ax.set_title(f"{PAIR_LABEL.get(preset, preset)}, P$^{{dl}}$/P$^{{ul}}$ = {ratio:g}", fontsize=10)
            ax.set_ylabel("sum goodput (tokens/s)")
            ax.set_ylim(bottom=0)
            for m, label, c in GAINS:
                band(ax2, rs, "devices", m, label, style=STYLE[c])
            ax2.axhline(0, color="k", linewidth=0.8)
            ax2.set_ylabel("gain of adaptive (%)")
            for a in (ax, ax2):
                a.set_xlabel("number of devices K")
                value_ticks(a, [r["devices"] for r in rs])
                a.grid(alpha=0.3)
                legend(a)
    fig.suptitle(
        "Goodput vs K: adaptive modes against fixed and random modes; gains of mean goodputs (95% CI over drops)",
        fontsize=10,
    )
    save(fig, path)


def describe(rows: list[dict]) -> str:
    parts = []
    for (preset, ratio), rs in by(rows, ("preset", "pdl_ratio")).items():
        last = rs[-1]
        worst = [(min(rs, key=lambda r: r[m]), m, label[3:]) for m, label, _ in GAINS]
        gains = [f"{fmt_ci(last, m)}% over {label[3:]}" for m, label, _ in GAINS]
        parts.append(
            f"{PAIR_LABEL.get(preset, preset)}, P^dl/P^ul = {ratio:g}, K = {last['devices']}: adaptive gains "
            f"{', '.join(gains[:-1])} and {gains[-1]}; its smallest gains over the K "
            "sweep are " + ", ".join(f"{w[m]:.1f}% ({name}, K = {w['devices']})" for w, m, name in worst) + "."
        )
    return " ".join(parts)
