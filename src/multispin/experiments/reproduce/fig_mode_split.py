"""Figure 1: mode split (fraction of rejected devices served in DL) and mean draft length versus P^dl.

Study ``pdl``: for each model pair and P^dl/P^ul, the adaptive plan of every drop; the DL
fraction is E[#DL]/E[#rejected] over the plan's SAA outcomes; the draft length is averaged over
all devices (γ = 0 counts) and, separately, over the devices that draft.
"""

from __future__ import annotations

from pathlib import Path

from multispin.experiments.reproduce._figure import (
    PAIR_LABEL,
    PAIR_STYLE,
    band,
    by,
    fmt_ci,
    legend,
    p_ul_dbm,
    pdl_axis,
    pyplot,
    save,
    select,
    with_pdl_dbm,
)

NAME = "fig1_mode_split"
TITLE = "Mode split and mean draft length versus P^dl/P^ul, per model pair"
STUDIES = ("pdl",)
PARAMS = ("preset", "pdl_ratio", "p_dl_dbm")
METRICS = ("dl_fraction", "rejected_mean", "gamma_mean", "gamma_mean_drafting", "frac_no_draft", "goodput")
# the paper's draft-length trend (docs/system-model.md §6): about 2-3 tokens at P^dl/P^ul = 4, 5-7 at 16
PAPER_GAMMA = {4: (2.0, 3.0), 16: (5.0, 7.0)}


def table(summaries: dict[str, list[dict]]) -> list[dict]:
    return select(with_pdl_dbm(summaries["pdl"]), PARAMS, METRICS)


def _drafting_share(rows: list[dict]) -> list[dict]:
    """1 − frac_no_draft with its interval mirrored (the share of devices that draft)."""
    out = []
    for r in rows:
        if r.get("frac_no_draft") is None:
            continue
        out.append(
            {
                **r,
                "drafting": 1.0 - r["frac_no_draft"],
                "drafting_lo": 1.0 - r.get("frac_no_draft_hi", float("nan")),
                "drafting_hi": 1.0 - r.get("frac_no_draft_lo", float("nan")),
            }
        )
    return out


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    rows = with_pdl_dbm(rows)
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2), layout="constrained")
    for preset, rs in by(rows, "preset").items():
        st, lab = PAIR_STYLE.get(preset, PAIR_STYLE["paper-r1"]), PAIR_LABEL.get(preset, preset)
        band(axes[0], rs, "p_dl_dbm", "dl_fraction", lab, style=st)
        band(axes[1], rs, "p_dl_dbm", "gamma_mean", lab + ": all devices", style=st)
        band(
            axes[1],
            rs,
            "p_dl_dbm",
            "gamma_mean_drafting",
            lab + ": drafting devices",
            color=st["color"],
            marker="x",
            linestyle=":",
        )
        band(axes[2], _drafting_share(rs), "p_dl_dbm", "drafting", lab, style=st)
    for ratio, (lo, hi) in PAPER_GAMMA.items():
        xs = [r["p_dl_dbm"] for r in rows if r["pdl_ratio"] == ratio]
        if xs:
            axes[1].fill_between(
                [xs[0] - 0.8, xs[0] + 0.8],
                lo,
                hi,
                color="0.5",
                alpha=0.3,
                linewidth=0,
                label="paper: γ̄ 2–3 at ratio 4, 5–7 at 16" if ratio == 4 else None,
            )
    axes[0].set_ylabel("fraction of rejected devices corrected in DL")
    axes[0].set_ylim(0, 1.02)
    axes[1].set_ylabel("mean draft length γ̄ (tokens)")
    axes[1].set_ylim(bottom=0)
    axes[2].set_ylabel("fraction of devices that draft (γ > 0)")
    axes[2].set_ylim(0, 1.02)
    for ax in axes:
        pdl_axis(ax, rows)
        ax.grid(alpha=0.3)
        if ax is not axes[1]:
            legend(ax)
    # below the figure: inside the panel, five entries cover either the curves or the paper's boxes
    fig.legend(*axes[1].get_legend_handles_labels(), loc="outside lower center", ncol=3, fontsize=7, frameon=False)
    fig.suptitle(
        f"Mode split, draft length and drafting share vs P$^{{dl}}$ (P$^{{ul}}$ = {p_ul_dbm(rows):g} dBm; "
        "95% CI over drops)",
        fontsize=10,
    )
    save(fig, path)


def describe(rows: list[dict]) -> str:
    parts = []
    for preset, rs in by(rows, "preset").items():
        lo, hi = rs[0], rs[-1]
        parts.append(
            f"{PAIR_LABEL.get(preset, preset)}: from P^dl/P^ul = {lo['pdl_ratio']:g} to {hi['pdl_ratio']:g} "
            f"the DL fraction goes {fmt_ci(lo, 'dl_fraction', 2)} → {fmt_ci(hi, 'dl_fraction', 2)} and the "
            f"mean draft length {fmt_ci(lo, 'gamma_mean')} → {fmt_ci(hi, 'gamma_mean')} tokens "
            f"(drafting devices only: {fmt_ci(lo, 'gamma_mean_drafting')} → {fmt_ci(hi, 'gamma_mean_drafting')})."
        )
    return (
        " ".join(parts) + " As P^dl grows, more rejected devices are corrected in DL, and more devices draft; "
        "the devices that draft keep drafting long runs, so the mean over all devices mostly reflects how many draft."
    )
