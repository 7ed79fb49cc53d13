"""The coupled policies through the running testbed (tiny pair): `all_coupled` verifies every
device coupled and moves no correction, `three_way` lets the planner choose per device and round;
the coupled texts are the target's Gumbel-max decoding whatever the plan, and the rows say which
devices were coupled."""

from __future__ import annotations

import json

import pytest

from multispin.experiments.testbed import TestbedConfig, run_testbed
from multispin.vocabulary import POLICY_VERIFY, RUN_POLICIES, policy_links, policy_verify

pytestmark = pytest.mark.integration


def _run(tmp_path, policy: str, devices: int = 3, rounds: int = 8):
    cfg = TestbedConfig.make(
        pair="tiny", devices=devices, rounds=rounds, max_new_tokens=48, policy=policy, runner="thread", out=tmp_path
    )
    res = run_testbed(cfg)
    rows = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    return res, rows


def test_the_policies_are_words_of_the_vocabulary():
    assert {"three_way", "all_coupled"} <= set(RUN_POLICIES)
    assert policy_verify("three_way") == "choose" and policy_verify("all_coupled") == "coupled"
    assert policy_verify("adaptive") == "standard" == policy_verify("all_dl")
    assert set(POLICY_VERIFY) == {"three_way", "all_coupled"}
    assert policy_links("all_coupled") == ()  # nothing is ever corrected over the air


def test_all_coupled_moves_no_correction_and_every_drafting_device_is_coupled(tmp_path):
    res, rows = _run(tmp_path / "c", "all_coupled")
    assert res.summary.integrity.records_match
    for row in rows:
        assert row["modes"] == {} and row["comm_latency_s"] == 0.0 and not any(row["charged_bits"].values())
        assert {int(d) for d, g in row["gamma"].items() if g > 0} <= set(row["coupled"])
    assert res.summary.figures.coupled_share == pytest.approx(1.0)
    # control: the paper's adaptive run on the same seed verifies nobody coupled
    res_a, rows_a = _run(tmp_path / "a", "adaptive")
    assert res_a.summary.figures.coupled_share == 0.0 and all(row["coupled"] == [] for row in rows_a)


def test_three_way_chooses_per_device_and_its_share_is_what_the_rows_say(tmp_path):
    res, rows = _run(tmp_path, "three_way", devices=4, rounds=10)
    assert res.summary.integrity.records_match
    drafting = [(row, int(d)) for row in rows for d, g in row["gamma"].items() if g > 0]
    coupled = sum(1 for row, d in drafting if d in row["coupled"])
    assert res.summary.figures.coupled_share == pytest.approx(coupled / len(drafting))
    for row in rows:  # a coupled device is never corrected nor charged a correction
        assert not set(row["modes"]) & {str(d) for d in row["coupled"]}
