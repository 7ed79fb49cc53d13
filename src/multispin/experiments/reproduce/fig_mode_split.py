"""Figure 1: mode split (fraction of rejected devices served in DL) and mean draft length versus P^dl.

Study ``pdl``: for each model pair and P^dl/P^ul, the adaptive plan of every drop; the DL
fraction is E[#DL]/E[#rejected] over the plan's SAA outcomes; the draft length is averaged over
all devices (γ = 0 counts) and, separately, over the devices that draft.
"""

from __future__ import annotations

from pathlib import Path

from multispin.experiments.reproduce._figure import PAIR_LABEL, band, by, fmt_ci, pyplot, ratio_axis, run_as_script, \
    save, select

NAME = "fig1_mode_split"
TITLE = "Mode split and mean draft length versus P^dl/P^ul, per model pair"
STUDIES = ("pdl",)
PARAMS = ("preset", "pdl_ratio")
METRICS = ("dl_fraction", "rejected_mean", "gamma_mean", "gamma_mean_drafting", "frac_no_draft", "goodput")


def table(summaries: dict[str, list[dict]]) -> list[dict]:
    return select(summaries["pdl"], PARAMS, METRICS)


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, (preset, rs) in enumerate(by(rows, "preset").items()):
        band(axes[0], rs, "pdl_ratio", "dl_fraction", PAIR_LABEL.get(preset, preset), f"C{i}")
        band(axes[1], rs, "pdl_ratio", "gamma_mean", PAIR_LABEL.get(preset, preset) + ": all devices", f"C{i}")
        band(axes[1], rs, "pdl_ratio", "gamma_mean_drafting", PAIR_LABEL.get(preset, preset) + ": drafting devices",
             f"C{i}", marker="s", linestyle="--")
    axes[0].set_ylabel("fraction of rejected devices in DL")
    axes[0].set_ylim(0, 1)
    axes[1].set_ylabel("mean draft length γ (tokens)")
    for ax in axes:
        ratio_axis(ax)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Mode split and draft length vs P$^{dl}$ (95% CI over drops)", fontsize=10)
    save(fig, path)


def describe(rows: list[dict]) -> str:
    parts = []
    for preset, rs in by(rows, "preset").items():
        lo, hi = rs[0], rs[-1]
        parts.append(f"{PAIR_LABEL.get(preset, preset)}: from P^dl/P^ul = {lo['pdl_ratio']:g} to {hi['pdl_ratio']:g} "
                     f"the DL fraction goes {fmt_ci(lo, 'dl_fraction', 2)} → {fmt_ci(hi, 'dl_fraction', 2)} and the "
                     f"mean draft length {fmt_ci(lo, 'gamma_mean')} → {fmt_ci(hi, 'gamma_mean')} tokens "
                     f"(drafting devices only: {fmt_ci(lo, 'gamma_mean_drafting')} → {fmt_ci(hi, 'gamma_mean_drafting')}).")
    return (" ".join(parts) + " As P^dl grows, more rejected devices are corrected in DL, and more devices draft; "
            "the devices that draft keep drafting long runs, so the mean over all devices mostly reflects how many draft.")


if __name__ == "__main__":
    run_as_script(__name__)
