"""Figure 2: sum goodput versus the number of devices K, adaptive against all-UL, all-DL and random.

Study ``users``: K from 2 to 20 and beyond to 50, at P^dl/P^ul = 4 and 16, on the main model pair
(beyond the paper's K = 20 the full run uses N_SAA = 200: column ``n_saa``).
Every baseline has its own draft lengths, optimised by the same policy on the same SAA samples.
"""

from __future__ import annotations

from pathlib import Path

from multispin.experiments.reproduce._figure import COLORS, band, by, fmt_ci, pyplot, run_as_script, save, select

NAME = "fig2_goodput_vs_devices"
TITLE = "Sum goodput versus K: adaptive modes against all-UL, all-DL and random"
STUDIES = ("users",)
PARAMS = ("preset", "pdl_ratio", "devices", "n_saa")
METRICS = ("goodput", "goodput_all_ul", "goodput_all_dl", "goodput_random", "gom_vs_all_ul_pct",
           "gom_vs_all_dl_pct", "gom_vs_random_pct", "goodput_best_known", "greedy_shortfall_pct", "g_ratio",
           "gamma_mean")
SCHEMES = (("goodput", "adaptive (ours)", "adaptive"), ("goodput_all_ul", "all-UL", "all_ul"),
           ("goodput_all_dl", "all-DL", "all_dl"), ("goodput_random", "random", "random"))


def table(summaries: dict[str, list[dict]]) -> list[dict]:
    return select(summaries["users"], PARAMS, METRICS)


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    groups = by(rows, "pdl_ratio")
    fig, axes = plt.subplots(2, len(groups), figsize=(5 * len(groups), 7), squeeze=False)
    for j, (ratio, rs) in enumerate(groups.items()):
        ax = axes[0][j]
        for m, label, c in SCHEMES:
            band(ax, rs, "devices", m, label, COLORS[c])
        ax.set_title(f"P$^{{dl}}$/P$^{{ul}}$ = {ratio:g}", fontsize=10)
        ax.set_ylabel("sum goodput (tokens/s)")
        ax2 = axes[1][j]
        for m, label, c in (("gom_vs_all_ul_pct", "vs all-UL", "all_ul"), ("gom_vs_all_dl_pct", "vs all-DL", "all_dl"),
                            ("gom_vs_random_pct", "vs random", "random")):
            band(ax2, rs, "devices", m, label, COLORS[c])
        ax2.axhline(0, color="k", linewidth=0.8)
        ax2.set_ylabel("gain of adaptive, of mean goodputs (%)")
        for a in (ax, ax2):
            a.set_xlabel("number of devices K")
            a.grid(alpha=0.3)
            a.legend(fontsize=7)
    fig.suptitle("Goodput vs K (95% CI over drops)", fontsize=10)
    save(fig, path)


def describe(rows: list[dict]) -> str:
    parts = []
    for ratio, rs in by(rows, "pdl_ratio").items():
        last = rs[-1]
        worst = {m: min(rs, key=lambda r: r[m]) for m in ("gom_vs_all_ul_pct", "gom_vs_all_dl_pct", "gom_vs_random_pct")}
        parts.append(f"At P^dl/P^ul = {ratio:g} and K = {last['devices']}, adaptive gains {fmt_ci(last, 'gom_vs_all_ul_pct')}% "
                     f"over all-UL, {fmt_ci(last, 'gom_vs_all_dl_pct')}% over all-DL and "
                     f"{fmt_ci(last, 'gom_vs_random_pct')}% over random; its smallest gains over the K sweep are "
                     + ", ".join(f"{w[m]:.1f}% ({m[8:-4].replace('_', '-')}, K = {w['devices']})" for m, w in worst.items()) + ".")
    return " ".join(parts)


if __name__ == "__main__":
    run_as_script(__name__)
