"""Figure 9, capacity under a p95 TPOT target in `reproduce`: one drop's numbers, the grid and
its drops, the figure from a fabricated table."""

from __future__ import annotations

from multispin.experiments.capacity import CAPACITY_MAX_DEVICES, run_capacity_drop
from multispin.experiments.reproduce import fig_capacity as fig
from multispin.experiments.reproduce.config import RunConfig, db
from multispin.experiments.reproduce.drop import run_drop
from multispin.experiments.reproduce.pipeline import FIGURE_NAMES, figure_modules
from multispin.experiments.reproduce.studies import (
    CAPACITY_DROPS_FULL,
    CAPACITY_DROPS_QUICK,
    CAPACITY_RATIOS_QUICK,
    capacity_points,
    drops_for,
)
from multispin.system import get_preset

OPTIONS = {"capacity": True}


def _scenario(ratio: float, seed: int = 3) -> dict:
    sc = get_preset("paper-qwen")
    return sc.override({"seed": seed, "radio.p_dl_dbm": sc.radio.p_ul_dbm + db(ratio)}).to_dict()


def test_a_drop_counts_devices_per_policy_and_objective_and_only_dl_power_moves_the_dl_policies():
    low, high = run_drop(_scenario(1), OPTIONS), run_drop(_scenario(64), OPTIONS)
    assert set(low) == set(fig.METRICS)
    assert all(float(v).is_integer() and 0 <= v <= CAPACITY_MAX_DEVICES for v in (*low.values(), *high.values()))
    # all-UL never uses the server's DL power: its capacity cannot move with P^dl
    assert low["capacity_all_ul_sum"] == high["capacity_all_ul_sum"]
    # the control: all-DL does move with it (the check above would not hold for any policy)
    assert high["capacity_all_dl_sum"] > low["capacity_all_dl_sum"]
    assert high["capacity_adaptive_sum"] >= high["capacity_all_ul_sum"]
    assert run_capacity_drop(_scenario(64), OPTIONS) == high  # seeded: the same drop, the same numbers


def test_grid_drops_and_registration():
    quick, full = RunConfig(quick=True), RunConfig()
    q = capacity_points(quick)
    assert [p.params["pdl_ratio"] for p in q] == list(CAPACITY_RATIOS_QUICK)
    assert len({p.label for p in q}) == 1  # every ratio sees the same drops (common random numbers)
    assert drops_for(q[0], quick) == CAPACITY_DROPS_QUICK and drops_for(q[0], full) == CAPACITY_DROPS_FULL
    assert drops_for(q[0], RunConfig(quick=True, drops=3)) == 3
    assert fig.NAME in FIGURE_NAMES and figure_modules(("fig9",)) == [fig]


def test_the_figure_plots_both_objectives_and_describes_the_sweep(tmp_path):
    rows = []
    for ratio, cap in zip((1, 4, 16, 64), (1.5, 3.5, 4.5, 4.5)):
        r = {"preset": "paper-qwen", "pdl_ratio": ratio, "n_drops": 4}
        for m in fig.METRICS:
            v = 1.5 if "all_ul" in m else cap
            r[m], r[m + "_lo"], r[m + "_hi"] = v, max(v - 1, 0.0), v + 1
        rows.append(r)
    fig.plot(rows, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 10_000
    text = fig.describe(rows)
    assert "adaptive 1.5 [0.5, 2.5] → 4.5 [3.5, 5.5]" in text and "all-UL 1.5" in text
    assert "proportional-fair" in text
