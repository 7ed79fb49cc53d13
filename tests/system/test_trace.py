"""Channel traces (``channel.trace``, system/trace.py): per-device, per-round gains from a CSV
replace the scenario's channel in the model (optimize, sweep) and in the running system, where a
trace-driven testbed run's rounds.jsonl holds the trace's gains."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import multispin as ms
from multispin.errors import ConfigError
from multispin.system.channel import World
from multispin.system.trace import load_trace, write_trace


def make_trace(path: Path, rounds: int = 7, devices: int = 3, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    base = -100 + 6 * rng.standard_normal(devices)
    ul = base + 10 * np.log10(rng.exponential(1.0, (rounds, devices)))
    dl = base + 10 * np.log10(rng.exponential(1.0, (rounds, devices)))
    write_trace(path, ul, dl)
    return ul, dl


def test_the_model_takes_each_rounds_gains_from_the_trace_and_cycles(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ul, dl = make_trace(Path("t.csv"))
    sc = ms.scenario("paper-r1", devices=3, fields={"channel.trace": "t.csv"})
    world = World(sc)
    for r in (0, 3, 7 + 2):  # round 9 is trace round 2
        inst = world.instance(r)
        np.testing.assert_allclose(10 * np.log10(inst.gain_ul), ul[r % 7], rtol=0, atol=1e-9)
        np.testing.assert_allclose(10 * np.log10(inst.gain_dl), dl[r % 7], rtol=0, atol=1e-9)
    # negative control: without the trace the same scenario draws other gains
    plain = World(ms.scenario("paper-r1", devices=3)).instance(0)
    assert not np.allclose(10 * np.log10(plain.gain_ul), ul[0])
    assert ms.plan(sc, round_index=2).to_dict()  # optimize plans on it


@pytest.mark.parametrize(
    "text,says",
    [
        ("round,device\n0,0\n", "header must name round, device, gain_ul_db"),
        ("round,device,gain_ul_db\n0,0,-90\n0,0,-91\n", "round 0, device 0 appears twice"),
        ("round,device,gain_ul_db\n0,0,-90\n1,1,-91\n", "no line for round 0, device 1"),
        ("round,device,gain_ul_db\n0,0,abc\n", "t.csv:2: gain_ul_db must be a number"),
        ("round,device,gain_ul_db\n0,0,12\n", "t.csv:2: gain_ul_db must be a power gain in dB"),
    ],
)
def test_a_bad_trace_is_one_line_naming_file_and_line(tmp_path, text, says):
    (tmp_path / "t.csv").write_text(text)
    with pytest.raises(ConfigError, match=says):
        load_trace(tmp_path / "t.csv")


def test_the_device_count_must_match_and_the_channel_process_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_trace(Path("t.csv"), devices=3)
    with pytest.raises(ConfigError, match="holds 3 device"):
        ms.scenario("paper-r1", devices=4, fields={"channel.trace": "t.csv"})
    with pytest.raises(ConfigError, match="the trace replaces the channel process"):
        ms.scenario("paper-r1", devices=3, fields={"channel.trace": "t.csv", "channel.pilot_snr_db": 10})


@pytest.mark.integration
def test_a_trace_driven_testbed_run_reproduces_the_traces_gains(tmp_path, monkeypatch):
    from multispin.experiments.testbed import TestbedConfig, run_testbed

    monkeypatch.chdir(tmp_path)
    ul, dl = make_trace(Path("t.csv"), rounds=4)
    Path("k3.yaml").write_text("preset: paper-qwen\ndevices:\n  count: 3\nchannel:\n  trace: t.csv\n")
    cfg = TestbedConfig.make(
        pair="tiny", scenario="k3.yaml", devices=3, rounds=6, max_new_tokens=16, runner="thread", n_saa=20, out="run"
    )
    run_testbed(cfg)
    rows = [json.loads(line) for line in Path("run/rounds.jsonl").read_text().splitlines()]
    checked = 0  # a steady-state job id d runs on device slot d mod K (its channel)
    for row in rows:
        for d, gain in row["gain"].items():
            trace = ul if row["modes"][d] == "ul" else dl
            assert 10 * np.log10(gain) == pytest.approx(trace[row["round"] % 4, int(d) % 3], abs=1e-9)
            checked += 1
    assert len(rows) == 6 and checked >= 3
