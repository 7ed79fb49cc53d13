"""The testbed with the optimiser in the loop, on the tiny pair (no download)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from multispin.cli import app
from multispin.errors import ConfigError
from multispin.runtime.testbed import TestbedConfig, run_testbed

ROW_KEYS = {"round", "gamma", "rejected", "modes", "power_w", "bandwidth_hz", "payload_bits",
            "uplink_bits", "downlink_bits", "tokens_gained", "comp_latency_s", "comm_latency_s"}


@pytest.mark.parametrize("policy", ["adaptive", "all-dl"])
def test_virtual_clock_run_logs_every_round(tmp_path, policy):
    cfg = TestbedConfig.make(pair="tiny", devices=3, rounds=5, max_new_tokens=200, policy=policy,
                             runner="thread", out=tmp_path)
    res = run_testbed(cfg)
    lines = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert len(lines) == 5 == res.summary["rounds"]
    assert all(ROW_KEYS <= set(row) for row in lines)
    assert res.summary["consistent"] and res.summary["digests_match"]
    assert res.summary["goodput_tokens_per_s"] > 0
    moved = [m for row in lines for m in row["modes"].values()]
    if policy == "all-dl":
        assert set(moved) <= {"dl"}
    # every moved distribution is charged airtime, and only then
    for row in lines:
        assert (row["comm_latency_s"] > 0) == bool(row["modes"])
        for d, m in row["modes"].items():
            assert row["power_w"][d] > 0 and row["bandwidth_hz"][d] > 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["policy"] == policy and set(summary["texts"]) == {"0", "1", "2"}


def test_wall_clock_includes_emulated_airtime(tmp_path):
    cfg = TestbedConfig.make(pair="tiny", devices=2, rounds=3, max_new_tokens=100, clock="wall",
                             runner="thread", out=tmp_path, p_dl_dbm=-20.0)
    res = run_testbed(cfg)
    rows = res.rounds
    airtime = sum(r["comm_latency_s"] for r in rows)
    compute = sum(r["round_wall_s"] for r in rows)
    assert res.summary["goodput_tokens_per_s"] == pytest.approx(res.summary["tokens"] / (compute + airtime))


def test_bad_testbed_values_are_one_line_errors():
    with pytest.raises(ConfigError, match="policy"):
        TestbedConfig.make(policy="greedy")
    with pytest.raises(ConfigError, match="clock"):
        TestbedConfig.make(clock="sundial")


def test_demo_cli_writes_table_and_png(tmp_path):
    res = CliRunner().invoke(app, ["demo", "--pair", "tiny", "--devices", "2", "--max-new-tokens", "12",
                                   "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "demo.png").stat().st_size > 10_000
    for policy in ("adaptive", "all-ul", "all-dl"):
        assert (tmp_path / policy / "summary.json").exists()
    assert "adaptive vs all-ul" in res.output


def test_devices_plan_with_the_measured_acceptance_of_their_draft_and_task():
    from multispin.models.profiles import device_alpha
    from multispin.runtime.testbed import build_scenario, with_measured_acceptance
    from multispin.system.channel import World

    base = build_scenario(TestbedConfig.make(devices=3))
    drafts, tasks = ["q4g64", "q3g32", "q5g64"], ["chat", "code", "code"]
    scenario, all_measured = with_measured_acceptance(base, "smollm2-135m", drafts, tasks)
    assert all_measured
    expected = [device_alpha("smollm2-135m", d, t) for d, t in zip(drafts, tasks)]
    assert World(scenario).drop.alpha.tolist() == pytest.approx(expected)
    # a pair without shipped profiles keeps the scenario's own (assumed) rates
    same, measured = with_measured_acceptance(base, "tiny", drafts, tasks)
    assert same is base and not measured
