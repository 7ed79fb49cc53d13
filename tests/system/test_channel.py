"""Device drop, block fading per round, and the Instance built from a scenario."""

from __future__ import annotations

import numpy as np
import pytest

from multispin.system import World, build_instance, drop_devices, get_preset
from multispin.system.channel import stream
from multispin.system.radio import path_loss_linear


def test_drop_is_deterministic_and_within_the_rule():
    sc = get_preset("paper-qwen").override({"devices.count": 200})
    a, b = drop_devices(sc), drop_devices(sc)
    assert np.array_equal(a.distance_m, b.distance_m) and a.task == b.task
    assert np.all((a.distance_m >= 100) & (a.distance_m <= 500))
    assert np.all((a.draft_latency_s >= 0.0152) & (a.draft_latency_s <= 0.0152 * 1.15))
    assert set(a.task) == set(sc.tasks.acceptance)
    assert np.array_equal(a.alpha, [sc.tasks.acceptance[t] for t in a.task])
    assert a.acceptance_assumed
    c = drop_devices(sc.override({"seed": 1}))
    assert not np.array_equal(a.distance_m, c.distance_m)


def test_explicit_lists_override_the_draws():
    sc = get_preset("paper-qwen").override(
        {
            "devices.count": 2,
            "devices.distances_m": [150.0, 250.0],
            "devices.acceptance": [0.5, 0.6],
            "devices.draft_latencies_s_per_token": [0.01, 0.02],
        }
    )
    d = drop_devices(sc)
    assert d.distance_m.tolist() == [150.0, 250.0] and d.alpha.tolist() == [0.5, 0.6]
    assert d.draft_latency_s.tolist() == [0.01, 0.02] and not d.acceptance_assumed


def test_uniform_area_drop_is_farther_on_average():
    base = get_preset("paper-qwen").override({"devices.count": 4000})
    area = base.override({"devices.drop": {"kind": "uniform_area", "min_distance_m": 100, "max_distance_m": 500}})
    d_lin, d_area = drop_devices(base).distance_m, drop_devices(area).distance_m
    # E[d] = 300 m for uniform distance; 2/3·(500³−100³)/(500²−100²) ≈ 344 m for uniform area
    assert abs(d_lin.mean() - 300) < 6 and abs(d_area.mean() - 344.4) < 6


def test_block_fading_per_round():
    w = World(get_preset("paper-qwen"))
    r0, r0b, r1 = w.channel.draw(0), w.channel.draw(0), w.channel.draw(1)
    assert np.array_equal(r0.gain_ul, r0b.gain_ul)  # a pure function of (seed, round)
    assert not np.array_equal(r0.gain_ul, r1.gain_ul)
    assert np.array_equal(r0.gain_ul, r0.gain_dl)  # reciprocity
    assert np.array_equal(r0.path_loss, r1.path_loss)  # distances fixed


def test_rayleigh_power_gain_is_exponential_with_mean_one():
    sc = get_preset("paper-qwen").override({"devices.count": 50_000, "devices.distances_m": None})
    w = World(sc)
    f = w.channel.draw(3).gain_ul / w.channel.path_loss
    assert abs(f.mean() - 1) < 0.02 and abs(f.var() - 1) < 0.05
    assert abs(np.mean(f < 0.01) - (1 - np.exp(-0.01))) < 0.002  # deep fades are there
    x = np.sort(f)
    ks = np.max(np.abs(np.arange(1, x.size + 1) / x.size - (1 - np.exp(-x))))  # Kolmogorov–Smirnov
    assert ks < 1.63 / np.sqrt(x.size)  # 1% level


def test_no_reciprocity_and_no_fading():
    sc = get_preset("paper-qwen").override({"radio.reciprocity": False})
    ch = World(sc).channel.draw(0)
    assert not np.array_equal(ch.gain_ul, ch.gain_dl)
    assert np.allclose(np.log(ch.gain_ul / ch.gain_dl).mean(), 0, atol=1.0)
    flat = World(get_preset("paper-qwen").override({"radio.fading": "none"}))
    assert np.allclose(flat.channel.draw(5).gain_ul, flat.channel.path_loss)


def test_path_loss_law():
    assert path_loss_linear(1.0) == pytest.approx(1e-3)
    assert path_loss_linear(100.0) == pytest.approx(1e-3 * 100**-3.5)


def test_instance_from_scenario():
    sc = get_preset("paper-qwen")
    inst = build_instance(sc, 2)
    w = World(sc)
    assert np.array_equal(inst.gain_ul, w.channel.draw(2).gain_ul)
    assert inst.num_devices == 20 and inst.gamma_max == 20
    assert np.all(inst.payload_bits == 34_816)
    assert inst.radio.p_ul_w == pytest.approx(0.01) and inst.radio.p_dl_w == pytest.approx(0.04)
    assert inst.radio.noise_psd_w_per_hz == pytest.approx(10 ** (-17.4) * 1e-3)
    assert inst.draft_upload_bits_per_token == 0
    assert np.array_equal(inst.token_latency_s, inst.draft_latency_s)
    u = w.saa_uniforms(2)
    assert u.shape == (1000, 20) and np.array_equal(u, World(sc).saa_uniforms(2))
    assert not np.array_equal(u, w.saa_uniforms(3))


def test_signalling_adds_upload_time_per_drafted_token():
    sc = get_preset("paper-qwen").override({"payload.count_signalling_bits": True})
    inst = build_instance(sc)
    extra = inst.token_latency_s - inst.draft_latency_s
    assert np.all(extra > 0) and np.all(extra < 1e-3)  # 34 bits at ≳ 100 kbit/s


def test_streams_are_independent():
    a = stream(0, "saa").random(5)
    b = stream(0, "modes").random(5)
    assert not np.allclose(a, b)
