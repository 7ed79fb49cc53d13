"""Scenario validation, presets, YAML/TOML loading, overrides and acceptance profiles."""

from __future__ import annotations

import json
import math

import pytest

from multispin.errors import ConfigError
from multispin.system import get_preset, load_scenario, preset_names, scenario_from_dict
from multispin.system.scenario import DEFAULT_NOISE_FIGURE_DB, load_acceptance_profile, parse_acceptance_profile


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_presets_carry_the_paper_numbers():
    # the paper's and the host's presets first, then those on the shipped measured acceptance
    assert preset_names() == [
        "paper-qwen",
        "paper-r1",
        "paper-qwen-cell-edge",
        "smollm2-cpu",
        "measured-smollm2-a100",
        "measured-smollm2-host",
    ]
    q = get_preset("paper-qwen")
    assert q.devices.count == 20
    assert q.radio.bandwidth_hz == 10e6
    assert q.radio.p_ul_dbm == 10.0
    assert q.radio.p_dl_watts == pytest.approx(4 * q.radio.p_ul_w)  # P^dl / P^ul = 4
    assert q.radio.noise_psd_dbm_per_hz == -174.0 and q.radio.noise_figure_db == DEFAULT_NOISE_FIGURE_DB == 7.0
    assert q.radio.path_loss_db_at_1m == -30.0 and q.radio.path_loss_exponent == 3.5
    assert (q.devices.drop.min_distance_m, q.devices.drop.max_distance_m) == (100.0, 500.0)
    assert q.devices.draft_latency_s_per_token == pytest.approx(0.0152)
    assert q.devices.draft_latency_jitter_max == pytest.approx(1.15)
    assert (q.compute.t_ver0_s, q.compute.t_ver1_s, q.compute.t_ver_tok_s) == pytest.approx((0.0428, 0.0076, 0.0))
    assert q.payload.payload_bits == 34_816  # 1024 · (18 + 16), signalling off as in the paper
    assert q.optimizer.gamma_max == 20 and q.optimizer.n_saa == 1000
    r = get_preset("paper-r1")
    assert r.devices.draft_latency_s_per_token == pytest.approx(0.0196)
    assert (r.compute.t_ver0_s, r.compute.t_ver1_s) == pytest.approx((0.0693, 0.0091))


@pytest.mark.parametrize("name", ["paper-qwen", "paper-r1"])
def test_preset_acceptance_is_marked_assumed_and_in_the_reported_range(name):
    sc = get_preset(name)
    assert sc.tasks.assumed is True
    assert "ASSUMED" in sc.tasks.source
    assert set(sc.tasks.acceptance) == {"humaneval", "gsm8k", "mt_bench", "ifeval"}
    assert all(0.82 <= a <= 0.95 for a in sc.tasks.acceptance.values())


def test_signalling_bits_switch():
    sc = get_preset("paper-qwen").override({"payload.count_signalling_bits": True})
    assert sc.payload.payload_bits == 34_816 + 18
    assert sc.payload.draft_upload_bits_per_token == 18 + 16


def test_yaml_and_toml_start_from_a_preset(tmp_path):
    y = tmp_path / "s.yaml"
    y.write_text("preset: paper-r1\ndevices:\n  count: 5\nradio:\n  p_dl_w: 0.16\nseed: 7\n")
    sc = load_scenario(y)
    assert sc.name == "paper-r1" and sc.devices.count == 5 and sc.seed == 7
    assert sc.radio.p_dl_w == 0.16 and sc.radio.p_dl_dbm is None  # the other unit is dropped
    assert sc.compute.t_ver0_s == pytest.approx(0.0693)
    t = tmp_path / "s.toml"
    t.write_text('preset = "paper-qwen"\n[radio]\nbandwidth_hz = 20e6\n[optimizer]\nn_saa = 50\n')
    sc = load_scenario(t)
    assert sc.radio.bandwidth_hz == 20e6 and sc.optimizer.n_saa == 50 and sc.devices.count == 20


