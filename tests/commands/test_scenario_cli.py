"""One scenario vocabulary across verbs: `--scenario PRESET|FILE` wherever a
scenario is built, the radio flags alongside, conflicting flags refused, `multispin scenario
show/schema/list`, and scenario files with dotted keys, JSON, line:column and did-you-mean."""

from __future__ import annotations

import json

import pytest
from typer.main import get_command

from multispin import cli

SCENARIO_VERBS = ("optimize", "testbed", "demo")


def _flags(verb: str) -> dict[str, bool]:
    """Flag → shown in the help, for one verb."""
    cmd = get_command(cli.app).commands[verb]
    return {o: not p.hidden for p in cmd.params for o in p.opts if o.startswith("--")}


@pytest.mark.parametrize("verb", SCENARIO_VERBS)
def test_every_scenario_verb_takes_the_same_flags(verb):
    flags = _flags(verb)
    for flag in ("--scenario", "--pdl-dbm", "--pul-dbm", "--noise-figure-db"):
        assert flags.get(flag) is True, f"{verb} {flag}"


def test_pair_always_names_a_model_pair_and_preset_is_gone_from_help():
    for verb in get_command(cli.app).commands:
        flags = _flags(verb) if verb != "scenario" else {}
        assert not flags.get("--preset") and not flags.get("--config"), verb
    assert "--noise-figure-db" in _flags("reproduce") and _flags("reproduce")["--scenario"]


def test_show_prints_a_file_that_loads_back_to_the_same_numbers(multispin, tmp_path):
    res = multispin("scenario", "show", "paper-r1")
    assert res.code == 0 and res.out.startswith("# multispin scenario")
    path = tmp_path / "start.yaml"
    path.write_text(res.out)
    args = ["--devices", "4", "--n-saa", "100", "--no-baselines", "--json"]
    from_file = json.loads(multispin("optimize", "--scenario", str(path), *args).out)
    from_preset = json.loads(multispin("optimize", "--scenario", "paper-r1", *args).out)
    assert from_file["goodput_tokens_per_s"] == from_preset["goodput_tokens_per_s"]
    assert from_file["devices"] == from_preset["devices"]


def test_schema_and_list(multispin):
    schema = json.loads(multispin("scenario", "schema").out)
    assert {"preset", "devices", "radio", "compute"} <= set(schema["properties"])
    presets = [
        "paper-qwen",
        "paper-r1",
        "paper-qwen-cell-edge",
        "smollm2-cpu",
        "measured-smollm2-a100",
        "measured-smollm2-host",
    ]
    assert schema["properties"]["preset"]["enum"] == presets
    assert [ln.split("\t")[0] for ln in multispin("scenario", "list").out.splitlines()] == presets


def test_only_scenario_names_the_scenario(multispin, tmp_path):
    """--preset and --config (the flags before --scenario) are refused in one line, not read."""
    cfg = tmp_path / "s.yaml"
    cfg.write_text("preset: paper-qwen\n")
    for flag, value in (("--config", str(cfg)), ("--preset", "paper-r1")):
        res = multispin("optimize", flag, value)
        assert res.code == 2 and res.err.count("\n") == 1 and flag in res.err, res.err


@pytest.mark.parametrize(
    "name, text, expected",
    [
        ("bad.yaml", "preset: paper-r1\nradio:\n  p_dl_dbm: [1\n", "at line 4, column 1"),
        ("bad.json", '{"preset": "paper-r1",\n "radio": {"p_dl_dbm": 9,}}', "at line 2, column 26"),
        ("bad.toml", "[radio]\np_dl_dbm = = 3\n", "line 2"),
        (
            "range.yaml",
            "preset: paper-r1\ndevices:\n  count: 4\nradio:\n  p_dl_dbm: 99\n",
            "range.yaml:5:3: radio.p_dl_dbm: must be in [-60, 70] dBm (got 99)",
        ),
        (
            "typo.yaml",
            "preset: paper-r1\nradio:\n  p_dl_dmb: 20\n",
            "typo.yaml:3:3: radio.p_dl_dmb: unknown field (did you mean p_dl_dbm?)",
        ),
        (
            "typo-preset.yaml",
            "preset: paper-qwn\n",
            "typo-preset.yaml:1:1: preset: unknown preset 'paper-qwn' (did you mean paper-qwen?)",
        ),
    ],
)
def test_file_errors_name_line_column_and_suggest(multispin, tmp_path, name, text, expected):
    path = tmp_path / name
    path.write_text(text)
    res = multispin("optimize", "--scenario", str(path))
    assert res.code == 2 and res.err.count("\n") == 1, res.err
    assert expected in res.err, res.err


def test_dotted_keys_and_json_files_work_as_the_readme_writes_them(multispin, tmp_path):
    dotted = tmp_path / "dotted.yaml"
    dotted.write_text("preset: paper-qwen\nradio.p_dl_dbm: 22\ndevices.count: 3\noptimizer.n_saa: 50\n")
    r = json.loads(multispin("optimize", "--scenario", str(dotted), "--no-baselines", "--json").out)
    assert (r["p_dl_dbm"], r["num_devices"], r["n_saa"]) == (22.0, 3, 50)
    as_json = tmp_path / "s.json"
    as_json.write_text(
        json.dumps({"preset": "paper-qwen", "radio": {"p_dl_dbm": 22}, "devices.count": 3, "optimizer": {"n_saa": 50}})
    )
    r2 = json.loads(multispin("optimize", "--scenario", str(as_json), "--no-baselines", "--json").out)
    assert r2["goodput_tokens_per_s"] == r["goodput_tokens_per_s"]


def test_noise_figure_flag_reaches_the_scenario(multispin):
    r = json.loads(
        multispin(
            "optimize", "--devices", "2", "--n-saa", "20", "--noise-figure-db", "22", "--no-baselines", "--json"
        ).out
    )
    assert r["noise_figure_db"] == 22.0
