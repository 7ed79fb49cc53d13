"""Your own models in the testbed (docs/own-models.md): `--acceptance-profile` and
`--compute-profile` reach the planner and the forecast, a profile of another pair is refused in
one line, and wherever the forecast cannot be read as a check of the model it says why (α
assumed, compute of another host, channel-estimation error); its 95% range for one run comes from
the spread of the forecast's replicas."""

from __future__ import annotations

import json

import numpy as np
import pytest

from multispin.errors import ConfigError
from multispin.experiments import testbed as tb
from multispin.experiments.forecast import one_run_range
from multispin.experiments.run_summary import forecast_caveats
from multispin.experiments.testbed import TestbedConfig, run_testbed
from multispin.models.registry import resolve_pair

BASE = {
    "pair": "tiny",
    "clock": "virtual",
    "measured": True,
    "compute_profile": None,
    "compute_profile_r2": None,
    "channel": {"speed_kmh": None, "pilot_snr_db": None, "planning": "naive"},
    "forecast_compute": {
        "scenario": "paper-qwen",
        "t_ver0_s": 0.01,
        "t_ver1_s": 0.001,
        "draft_latency_s_per_token": 0.002,
    },
}


def test_a_checked_forecast_has_no_caveat_and_each_cause_is_named():
    assert forecast_caveats(**BASE) == []  # negative control: nothing to say
    assert forecast_caveats(**{**BASE, "measured": False})[0].startswith("α assumed")
    wall = forecast_caveats(**{**BASE, "clock": "wall"})
    assert len(wall) == 1 and wall[0].startswith("compute of another host")
    assert forecast_caveats(**{**BASE, "clock": "wall", "compute_profile": "c.json"}) == []
    poor = forecast_caveats(**{**BASE, "compute_profile": "c.json", "compute_profile_r2": 0.02})
    assert len(poor) == 1 and poor[0].startswith("compute profile of poor fit")
    csi = forecast_caveats(**{**BASE, "channel": {"speed_kmh": 3.0, "pilot_snr_db": 10.0, "planning": "robust"}})
    assert len(csi) == 1 and csi[0].startswith("channel knowledge")
    coupled = forecast_caveats(**{**BASE, "coupled_assumed": True})
    assert len(coupled) == 1 and coupled[0].startswith("coupled α assumed")


def test_the_one_run_range_is_the_replicas_spread_around_the_forecast():
    g = [10.0, 12.0, 11.0, 13.0, 9.0]
    r = one_run_range(g, 11.0)
    half = 1.96 * float(np.std(g, ddof=1))
    assert r["forecast_one_run_low"] == pytest.approx(11.0 - half) and r["forecast_one_run_high"] == pytest.approx(
        11.0 + half
    )
    # too few replicas (a makespan forecast is one): no range rather than a made-up one
    assert one_run_range([10.0, 12.0], 11.0) == {"forecast_one_run_low": None, "forecast_one_run_high": None}


def _profile(tmp_path, pair, vocab, alpha, task="chat"):
    path = tmp_path / f"acc-{pair}-{task}.json"
    path.write_text(json.dumps({"pair": pair, "vocab_size": vocab, "task": task, "tasks": {task: alpha}}))
    return str(path)


def test_the_profile_sets_each_devices_alpha_by_task_and_another_pairs_is_refused(tmp_path):
    pair = resolve_pair("tiny")
    chat, code = _profile(tmp_path, "tiny", 256, 0.61), _profile(tmp_path, "tiny", 256, 0.37, "code")
    cfg = TestbedConfig.make(pair="tiny", devices=4, tasks="mixed", acceptance_profile=[chat, code])
    setup = tb.testbed_setup(cfg, pair)
    alpha = dict(zip(setup.tasks, setup.scenario.devices.acceptance))
    assert setup.measured and alpha == {"chat": 0.61, "code": 0.37}
    # a task the profiles lack keeps the scenario's (assumed) α and the run says so
    only_chat = tb.testbed_setup(
        TestbedConfig.make(pair="tiny", devices=4, tasks="mixed", acceptance_profile=[chat]), pair
    )
    assert not only_chat.measured
    other = _profile(tmp_path, "smollm2-135m", 49152, 0.7)
    with pytest.raises(
        ConfigError, match=r"acceptance_profile: measured on pair 'smollm2-135m' \(V = 49,152\).*'tiny'"
    ):
        tb.testbed_setup(TestbedConfig.make(pair="tiny", devices=2, acceptance_profile=[other]), pair)


def test_a_compute_profile_times_the_clock(tmp_path):
    path = tmp_path / "compute.json"
    path.write_text(json.dumps({"pair": "tiny", "vocab_size": 256, "t_ver0_s": 0.123, "t_ver1_s": 0.004}))
    setup = tb.testbed_setup(
        TestbedConfig.make(pair="tiny", devices=2, compute_profile=str(path)), resolve_pair("tiny")
    )
    assert setup.scenario.compute.t_ver0_s == 0.123 and setup.scenario.compute.t_ver1_s == 0.004


@pytest.mark.integration
def test_a_run_with_the_users_profile_has_an_unlabelled_forecast_with_a_range(tmp_path):
    chat, code = _profile(tmp_path, "tiny", 256, 0.8), _profile(tmp_path, "tiny", 256, 0.7, "code")
    common = dict(pair="tiny", devices=2, rounds=4, max_new_tokens=16, runner="thread", n_saa=20)
    assumed = run_testbed(TestbedConfig.make(**common)).summary
    assert assumed.caveats and assumed.caveats[0].startswith("α assumed")
    s = run_testbed(TestbedConfig.make(**common, acceptance_profile=[chat, code])).summary
    assert s.acceptance.measured and s.caveats == [] and s.forecast is not None
    assert s.forecast.one_run_low < s.forecast.tokens_per_s < s.forecast.one_run_high
