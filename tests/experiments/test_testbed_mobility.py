"""The testbed under mobility and noisy pilots, on the tiny pair (no download): the
clock charges the airtime of the logged bits at the true channel, which the replayed channel
process gives back round by round."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_testbed import AIRTIME_RUN, _airtime_errors

from multispin.experiments.testbed import TestbedConfig, build_scenario, run_testbed
from multispin.system.channel import World
from multispin.system.channel_process import ChannelProcess

# real sockets, processes or models: `make test-fast` leaves these out
pytestmark = pytest.mark.integration


@pytest.mark.parametrize("planning", ["naive", "robust"])
def test_testbed_runs_with_mobility_and_charges_the_true_channel(tmp_path, planning):
    cfg = TestbedConfig.make(
        **{**AIRTIME_RUN, "policy": "adaptive"}, speed_kmh=3.0, pilot_snr_db=5.0, csi_planning=planning, out=tmp_path
    )
    res = run_testbed(cfg)
    rows = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert res.summary.integrity.consistent and res.summary.goodput_tokens_per_s > 0
    assert res.summary.channel == {
        "speed_kmh": 3.0,
        "carrier_hz": 3.5e9,
        "pilot_snr_db": 5.0,
        "planning": planning,
        "correction_deadline_s": None,
        "trace": None,
    }
    assert max(_airtime_errors(rows, res.summary.noise_psd_w_per_hz)) < 1e-9
    # the logged gains are the process's blocks, each aged over the previous round's charged duration
    sc = build_scenario(cfg)
    proc = ChannelProcess(sc, World(sc).drop.distance_m)
    state, moved = None, 0
    for r, row in enumerate(rows):
        prev_s = rows[r - 1]["comp_latency_s"] + rows[r - 1]["comm_latency_s"] if r else 0.0
        state, _ = proc.step(state, r, prev_s)
        truth = proc.gains(state)
        for d, g in row["gain"].items():
            link = truth.gain_ul if row["modes"][d] == "ul" else truth.gain_dl
            assert g == pytest.approx(float(link[int(d) % cfg.devices]), rel=1e-12)  # job ids k + K·j
            moved += 1
    assert moved > 0
    assert not np.isclose(proc.rho(0.3), 1.0)  # 3 km/h at 3.5 GHz: the channel changed between rounds


def test_demo_passes_the_channel_flags_to_every_testbed_run(tmp_path):
    from multispin.experiments.demo import DemoConfig

    demo = DemoConfig.make(pair="tiny", speed_kmh=30.0, pilot_snr_db=10.0, csi_planning="robust", out=tmp_path)
    sc = build_scenario(demo.testbed("all_dl", 3, None, tmp_path))
    assert (sc.channel.speed_kmh, sc.channel.pilot_snr_db, sc.channel.planning) == (30.0, 10.0, "robust")
    assert build_scenario(DemoConfig.make(pair="tiny").testbed("adaptive", 0, None, tmp_path)).channel.speed_kmh is None
