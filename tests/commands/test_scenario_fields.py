"""Every scenario field is used by each verb that takes ``--scenario`` or refused by it in one line
(a setting accepted and silently dropped reads as a result: the same goodput at every pilot SNR
looks like robustness to channel errors). The verbs run as a user runs them, in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from multispin import cli
from multispin.commands._scenario_fields import VERBS, schema_fields, uses, why_ignored

SRC = str(Path(cli.__file__).parents[1])  # this checkout's package

# a valid value, other than every preset's, for each field some verb ignores
IGNORED_VALUES = {
    "payload.codec": "lattice:l=64",
    "payload.vocab_size": 1000,
    "payload.count_signalling_bits": True,
    "channel.speed_kmh": 30,
    "channel.carrier_hz": 2.0e9,
    "channel.pilot_snr_db": 10,
    "channel.planning": "robust",
    "channel.correction_deadline_s": 0.1,
    "optimizer.objective": "max-min",
    "optimizer.energy_weight_tokens_per_j": 2.0,
    "energy.pa_efficiency": 0.3,
    "energy.rx_power_w": 0.5,
    "energy.draft_power_w": 3.0,
    "energy.idle_power_w": 0.1,
}
# the cheapest run of each verb past its flags (the refusal must come before any of it)
VERB_ARGS = {
    "optimize": ["--devices", "2", "--n-saa", "10"],
    "sweep": ["--over", "radio.p_dl_dbm=10,20", "--drops", "2"],
    "testbed": ["--pair", "tiny"],
    "demo": ["--pair", "tiny"],
}


def run(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "multispin", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=timeout,
    )


def test_every_field_is_used_or_refused_by_every_verb():
    """A new schema field fails here until each verb says whether it uses it."""
    for verb in VERBS:
        for field in schema_fields():
            assert uses(verb, field) != (why_ignored(verb, field) is not None), (verb, field)


@pytest.mark.parametrize("verb", VERBS)
def test_a_field_the_verb_ignores_is_refused_in_one_line(multispin, tmp_path, verb):
    """The schema × verbs walk: every field a verb does not use, set in a scenario file, stops the
    verb with one line naming the field, before any model loads or drop runs."""
    ignored = [f for f in schema_fields() if why_ignored(verb, f)]
    assert ignored and set(ignored) <= set(IGNORED_VALUES)
    for field in ignored:
        path = tmp_path / f"{verb}-{field}.yaml"
        path.write_text(f"preset: smollm2-cpu\n{field}: {json.dumps(IGNORED_VALUES[field])}\n")
        res = multispin(verb, "--scenario", str(path), *VERB_ARGS[verb])
        assert res.code == 2, (field, res.err)
        assert res.err.startswith(f"error: {field}: set in ") and len(res.err.splitlines()) == 1, res.err
        assert f"`multispin {verb}` does not use it" in res.err


def test_optimize_refuses_pilot_snr_in_a_subprocess(tmp_path):
    """Before: `optimize` printed the same plan at every pilot SNR."""
    path = tmp_path / "pilots.yaml"
    path.write_text("preset: paper-qwen\nchannel.pilot_snr_db: 0\n")
    res = run("optimize", "--scenario", str(path), "--devices", "3", "--n-saa", "50")
    assert res.returncode == 2 and res.stderr.startswith("error: channel.pilot_snr_db: set in "), res.stderr
    assert len(res.stderr.splitlines()) == 1 and "Traceback" not in res.stderr


def _sweep(tmp_path: Path, *args: str) -> list[dict]:
    res = run("sweep", "--devices", "3", "--n-saa", "50", "--drops", "2", "--no-progress", "--json", *args)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["rows"]


def test_sweep_honours_pilot_snr_and_speed(tmp_path):
    """Before: identical goodput at pilot SNR 0 and 30 dB, and at 0 and 120 km/h (the channel
    fields were accepted and dropped). Now each point plans on its aged, noisy estimate."""
    rows = _sweep(tmp_path, "--over", "channel.pilot_snr_db=0,30")
    g = {r["channel.pilot_snr_db"]: r["goodput_tokens_per_s"] for r in rows if r["policy"] == "adaptive"}
    assert g[0] != g[30], g
    rows = _sweep(tmp_path, "--over", "channel.speed_kmh=0,120", "--set", "channel.pilot_snr_db=30")
    g = {r["channel.speed_kmh"]: r["goodput_tokens_per_s"] for r in rows if r["policy"] == "adaptive"}
    assert g[0] != g[120], g


def test_sweep_refuses_a_correction_deadline(tmp_path):
    res = run("sweep", "--over", "radio.p_dl_dbm=10,20", "--set", "channel.correction_deadline_s=0.1")
    assert res.returncode == 2 and res.stderr.startswith("error: channel.correction_deadline_s: set in the flags"), (
        res.stderr
    )


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["testbed"])  # demo takes the same path (running_values), 4x longer
def test_a_three_device_scenario_file_runs_three_devices(tmp_path, verb):
    """Before: the file's devices.count was replaced by the verb's default, 8."""
    path = tmp_path / "three.yaml"
    path.write_text("preset: smollm2-cpu\ndevices.count: 3\n")
    out = tmp_path / "out"
    extra = ["--rounds", "2", "--max-new-tokens", "4"]
    res = run(verb, "--scenario", str(path), "--pair", "tiny", *extra, "--out", str(out), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    if verb == "testbed":
        assert doc["devices"] == 3 and len(doc["tasks"]) == 3
    else:
        assert doc["config"]["devices"] == 3 and len(doc["setup"]["tasks"]) == 3
