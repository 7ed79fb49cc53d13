"""Figure 4 (our addition): sum goodput versus total bandwidth B and versus cell radius.

Study ``resources`` on the main model pair at the preset's P^dl/P^ul: one sweep of B (radius
500 m), one of the radius (B = 10 MHz; distances uniform in [100 m, radius]).
"""

from __future__ import annotations

from pathlib import Path

from multispin.experiments.reproduce._figure import COLORS, band, fmt_ci, pyplot, run_as_script, save, select

NAME = "fig4_resources"
TITLE = "Goodput versus total bandwidth and versus cell radius (our addition)"
STUDIES = ("resources",)
PARAMS = ("preset", "sweep", "bandwidth_mhz", "radius_m")
METRICS = ("goodput", "g_max", "g_ratio", "e_t_comm_ms", "gamma_mean", "frac_no_draft")


def table(summaries: dict[str, list[dict]]) -> list[dict]:
    return select(summaries["resources"], PARAMS, METRICS)


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    bw = [r for r in rows if r["sweep"] == "bandwidth"]
    rad = [r for r in rows if r["sweep"] == "radius"]
    band(axes[0], bw, "bandwidth_mhz", "goodput", "adaptive G", COLORS["adaptive"])
    band(axes[0], bw, "bandwidth_mhz", "g_max", "G_max (free communication)", "k", linestyle="--", marker="")
    axes[0].set_xscale("log", base=2)
    axes[0].set_xlabel("total bandwidth B (MHz)")
    band(axes[1], rad, "radius_m", "goodput", "adaptive G", COLORS["adaptive"])
    band(axes[1], rad, "radius_m", "g_max", "G_max (free communication)", "k", linestyle="--", marker="")
    axes[1].set_xlabel("cell radius (m)")
    for ax in axes:
        ax.set_ylabel("sum goodput (tokens/s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Goodput vs bandwidth and cell radius (95% CI over drops)", fontsize=10)
    save(fig, path)


def describe(rows: list[dict]) -> str:
    bw = [r for r in rows if r["sweep"] == "bandwidth"]
    rad = [r for r in rows if r["sweep"] == "radius"]
    out = []
    if bw:
        out.append(f"From B = {bw[0]['bandwidth_mhz']:g} to {bw[-1]['bandwidth_mhz']:g} MHz the goodput goes "
                   f"{fmt_ci(bw[0], 'goodput')} → {fmt_ci(bw[-1], 'goodput')} tokens/s "
                   f"(G/G_max {bw[0]['g_ratio']:.2f} → {bw[-1]['g_ratio']:.2f}).")
    if rad:
        out.append(f"From a {rad[0]['radius_m']:g} m to a {rad[-1]['radius_m']:g} m cell it goes "
                   f"{fmt_ci(rad[0], 'goodput')} → {fmt_ci(rad[-1], 'goodput')} tokens/s "
                   f"(G/G_max {rad[0]['g_ratio']:.2f} → {rad[-1]['g_ratio']:.2f}).")
    return " ".join(out)


if __name__ == "__main__":
    run_as_script(__name__)