def test_full_scenario_without_preset(tmp_path):
    data = {
        "devices": {
            "count": 3,
            "distances_m": [100, 200, 300],
            "acceptance": [0.9, 0.8, 0.85],
            "draft_latency_s_per_token": 0.01,
        },
        "tasks": {"acceptance": {"chat": 0.9}},
        "radio": {"bandwidth_hz": 1e6, "p_ul_dbm": 20, "p_dl_dbm": 30},
        "compute": {"t_ver0_s": 0.04, "t_ver1_s": 0.01},
    }
    sc = scenario_from_dict(data)
    assert sc.devices.distances_m == [100, 200, 300]
    p = tmp_path / "s.json"
    p.write_text(json.dumps(data))
    assert load_scenario(p) == sc


@pytest.mark.parametrize(
    "data, field, allowed",
    [
        ({"preset": "paper-qwen", "radio": {"bandwidth_hz": -1e6}}, "radio.bandwidth_hz", "(0, 1e+12] Hz"),
        ({"preset": "paper-qwen", "tasks": {"acceptance": {"gsm8k": 1.2}}}, "tasks.acceptance.gsm8k", "(0, 1)"),
        ({"preset": "paper-qwen", "tasks": {"acceptance": {"gsm8k": 0.0}}}, "tasks.acceptance.gsm8k", "(0, 1)"),
        ({"preset": "paper-qwen", "devices": {"acceptance": [0.9] * 19 + [1.0]}}, "devices.acceptance.19", "(0, 1)"),
        ({"preset": "paper-qwen", "radio": {"p_dl_w": -0.5}}, "radio.p_dl_w", "[0, 10000] W"),
        ({"preset": "paper-qwen", "devices": {"count": 0}}, "devices.count", "[1, 100000]"),
        ({"preset": "paper-qwen", "radio": {"noise_figure_db": -3}}, "radio.noise_figure_db", "[0, 40] dB"),
        ({"preset": "paper-qwen", "compute": {"t_ver0_s": -0.01}}, "compute.t_ver0_s", "[0, inf) s"),
        ({"preset": "paper-qwen", "optimizer": {"gamma_max": 100}}, "optimizer.gamma_max", "[1, 64]"),
        ({"preset": "paper-qwen", "radio": {"fading": "rician"}}, "radio.fading", "rayleigh"),
    ],
)
def test_bad_values_give_one_line_naming_field_and_range(data, field, allowed):
    with pytest.raises(ConfigError) as exc:
        scenario_from_dict(data)
    msg = _one_line(exc)
    assert msg.startswith(field + ":"), msg
    assert allowed in msg, msg


def test_missing_field_names_it_and_its_range():
    data = {
        "devices": {"count": 3, "draft_latency_s_per_token": 0.01},
        "tasks": {"acceptance": {"chat": 0.9}},
        "radio": {"p_ul_dbm": 20, "p_dl_dbm": 30},
        "compute": {"t_ver0_s": 0.04, "t_ver1_s": 0.01},
    }
    with pytest.raises(ConfigError) as exc:
        scenario_from_dict(data)
    msg = _one_line(exc)
    assert msg.startswith("radio.bandwidth_hz: Field required") and "(0, 1e+12] Hz" in msg


def test_unknown_preset_and_unknown_field():
    with pytest.raises(ConfigError) as exc:
        get_preset("paper-llama")
    assert _one_line(exc) == (
        "preset: unknown preset 'paper-llama' (allowed: paper-qwen, paper-r1, paper-qwen-cell-edge, smollm2-cpu, "
        "measured-smollm2-a100, measured-smollm2-host)"
    )
    with pytest.raises(ConfigError) as exc:
        scenario_from_dict({"preset": "nope"})
    assert "allowed: paper-qwen, paper-r1" in _one_line(exc)
    with pytest.raises(ConfigError) as exc:
        scenario_from_dict({"preset": "paper-qwen", "radio": {"bandwith_hz": 1e6}})
    assert _one_line(exc).startswith("radio.bandwith_hz:")


