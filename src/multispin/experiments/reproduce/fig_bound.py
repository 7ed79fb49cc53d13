"""Figure 6 (our addition): how close the adaptive policy comes to the free-communication bound
max_γ G_max(γ) (``g_ratio_bound``), versus P^dl (per model pair, study ``pdl``) and versus K (study
``users``, both pairs at P^dl/P^ul = 4 and 16).

The bound is the best goodput any draft lengths reach when communication costs nothing. G_max at
the plan's own γ (``g_ratio``, kept in the CSV) is no bound: it equals G wherever nobody drafts.
"""

from __future__ import annotations

from pathlib import Path

from multispin.experiments.reproduce._figure import (
    PAIR_LABEL,
    PAIR_STYLE,
    band,
    by,
    legend,
    pdl_axis,
    pyplot,
    save,
    select,
    value_ticks,
    with_pdl_dbm,
)

NAME = "fig6_bound"
TITLE = "G / max_γ G_max: distance to the free-communication bound (our addition)"
STUDIES = ("pdl", "users")
PARAMS = ("sweep", "preset", "pdl_ratio", "p_dl_dbm", "devices", "n_saa")
METRICS = ("g_ratio_bound", "g_ratio", "goodput", "g_max", "e_t_comm_ms", "t_comp_ms", "frac_no_draft")


def table(summaries: dict[str, list[dict]]) -> list[dict]:
    a = [{**r, "sweep": "pdl", "devices": 20} for r in with_pdl_dbm(summaries.get("pdl", []))]
    b = [{**r, "sweep": "devices"} for r in summaries.get("users", [])]
    return select(a, PARAMS, METRICS) + select(b, PARAMS, METRICS)


RATIO_LINE = {4: "-", 16: "--"}


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    pdl = with_pdl_dbm([r for r in rows if r["sweep"] == "pdl"])
    for preset, rs in by(pdl, "preset").items():
        band(
            axes[0],
            rs,
            "p_dl_dbm",
            "g_ratio_bound",
            PAIR_LABEL.get(preset, preset),
            style=PAIR_STYLE.get(preset, PAIR_STYLE["paper-r1"]),
        )
    pdl_axis(axes[0], pdl)
    users = [r for r in rows if r["sweep"] == "devices"]
    for (preset, ratio), rs in by(users, ("preset", "pdl_ratio")).items():
        st = dict(PAIR_STYLE.get(preset, PAIR_STYLE["paper-r1"]))
        st["linestyle"] = RATIO_LINE.get(ratio, ":")
        st["filled"] = ratio == min(RATIO_LINE)
        band(
            axes[1],
            rs,
            "devices",
            "g_ratio_bound",
            f"{PAIR_LABEL.get(preset, preset)}, P$^{{dl}}$/P$^{{ul}}$ = {ratio:g}",
            style=st,
        )
    axes[1].set_xlabel("number of devices K")
    value_ticks(axes[1], [r["devices"] for r in users])
    for ax in axes:
        ax.set_ylabel("G / max$_γ$ G$_{max}$(γ)")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        legend(ax)
    fig.suptitle("Adaptive goodput over the free-communication bound (95% CI over drops)", fontsize=10)
    save(fig, path)


def describe(rows: list[dict]) -> str:
    # rows of a CSV written before g_ratio_bound existed have none: nothing to say
    pdl = [r for r in rows if r["sweep"] == "pdl" and r.get("g_ratio_bound") is not None]
    users = [r for r in rows if r["sweep"] == "devices" and r.get("g_ratio_bound") is not None]
    out = []
    if pdl:
        lo = min(pdl, key=lambda r: r["g_ratio_bound"])
        hi = max(pdl, key=lambda r: r["g_ratio_bound"])
        out.append(
            f"Over the P^dl sweep G over the free-communication bound ranges from {lo['g_ratio_bound']:.2f} "
            f"({lo['preset']}, P^dl/P^ul = {lo['pdl_ratio']:g}) to {hi['g_ratio_bound']:.2f} ({hi['preset']}, "
            f"{hi['pdl_ratio']:g})."
        )
    if users:
        lo = min(users, key=lambda r: r["g_ratio_bound"])
        out.append(
            f"Over the K sweep its lowest value is {lo['g_ratio_bound']:.2f} ({lo['preset']}, K = "
            f"{lo['devices']}, P^dl/P^ul = {lo['pdl_ratio']:g})."
        )
    return " ".join(out)
