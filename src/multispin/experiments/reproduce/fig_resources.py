"""Figure 4 (our addition): sum goodput versus total bandwidth B and versus cell radius.

Study ``resources`` on the main model pair at the preset's P^dl/P^ul: one sweep of B (radius
500 m), one of the radius (B = 10 MHz; distances uniform in [100 m, radius]).
"""

from __future__ import annotations

from pathlib import Path

from multispin.experiments.reproduce._figure import STYLE, band, fmt_ci, legend, pyplot, save, select, value_ticks
from multispin.vocabulary import REFERENCE

NAME = "fig4_resources"
TITLE = "Goodput versus total bandwidth and versus cell radius (our addition)"
STUDIES = ("resources",)
PARAMS = ("preset", "sweep", "bandwidth_mhz", "radius_m")
METRICS = ("goodput", "g_bound", "g_max", "g_ratio", "g_ratio_bound", "e_t_comm_ms", "gamma_mean", "frac_no_draft")


def table(summaries: dict[str, list[dict]]) -> list[dict]:
    return select(summaries["resources"], PARAMS, METRICS)


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    bw = [r for r in rows if r["sweep"] == "bandwidth"]
    rad = [r for r in rows if r["sweep"] == "radius"]
    for ax, rs, x in ((axes[0], bw, "bandwidth_mhz"), (axes[1], rad, "radius_m")):
        band(ax, rs, x, "goodput", "adaptive G", style=STYLE[REFERENCE])
        # the true bound max_γ G_max(γ) (communication free); older CSVs only have G_max at the plan's γ
        if any(r.get("g_bound") is not None for r in rs):
            band(ax, rs, x, "g_bound", "bound: max$_γ$ G$_{max}$(γ), communication free", style=STYLE["bound"])
        else:
            band(ax, rs, x, "g_max", "G$_{max}$ at the plan's γ", style=STYLE["bound"])
        ax.set_ylabel("sum goodput (tokens/s)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        legend(ax, loc="lower right")
    axes[0].set_xscale("log")
    value_ticks(axes[0], [r["bandwidth_mhz"] for r in bw])
    axes[0].set_xlabel("total bandwidth B (MHz)")
    value_ticks(axes[1], [r["radius_m"] for r in rad])
    axes[1].set_xlabel("cell radius (m)")
    fig.suptitle("Goodput vs bandwidth and cell radius (95% CI over drops)", fontsize=10)
    save(fig, path)


def describe(rows: list[dict]) -> str:
    bw = [r for r in rows if r["sweep"] == "bandwidth"]
    rad = [r for r in rows if r["sweep"] == "radius"]
    out = []
    if bw:
        out.append(
            f"From B = {bw[0]['bandwidth_mhz']:g} to {bw[-1]['bandwidth_mhz']:g} MHz the goodput goes "
            f"{fmt_ci(bw[0], 'goodput')} → {fmt_ci(bw[-1], 'goodput')} tokens/s "
            f"(G over the bound {fmt_ci(bw[0], 'g_ratio_bound', 2)} → {fmt_ci(bw[-1], 'g_ratio_bound', 2)})."
        )
    if rad:
        out.append(
            f"From a {rad[0]['radius_m']:g} m to a {rad[-1]['radius_m']:g} m cell it goes "
            f"{fmt_ci(rad[0], 'goodput')} → {fmt_ci(rad[-1], 'goodput')} tokens/s "
            f"(G over the bound {fmt_ci(rad[0], 'g_ratio_bound', 2)} → {fmt_ci(rad[-1], 'g_ratio_bound', 2)})."
        )
    return " ".join(out)
