"""What a new user met in the first hour (second pass), each through the command line in a
subprocess: results never overwritten silently, a busy port and a wrong port said at once,
`measure` sampling as the runs it describes do."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from multispin import cli
from multispin.experiments.testbed import compact_exact_defaults
from multispin.runtime.net.launcher import free_port

SRC = str(Path(cli.__file__).parents[1])  # this checkout's package
ENV = {**os.environ, "PYTHONPATH": SRC}


def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "multispin", *args], capture_output=True, text=True, env=ENV, timeout=timeout
    )


@pytest.mark.parametrize("verb,marker", [("testbed", "summary.json"), ("demo", "summary.json")])
def test_a_second_run_into_the_same_out_is_refused(tmp_path, verb, marker):
    """Before: `demo --pair tiny` after `make demo` replaced out/demo/ and lost the 8-minute result."""
    out = tmp_path / "out"
    out.mkdir()
    (out / marker).write_text('{"precious": true}')
    res = run(verb, "--pair", "tiny", "--out", str(out))
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(f"error: --out: {out} holds a previous `multispin {verb}` run")
    assert "--force" in res.stderr and len(res.stderr.splitlines()) == 1
    assert (out / marker).read_text() == '{"precious": true}'


def test_reproduce_resumes_its_own_run_but_refuses_to_replace_another(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    from multispin.experiments.reproduce.config import RunConfig

    finished = RunConfig(out=out, quick=True, preset="all", seed=0, figures=("fig1_mode_split",)).to_dict()
    (out / "run.json").write_text(json.dumps({"config": finished}))
    res = run("reproduce", "--quick", "--seed", "1", "--figure", "fig1_mode_split", "--out", str(out))
    assert (
        res.returncode == 2
        and "holds a finished `multispin reproduce` run with other settings (seed 0)" in res.stderr
        and "--force" in res.stderr
    ), res.stderr


def test_an_unknown_figure_is_the_only_line(tmp_path):
    res = run("reproduce", "--figure", "nosuchfig", "--out", str(tmp_path / "r"))
    assert res.returncode == 2 and res.stderr.startswith("error: figures: unknown figure(s) nosuchfig")
    assert len(res.stderr.splitlines()) == 1, res.stderr


def test_serve_on_a_busy_port_fails_before_loading_the_model(tmp_path):
    """A pair that does not exist shows the order: the port is checked first (before: the model
    loaded for 30 s and then the bind failed)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        res = run(
            "serve",
            "--pair",
            str(tmp_path / "no-such-model"),
            "--port",
            str(port),
            "--insecure",
            "--secret",
            "busy-port-test-secret-0123",
        )
    assert res.returncode == 2
    assert res.stderr.startswith(f"error: --port: {port} on 127.0.0.1 is in use"), res.stderr


@pytest.mark.slow
def test_a_device_on_a_wrong_port_is_told_within_seconds(tmp_path):
    """Before: ZeroMQ retried the refused connection silently; the hint came after 232 s."""
    err = tmp_path / "err"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "multispin",
            "device",
            "--server",
            f"tcp://127.0.0.1:{free_port()}",
            "--device-id",
            "0",
            "--insecure",
            "--pair",
            "tiny",
            "--prompt",
            "hi",
        ],
        stdout=subprocess.DEVNULL,
        stderr=err.open("w"),
        env={**ENV, "MULTISPIN_SECRET": "wrong-port-test-secret-0123"},
    )
    try:
        deadline = time.monotonic() + 120  # the hint comes 3 s after the first refusal; this is the load's margin
        while "nothing accepts connections at tcp://127.0.0.1:" not in err.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.2)
        assert "server silent" not in err.read_text()  # the hint, not a timeout's reconnect
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def test_measure_samples_as_the_runs_do_by_default(multispin):
    """Before: `measure` sampled without a top-k cut while testbed and demo cut at 1024. In this
    process (the entry point itself): a subprocess would spend most of its time importing torch."""
    res = multispin(
        "measure",
        "--pair",
        "tiny",
        "--prompts",
        "2",
        "--max-new-tokens",
        "4",
        "--draft-len",
        "2",
        "--source",
        "builtin",
        "--json",
    )
    assert res.code == 0, res.err
    top_k, _ = compact_exact_defaults(256)  # the tiny pair's vocabulary
    assert json.loads(res.out)["sampling"]["top_k"] == top_k == 256


def test_the_readmes_key_folders_are_ignored_by_git():
    """The README's `multispin keys` lines write secret keys under the working folder (the
    repository's root when run from it): git must never pick them up."""
    import re
    import shutil

    root = Path(cli.__file__).parents[2]
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    folders = re.findall(r"multispin keys (?:server|device) (\S+)", (root / "README.md").read_text())
    assert folders
    for folder in folders:
        secret = f"{folder}/server.key_secret"
        res = subprocess.run(["git", "check-ignore", "-q", secret], cwd=root)
        assert res.returncode == 0, f"{secret} is not ignored by git"
    # negative control: a tracked path is not ignored
    assert subprocess.run(["git", "check-ignore", "-q", "README.md"], cwd=root).returncode == 1


@pytest.mark.slow
def test_the_demo_describes_its_intervals_and_names_non_default_settings(tmp_path):
    """Before: summary.json named a moving-block bootstrap (the code computes batch means with a
    jackknife) and the title of a run at 30 km/h and pilot SNR 0 dB read as the default run's."""
    out = tmp_path / "demo"
    res = run(
        "demo",
        "--pair",
        "tiny",
        "--devices",
        "2",
        "--rounds",
        "2",
        "--max-new-tokens",
        "4",
        "--speed-kmh",
        "30",
        "--pilot-snr-db",
        "0",
        "--out",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    method = json.loads((out / "summary.json").read_text())["method"]
    assert "batch means" in method and "jackknife" in method and "bootstrap" not in method
    title = next(ln for ln in res.stdout.splitlines() if "multispin demo:" in ln)
    assert "30 km/h" in title and "pilot SNR 0 dB" in title, title


@pytest.mark.slow
def test_a_wall_clock_run_says_which_profile_the_forecast_uses(tmp_path):
    """Before: G 7.5 on the host's clock next to the A100 forecast 46.4, without a word."""
    res = run(
        "testbed",
        "--pair",
        "tiny",
        "--devices",
        "2",
        "--max-new-tokens",
        "8",
        "--clock",
        "wall",
        "--out",
        str(tmp_path / "tb"),
    )
    assert res.returncode == 0, res.stderr
    note = " ".join(res.stdout.split())
    assert "the forecast times compute with scenario paper-qwen's profile (T_ver0 42.8 ms" in note, res.stdout
    summary = json.loads((tmp_path / "tb" / "summary.json").read_text())
    assert summary["forecast_compute"]["t_ver0_s"] == 0.0428
