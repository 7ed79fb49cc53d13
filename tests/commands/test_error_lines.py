"""Every error line names what the user typed and what it expects.

A missing required option or argument of every verb names itself and what it takes; a
cross-field error is one line naming the fields (never the whole input); a flag's bad value is
reported under the flag, the field in brackets; a scenario file without ``preset:`` suggests
one; a profile of another vocabulary is refused (warned with ``--force``); a poor compute fit
warns."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.main import get_command

from multispin import cli


def _required_params():
    """(command path, the required parameter, every other required parameter) of every verb."""
    out = []

    def walk(cmd, path):
        required = [p for p in cmd.params if p.required]
        for p in required:
            out.append((path, p, [q for q in required if q is not p]))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, path + (name,))

    walk(get_command(cli.app), ())
    return out


REQUIRED = _required_params()


def test_the_verbs_have_required_parameters_to_check():
    names = {(" ".join(path), p.name) for path, p, _ in REQUIRED}
    assert {
        ("keys device", "directory"),
        ("keys server", "directory"),
        ("scenario show", "name"),
    } <= names


@pytest.mark.parametrize("path, param, others", REQUIRED, ids=[f"{' '.join(p)} {q.name}" for p, q, _ in REQUIRED])
def test_missing_required_parameter_names_itself_and_what_it_expects(
    multispin, monkeypatch, tmp_path, path, param, others
):
    monkeypatch.setenv("MULTISPIN_SECRET", "test-secret-0123456789")
    args = list(path)
    for q in others:  # every other required one given, so the line is about `param`
        if q.param_type_name == "argument":
            args.append(str(tmp_path / "dir"))
        else:
            args += [q.opts[0], "0" if q.metavar == "INT" else "x"]
    res = multispin(*args)
    assert res.code == 2 and res.err.count("\n") == 1, res.err
    name = param.opts[0] if param.param_type_name == "option" else param.metavar
    head = f"error: {name}: required ("
    assert res.err.startswith(head), res.err
    expects = res.err[len(head) :].strip().rstrip(")")
    assert len(expects) > 3, res.err  # says what it takes, not `error: --prompt: `


def test_the_reported_cases(multispin, monkeypatch):
    monkeypatch.setenv("MULTISPIN_SECRET", "test-secret-0123456789")
    res = multispin("device", "--server", "127.0.0.1:5999", "--device-id", "0", "--keys", "x")
    assert res.err == "error: --prompt: required (TEXT: this device's prompt)\n"
    # a lone device's id is required where no --devices makes it a pool (so not by the parser)
    res = multispin("device", "--server", "127.0.0.1:5999", "--prompt", "hi", "--keys", "x")
    assert res.err == "error: --device-id: required (INT: this device's id; or --devices IDS for a pool)\n"
    res = multispin("keys", "device", "keys/dev2")
    assert (
        res.err
        == "error: --device-id: required (INT: the device id the key is bound to; or --devices IDS for several, DIR/device-N each)\n"
    )


def test_cross_field_error_is_one_line_naming_the_fields(multispin, tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("preset: paper-qwen\ndevices: {count: 5, distances_m: [100, 200]}\n")
    res = multispin("optimize", "--scenario", str(f))
    assert res.code == 2
    assert res.err == f"error: {f}:2:21: devices.distances_m: needs devices.count = 5 entries (got 2)\n"
    f.write_text("preset: paper-qwen\ndevices.drop: {min_distance_m: 600}\n")
    res = multispin("optimize", "--scenario", str(f))
    assert res.code == 2 and "devices.drop: max_distance_m must be ≥ min_distance_m" in res.err
    assert "{" not in res.err and len(res.err) < 200, res.err  # no dump of the input


def test_a_flag_value_is_reported_under_the_flag(multispin, tmp_path):
    res = multispin("optimize", "--pdl-dbm", "999")
    assert res.err == "error: --pdl-dbm [radio.p_dl_dbm]: must be in [-60, 70] dBm (got 999.0)\n"
    res = multispin("optimize", "--pdl-dbm=999")
    assert res.err.startswith("error: --pdl-dbm [radio.p_dl_dbm]: ")
    # the same value from a file names the file, line and field
    f = tmp_path / "s.yaml"
    f.write_text("preset: paper-qwen\nradio: {p_dl_dbm: 999}\n")
    res = multispin("optimize", "--scenario", str(f))
    assert res.err.startswith(f"error: {f}:2:") and "radio.p_dl_dbm: must be in [-60, 70] dBm" in res.err
    res = multispin("optimize", "--scenario", "nothere.yaml")
    assert res.err == "error: --scenario: no such file 'nothere.yaml'\n"
    res = multispin("optimize", "--compute-profile", "nothere.json")
    assert res.err == "error: --compute-profile: no such file 'nothere.json'\n"


def test_a_file_without_preset_suggests_one(multispin, tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("devices: {count: 5}\n")
    res = multispin("optimize", "--scenario", str(f))
    assert res.code == 2 and res.err.count("\n") == 1
    assert "preset: not given, and tasks, radio, compute are missing" in res.err
    assert "`preset: paper-qwen`" in res.err and "multispin scenario show paper-qwen" in res.err


def _tiny_profiles(tmp_path, r2=0.98):
    comp = tmp_path / "c.json"
    comp.write_text(
        json.dumps(
            {
                "pair": "tiny",
                "vocab_size": 256,
                "t_ver0_s": 0.01,
                "t_ver1_s": 0.001,
                "t_ver_tok_s": 0.0,
                "r2": r2,
                "draft_latency_s_per_token": {"close": 0.001},
            }
        )
    )
    acc = tmp_path / "a.json"
    acc.write_text(json.dumps({"pair": "tiny", "tasks": {"chat": 0.5}}))  # V from the registered pair
    return comp, acc


def test_a_profile_of_another_vocabulary_is_refused_or_forced(multispin, tmp_path):
    comp, acc = _tiny_profiles(tmp_path)
    small = ["--devices", "3", "--n-saa", "20", "--no-baselines", "--json"]
    for flag, path in (("--compute-profile", comp), ("--acceptance-profile", acc)):
        # a scenario the user names keeps its vocabulary
        res = multispin("optimize", "--scenario", "paper-qwen", flag, str(path), *small)
        assert res.code == 2 and res.err.count("\n") == 1, res.err
        assert (
            "measured on pair 'tiny' (V = 256), but scenario 'paper-qwen' has payload.vocab_size = 151,665" in res.err
        )
        assert "--force" in res.err
        res = multispin("optimize", "--scenario", "paper-qwen", flag, str(path), "--force", *small)
        assert res.code == 0, res.err
        assert "WARNING" in res.err and "applied anyway (forced)" in res.err
        # without --scenario: the default scenario with the profile's vocabulary, said in one line
        res = multispin("optimize", flag, str(path), *small)
        assert res.code == 0 and res.err == (
            "scenario: paper-qwen with payload.vocab_size = 256, the profiles' pair's (--scenario names another)\n"
        ), res.err
        assert json.loads(res.out)["payload_bits"] < 151_665
    # a scenario of the profile's vocabulary takes it without a word
    f = tmp_path / "tiny.yaml"
    f.write_text("preset: paper-qwen\npayload: {vocab_size: 256, codec: 'sparse:v_eff=64,q=16'}\n")
    res = multispin("optimize", "--scenario", str(f), "--compute-profile", str(comp), *small)
    assert res.code == 0 and res.err == "", res.err


def test_a_poor_compute_fit_warns(multispin, tmp_path):
    comp, _ = _tiny_profiles(tmp_path, r2=0.0)
    f = tmp_path / "tiny.yaml"
    f.write_text("preset: paper-qwen\npayload: {vocab_size: 256, codec: 'sparse:v_eff=64,q=16'}\n")
    res = multispin(
        "optimize",
        "--scenario",
        str(f),
        "--compute-profile",
        str(comp),
        "--devices",
        "3",
        "--n-saa",
        "20",
        "--no-baselines",
        "--json",
    )
    assert res.code == 0 and "R² = 0.000 < 0.5" in res.err


def test_missing_option_through_the_installed_entry_point():
    env = {
        "MULTISPIN_SECRET": "test-secret-0123456789",
        "PATH": "",
        "PYTHONPATH": str(Path(cli.__file__).parents[1]),
    }  # this checkout's package
    res = subprocess.run(
        [sys.executable, "-c", "from multispin.cli import main; main()", "keys", "device", "k"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert (
        res.returncode == 2
        and res.stderr
        == "error: --device-id: required (INT: the device id the key is bound to; or --devices IDS for several, DIR/device-N each)\n"
    )