def test_inconsistent_lists_and_both_dl_units():
    with pytest.raises(ConfigError) as exc:
        scenario_from_dict({"preset": "paper-qwen", "devices": {"distances_m": [100.0, 200.0]}})
    assert "devices.distances_m" in _one_line(exc) and "20" in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        scenario_from_dict({"preset": "paper-qwen", "radio": {"p_dl_w": 0.1, "p_dl_dbm": 20}})
    assert "p_dl_dbm" in _one_line(exc)
    with pytest.raises(ConfigError):
        scenario_from_dict({"preset": "paper-qwen", "devices": {"tasks": ["poetry"] * 20}})


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_scenario(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("devices: [unclosed\n")
    with pytest.raises(ConfigError, match="cannot parse"):
        load_scenario(bad)
    other = tmp_path / "s.ini"
    other.write_text("x")
    with pytest.raises(ConfigError, match="unknown file type"):
        load_scenario(other)


def test_override_by_dotted_name():
    sc = get_preset("paper-qwen").override({"devices.count": 8, "radio.p_dl_dbm": 22.0, "seed": 3})
    assert sc.devices.count == 8 and sc.radio.p_dl_dbm == 22.0 and sc.seed == 3
    w = get_preset("paper-qwen").override({"radio.p_dl_w": 0.0})
    assert w.radio.p_dl_watts == 0.0 and math.isinf(w.radio.p_dl_dbm_value)
    with pytest.raises(ConfigError):
        get_preset("paper-qwen").override({"nothing.here": 1})


def test_acceptance_profile_json(tmp_path):
    # the shape `multispin measure --out` writes (one task per file), and a plain table
    a = tmp_path / "gsm8k.json"
    a.write_text(json.dumps({"pair": "x", "alpha": 0.91, "tasks": {"gsm8k": {"alpha": 0.91, "num_tokens": 500}}}))
    b = tmp_path / "code.json"
    b.write_text(json.dumps({"tasks": {"humaneval": 0.88, "chat": {"token_acceptance_rate": 0.8}}}))
    assert load_acceptance_profile(a) == {"gsm8k": 0.91}
    sc = get_preset("paper-qwen").with_acceptance_profile([a, b])
    assert sc.tasks.assumed is False
    assert sc.tasks.acceptance == {"gsm8k": 0.91, "humaneval": 0.88, "chat": 0.8}
    assert str(a) in sc.tasks.source
    with pytest.raises(ConfigError, match=r"acceptance_profile.tasks.chat: must be in \(0, 1\)"):
        parse_acceptance_profile({"tasks": {"chat": 1.5}})
    with pytest.raises(ConfigError, match="acceptance_profile.tasks"):
        parse_acceptance_profile({"alpha": 0.9})


def test_compute_profile_json(tmp_path):
    prof = {
        "pair": "x",
        "draft_latency_s_per_token": {"smollm2-135m": 0.004},
        "t_ver0_s": 0.02,
        "t_ver1_s": 0.003,
        "t_ver_tok_s": 0.0004,
        "r2": 0.99,
    }
    p = tmp_path / "compute.json"
    p.write_text(json.dumps(prof))
    sc = get_preset("paper-qwen").with_compute_profile(p)
    assert (sc.compute.t_ver0_s, sc.compute.t_ver1_s, sc.compute.t_ver_tok_s) == (0.02, 0.003, 0.0004)
    assert sc.devices.draft_latency_s_per_token == 0.004
    two = dict(prof, draft_latency_s_per_token={"a": 0.004, "b": 0.006})
    # several drafts and none named: the devices take them in turn
    cycled = get_preset("paper-qwen").with_compute_profile(two).devices
    assert cycled.draft_latencies_s_per_token == [0.004, 0.006] * 10
    with pytest.raises(ConfigError, match="no draft 'c' .allowed: a, b"):
        get_preset("paper-qwen").with_compute_profile(two, draft="c")
    assert get_preset("paper-qwen").with_compute_profile(two, draft="b").devices.draft_latency_s_per_token == 0.006
    with pytest.raises(ConfigError, match="compute.t_ver0_s"):
        get_preset("paper-qwen").with_compute_profile({"t_ver0_s": -1.0, "t_ver1_s": 0.0})
