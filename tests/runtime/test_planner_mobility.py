"""The running loop under mobility and noisy pilots (issue 26): the planner steps the channel process
over each round's actual duration, plans on the estimate and charges the clock on the true channel."""

from __future__ import annotations

import numpy as np
import pytest

from multispin.runtime.planner import ScenarioPlanner
from multispin.system.channel_process import ChannelProcess

from test_planner import WIRE, _iid_pair, _run, _scenario


def _mobile(speed_kmh, pilot_snr_db, planning="naive", k=4, seed=2):
    _, _, alpha = _iid_pair(0.8, 1)
    return _scenario([alpha] * k, seed=seed).override({
        "channel.speed_kmh": speed_kmh, "channel.pilot_snr_db": pilot_snr_db, "channel.planning": planning})


def _run_planner(sc, rounds=5):
    target, draft, _ = _iid_pair(0.8, 1)
    planner = ScenarioPlanner(sc, range(sc.devices.count), WIRE, policy="adaptive")
    _run(planner, [(target, draft)] * sc.devices.count, rounds=rounds)
    return planner


@pytest.mark.parametrize("planning", ["naive", "robust"])
def test_the_clock_charges_the_true_channel_aged_over_each_rounds_duration(planning):
    sc = _mobile(3.0, 0.0, planning)
    planner = _run_planner(sc)
    # replay the process with the durations the clock recorded: the charged gains are its blocks
    proc = ChannelProcess(sc, planner.world.drop.distance_m)
    state = None
    for r, cost in enumerate(planner.rounds):
        state, _ = proc.step(state, r, planner.rounds[r - 1].latency_s if r else 0.0)
        truth = proc.gains(state)
        inst = planner.history[r][0]
        assert np.allclose(inst.gain_ul, truth.gain_ul, rtol=1e-12, atol=0)
        for d, g in cost.gain.items():
            link = truth.gain_ul if cost.modes[d] == "ul" else truth.gain_dl
            assert g == pytest.approx(link[d], rel=1e-12)
    assert planner.goodput_tokens_per_s > 0


def test_noisy_pilots_plan_on_an_estimate_and_perfect_static_pilots_on_the_channel():
    noisy = ScenarioPlanner(_mobile(0.0, 0.0), range(4), WIRE)
    true_ch, seen, _ = noisy._round_channel(0)
    assert not np.allclose(seen.gain_ul, true_ch.gain_ul, rtol=1e-3, atol=0)
    exact = ScenarioPlanner(_mobile(0.0, None), range(4), WIRE)
    true_ch, seen, _ = exact._round_channel(0)
    assert np.allclose(seen.gain_ul, true_ch.gain_ul, rtol=1e-12, atol=0)


def test_a_static_device_keeps_its_channel_and_a_fast_one_does_not():
    still = _run_planner(_mobile(0.0, 20.0), rounds=3)
    gains = [h[0].gain_ul for h in still.history]
    assert all(np.allclose(g, gains[0], rtol=1e-12, atol=0) for g in gains)
    fast = _run_planner(_mobile(120.0, 20.0), rounds=3)
    gains = [h[0].gain_ul for h in fast.history]
    assert not np.allclose(gains[1], gains[0], rtol=1e-3, atol=0)


def test_without_channel_fields_the_planner_redraws_independent_blocks_as_before():
    sc = _scenario([0.8] * 4, seed=2)
    planner = ScenarioPlanner(sc, range(4), WIRE)
    assert planner.process is None
    true_ch, seen, post = planner._round_channel(5)
    assert seen is true_ch and post is None
    assert np.array_equal(true_ch.gain_ul, planner.world.channel.draw(5).gain_ul)
