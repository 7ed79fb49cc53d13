"""Figure 9 (our addition): capacity under a service target, the devices one server carries while
the pooled p95 of the time per output token stays within 200 ms, versus P^dl/P^ul, for adaptive /
all-UL / all-DL modes under the sum and the proportional-fair objective (the model:
`multispin.experiments.capacity`; docs/service.md). Each drop runs every policy × objective on the
same drop (the drop's seed leaves the ratio out, so every ratio sees the same drops too).
"""

from __future__ import annotations

from pathlib import Path

from multispin.experiments.capacity import CAPACITY_OBJECTIVES, CAPACITY_TPOT_TARGET_S, POLICY_MODES
from multispin.experiments.reproduce._figure import (
    STYLE,
    band,
    fmt_ci,
    legend,
    pdl_axis,
    pyplot,
    save,
    select,
    with_pdl_dbm,
)
from multispin.experiments.reproduce.long_form import column
from multispin.vocabulary import POLICY_TABLE

NAME = "fig9_capacity"
TITLE = "Capacity under a p95 TPOT target versus P^dl/P^ul (our addition)"
STUDIES = ("capacity",)
PARAMS = ("preset", "pdl_ratio", "p_dl_dbm")
LABELS = {p: POLICY_TABLE[p].label for p in POLICY_MODES}
METRICS = tuple(column(f"capacity_{o.replace('-', '_')}", p) for p in POLICY_MODES for o in CAPACITY_OBJECTIVES)


def table(summaries: dict[str, list[dict]]) -> list[dict]:
    return select(with_pdl_dbm(summaries["capacity"]), PARAMS, METRICS)


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    rows = with_pdl_dbm(rows)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), layout="constrained", sharey=True)
    for ax, objective in zip(axes, CAPACITY_OBJECTIVES):
        key = objective.replace("-", "_")
        for policy in POLICY_MODES:
            band(ax, rows, "p_dl_dbm", column(f"capacity_{key}", policy), LABELS[policy], style=STYLE[policy])
        ax.set_title(f"{objective} objective", fontsize=9)
        ax.set_ylim(bottom=0)
        pdl_axis(ax, rows)
        ax.grid(alpha=0.3)
        legend(ax)
    axes[0].set_ylabel(f"devices served (p95 TPOT ≤ {1e3 * CAPACITY_TPOT_TARGET_S:g} ms)")
    fig.suptitle("Capacity under a TPOT target (mean and 95% CI over drops)", fontsize=10)
    save(fig, path)


def describe(rows: list[dict]) -> str:
    if not rows:
        return ""
    a, b = rows[0], rows[-1]
    parts = [
        f"{LABELS[p]} {fmt_ci(a, column('capacity_sum', p))} → {fmt_ci(b, column('capacity_sum', p))}"
        for p in POLICY_MODES
    ]
    fair = fmt_ci(a, column("capacity_proportional_fair")), fmt_ci(b, column("capacity_proportional_fair"))
    return (
        f"Devices served within a p95 TPOT of {1e3 * CAPACITY_TPOT_TARGET_S:g} ms from P^dl/P^ul = "
        f"{a['pdl_ratio']:g} to {b['pdl_ratio']:g} (sum objective): {'; '.join(parts)}. Under the "
        f"proportional-fair objective adaptive serves {fair[0]} → {fair[1]}."
    )
