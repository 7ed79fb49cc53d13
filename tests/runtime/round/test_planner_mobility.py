"""The running loop under mobility and noisy pilots: the planner steps the channel process
over each round's actual duration, plans on the estimate and charges the clock on the true channel."""

from __future__ import annotations

import numpy as np
import pytest
from test_planner import WIRE, _iid_pair, _run, _scenario

from multispin.runtime.round.planner import ScenarioPlanner
from multispin.system.channel_process import ChannelProcess


def _mobile(speed_kmh, pilot_snr_db, planning="naive", k=4, seed=2):
    _, _, alpha = _iid_pair(0.8, 1)
    return _scenario([alpha] * k, seed=seed).override(
        {"channel.speed_kmh": speed_kmh, "channel.pilot_snr_db": pilot_snr_db, "channel.planning": planning}
    )


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
    for r, cost in enumerate(planner.clock.rounds):
        state, _ = proc.step(state, r, planner.clock.rounds[r - 1].latency_s if r else 0.0)
        truth = proc.gains(state)
        inst = planner.history[r].instance
        assert np.allclose(inst.gain_ul, truth.gain_ul, rtol=1e-12, atol=0)
        for d, g in cost.gain.items():
            link = truth.gain_ul if cost.modes[d] == "ul" else truth.gain_dl
            assert g == pytest.approx(link[d], rel=1e-12)
    assert planner.clock.goodput_tokens_per_s > 0


def test_noisy_pilots_plan_on_an_estimate_and_perfect_static_pilots_on_the_channel():
    noisy = ScenarioPlanner(_mobile(0.0, 0.0), range(4), WIRE)
    true_ch, seen, _ = noisy._round_channel(0)
    assert not np.allclose(seen.gain_ul, true_ch.gain_ul, rtol=1e-3, atol=0)
    exact = ScenarioPlanner(_mobile(0.0, None), range(4), WIRE)
    true_ch, seen, _ = exact._round_channel(0)
    assert np.allclose(seen.gain_ul, true_ch.gain_ul, rtol=1e-12, atol=0)


def test_a_static_device_keeps_its_channel_and_a_fast_one_does_not():
    still = _run_planner(_mobile(0.0, 20.0), rounds=3)
    gains = [h.instance.gain_ul for h in still.history]
    assert all(np.allclose(g, gains[0], rtol=1e-12, atol=0) for g in gains)
    fast = _run_planner(_mobile(120.0, 20.0), rounds=3)
    gains = [h.instance.gain_ul for h in fast.history]
    assert not np.allclose(gains[1], gains[0], rtol=1e-3, atol=0)


def test_without_channel_fields_the_planner_redraws_independent_blocks_as_before():
    sc = _scenario([0.8] * 4, seed=2)
    planner = ScenarioPlanner(sc, range(4), WIRE)
    assert planner.process is None
    true_ch, seen, post = planner._round_channel(5)
    assert seen is true_ch and post is None
    assert np.array_equal(true_ch.gain_ul, planner.world.channel.draw(5).gain_ul)


# --------------------------------------------------------------------------- the deadline clock


def _scripted(planner, faded_rounds, fade=1e-9):
    """Replace the planner's channel by a script: the planner always sees the preset's round-0
    channel, while the true channel is that channel × ``fade`` in ``faded_rounds`` (a deep fade the
    estimate missed) and the channel itself otherwise."""
    from multispin.system.channel import ChannelState

    good = planner.world.channel.draw(0)
    bad = ChannelState(good.gain_ul * fade, good.gain_dl * fade, good.path_loss)
    planner._round_channel = lambda r: ((bad if r in faded_rounds else good), good, None)
    return good, bad


def _airtime(sc, bits, mode, gain):
    from multispin.system.radio import rate_bps

    r = sc.radio
    return bits / float(
        rate_bps(r.bandwidth_hz, r.p_ul_w if mode == "ul" else r.p_dl_watts, gain, sc.noise_psd_w_per_hz)
    )


def test_the_clock_charges_retransmissions_when_a_correction_misses_its_deadline():
    deadline = 0.05
    sc = _mobile(None, None).override({"channel.correction_deadline_s": deadline})
    target, draft, _ = _iid_pair(0.8, 1)
    planner = ScenarioPlanner(sc, range(4), WIRE, policy="adaptive")
    good, _ = _scripted(planner, faded_rounds={0})
    _run(planner, [(target, draft)] * 4, rounds=3)
    r0, r1, r2 = planner.clock.rounds
    assert r0.modes, "the script must make round 0 reject someone"
    # round 0: every correction meets the faded channel and is cut at the deadline
    assert r0.deferred_bits == r0.charged_bits and r0.comm_latency_s == pytest.approx(deadline)
    assert r0.retransmission_s == 0.0
    # round 1: they are resent on round 1's (good) channel, and the clock charges that airtime too
    expected = sum(
        _airtime(sc, b, r0.modes[d], (good.gain_ul if r0.modes[d] == "ul" else good.gain_dl)[d])
        for d, b in r0.deferred_bits.items()
    )
    assert r1.retransmitted_bits == r0.deferred_bits
    assert r1.retransmission_s == pytest.approx(expected, rel=1e-12)
    own = max((_airtime_of(planner, r1, d) for d in r1.modes), default=0.0)
    assert r1.comm_latency_s == pytest.approx(min(own, deadline) + expected, rel=1e-9)
    assert not r2.retransmitted_bits  # delivered in round 1: nothing left to resend


def _airtime_of(planner, cost, d):
    """The airtime the round's own decision gives device d (its logged bits, power, bandwidth, gain)."""
    from multispin.system.radio import rate_bps

    b = cost.bandwidth_hz[d]
    return cost.charged_bits[d] / float(rate_bps(b, cost.power_w[d], cost.gain[d], planner.scenario.noise_psd_w_per_hz))


def test_without_a_deadline_a_deep_fade_stalls_the_round_and_nothing_is_resent():
    """Negative control of the deadline clock: the same script without a deadline charges the full
    airtime of the faded round and resends nothing."""
    target, draft, _ = _iid_pair(0.8, 1)
    planner = ScenarioPlanner(_mobile(None, None), range(4), WIRE, policy="adaptive")
    _scripted(planner, faded_rounds={0})
    _run(planner, [(target, draft)] * 4, rounds=2)
    r0, r1 = planner.clock.rounds
    assert r0.comm_latency_s > 100 * 0.05 and not r0.deferred_bits
    assert r1.retransmission_s == 0.0 and not r1.retransmitted_bits
