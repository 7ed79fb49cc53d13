"""A drop's numbers in long form and back (`multispin.experiments.reproduce.long_form`): the wide
columns of real drops are exactly the long records pivoted by the one naming rule, every policy a
drop computes is found in them, and the per-drop gains are computed where the drops are summarised."""

from __future__ import annotations

import math

import pytest

from multispin.experiments.reproduce.columns import METRIC_DOCS
from multispin.experiments.reproduce.csi import run_csi_drop
from multispin.experiments.reproduce.drop import run_drop
from multispin.experiments.reproduce.long_form import Record, column, gain_column, parse_column, to_long, to_wide
from multispin.experiments.reproduce.stats import summarise_drops, with_drop_gains
from multispin.system import get_preset
from multispin.vocabulary import REFERENCE, policies_in


@pytest.fixture(scope="module")
def drop_rows() -> dict[str, dict[str, float]]:
    """A small drop of every kind the sweep runs: every policy with its service columns, and the
    channel-knowledge drop."""
    sc = get_preset("paper-qwen").override({"devices.count": 3, "optimizer.n_saa": 16, "seed": 5})
    every = {"modes": True, "drafts": True, "coupled": True, "service": True, "stats": True}
    csi_sc = sc.override({"channel.pilot_snr_db": 10.0}).to_dict()
    return {
        "sum": run_drop(sc.to_dict(), every),
        "csi": run_csi_drop(csi_sc, {"csi": True, "replicates": 2, "planning": "naive"}),
    }


def goodput_policies(row: dict[str, float]) -> set[str]:
    """The policies whose goodput (with no knowledge) the row holds, as long form reads them."""
    return {r.policy for r in to_long(0, row) if r.metric == "goodput" and not r.knowledge}


def test_long_form_pivots_back_to_the_same_columns(drop_rows):
    for row in (*drop_rows.values(), dict.fromkeys(METRIC_DOCS, 1.0)):
        wide = to_wide(to_long(3, row))
        assert list(wide) == [3]
        assert list(wide[3].items()) == list(row.items())  # every column, its value, its order


def test_every_policy_a_drop_computes_is_found_in_its_columns(drop_rows):
    assert goodput_policies(drop_rows["sum"]) == {p.name for p in policies_in()}
    csi = {r.policy for r in to_long(0, drop_rows["csi"]) if r.metric == "goodput" and r.knowledge == "perfect"}
    assert csi == {p.name for p in policies_in(kind="csi")}


def test_a_column_spelt_outside_the_rule_is_not_a_policy(drop_rows):
    """Negative control: the all-UL goodput written as ``goodput_allul`` is no policy's column, so
    the check above misses all_ul."""
    row = {("goodput_allul" if k == "goodput_all_ul" else k): v for k, v in drop_rows["sum"].items()}
    assert "all_ul" not in goodput_policies(row)
    assert parse_column("goodput_allul") == (REFERENCE, "", "goodput_allul")


def test_the_rule_spells_the_columns_the_csvs_have():
    assert column("goodput") == "goodput" and column("gamma") == "gamma_mean"
    assert column("gamma", "all_ul") == "gamma_all_ul"
    assert column("goodput", "all_dl", "robust") == "goodput_robust_all_dl"
    assert column("gamma", REFERENCE, "naive") == "gamma_naive"
    assert column("capacity_proportional_fair", "all_ul") == "capacity_all_ul_proportional_fair"
    assert gain_column("all_ul") == "gom_vs_all_ul_pct"
    assert gain_column(REFERENCE, "three_way") == "gom_three_way_vs_adaptive_pct"
    assert gain_column("all_dl", "naive") == "gom_naive_vs_all_dl_pct"
    assert gain_column("random", metric="worst") == "gom_worst_vs_random_pct"
    assert to_long(1, {"goodput_robust_all_dl": 2.0}) == [Record(1, "all_dl", "robust", "goodput", 2.0)]


def test_per_drop_gains_are_computed_where_summarised():
    rows = [{"goodput": 11.0, "goodput_all_ul": 10.0}, {"goodput": 9.0, "goodput_all_ul": 0.0}]
    gains = [with_drop_gains(r) for r in rows]
    assert gains[0]["gain_vs_all_ul_pct"] == pytest.approx(10.0)
    assert math.isnan(gains[1]["gain_vs_all_ul_pct"])  # no baseline goodput: undefined, not infinite
    assert "gain_vs_all_ul_pct" not in rows[0]  # the drop's own row is left as it was
    s = summarise_drops({}, rows[:1] * 2)
    assert s["gain_vs_all_ul_pct"] == pytest.approx(10.0) and s["n_drops"] == 2
