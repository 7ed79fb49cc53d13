"""The sweep's coupled policies (three_way, all_coupled): the study "UL, DL or neither"."""

from __future__ import annotations

import numpy as np
import pytest

import multispin as ms
from multispin.errors import ConfigError
from multispin.experiments.reproduce.drop import run_drop
from multispin.optimize.goodput import SAAObjective
from multispin.optimize.plan import plan
from multispin.system import World, scenario_from_dict
from multispin.system.coupled_alpha import ASSUMPTION, COUPLED_RATIO, assumed_coupled_alpha

SMALL = dict(devices=5, n_saa=60)


@pytest.fixture(scope="module")
def table():
    return ms.sweep(
        ms.scenario(**SMALL),
        over={"radio.p_ul_dbm": [10, -10]},
        drops=3,
        policies=["adaptive", "three_way", "all_coupled", "all_ul"],
    )


def test_three_way_never_below_adaptive_or_all_coupled_and_labels_its_assumption(table):
    rows = {(r["radio.p_ul_dbm"], r["policy"]): r for r in table.rows}
    for p_ul in (10, -10):
        three, adaptive = rows[(p_ul, "three_way")], rows[(p_ul, "adaptive")]
        allc = rows[(p_ul, "all_coupled")]
        assert three["goodput_tokens_per_s"] >= adaptive["goodput_tokens_per_s"] * (1 - 1e-12)
        assert three["goodput_tokens_per_s"] >= allc["goodput_tokens_per_s"] * (1 - 1e-12)
        assert three["three_way_gain_pct"] >= -1e-9 and three["three_way_gain_low"] <= three["three_way_gain_pct"]
        assert 0.0 <= three["coupled_share"] <= 1.0 and allc["coupled_share"] == 1.0
        assert adaptive["coupled_share"] == 0.0
        assert all(r["coupled_alpha"] == ASSUMPTION for r in (three, adaptive, allc))


def test_drop_columns_are_the_planner_on_the_assumed_coupled_alpha():
    sc = ms.scenario(**SMALL).override({"seed": 11})
    row = run_drop(sc.to_dict(), {"coupled": True, "modes": True})
    world = World(scenario_from_dict(sc.to_dict()))
    inst = world.instance(0)
    inst = inst.replace(alpha_coupled=assumed_coupled_alpha(world.drop.task, inst.alpha))
    # all coupled: no airtime, so its goodput is its free-communication bound G_max
    allc = SAAObjective(inst.with_coupled(np.ones(5, bool)), world.saa_uniforms(0)).evaluate(
        plan(inst, uniforms=world.saa_uniforms(0), verify="coupled").draft_len
    )
    assert allc.e_t_comm_s == 0.0
    assert row["goodput_all_coupled"] == pytest.approx(allc.g_max_tokens_per_s, rel=1e-12)
    assert row["goodput_three_way"] >= max(row["goodput"], row["goodput_all_coupled"]) * (1 - 1e-12)
    ratios = inst.alpha_coupled / inst.alpha
    assert set(np.round(ratios, 6)) <= {round(v, 6) for v in COUPLED_RATIO.values()}


def test_coupled_policies_refuse_other_objectives():
    with pytest.raises(ConfigError, match="policies"):
        ms.sweep(
            ms.scenario(**SMALL), over={"radio.p_ul_dbm": [10]}, drops=1, policies=["three_way"], objective="max-min"
        )
