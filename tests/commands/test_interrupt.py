"""Ctrl-C and SIGTERM stop every long verb with one line saying how far it
got, partial results kept: `reproduce` says how many drops ran and that a rerun resumes,
`generate` prints the texts so far, `testbed` and `demo` write a summary.json marked
``interrupted: true``, with no transport warnings. Each run is a subprocess in its own process
group; SIGINT goes to the whole group, as a terminal's Ctrl-C does, SIGTERM to the verb alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from multispin import cli
from multispin.commands._interrupt import catch_signals, exit_code, reported_interrupt

# real processes, signals and sockets: `make test-fast` leaves these out
pytestmark = pytest.mark.integration

SRC = str(Path(cli.__file__).parents[1])  # this checkout's package


def _start(args, tmp_path: Path, **extra_env: str) -> tuple[subprocess.Popen, Path, Path]:
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    env = {**os.environ, "PYTHONPATH": SRC, "MULTISPIN_SECRET": "test-secret-0123456789", **extra_env}
    proc = subprocess.Popen(
        [sys.executable, "-m", "multispin", *args],
        stdout=out.open("w"),
        stderr=err.open("w"),
        env=env,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    return proc, out, err


def _interrupt_when(proc, ready, sig, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert proc.poll() is None, "finished before it could be interrupted"
        assert time.monotonic() < deadline, "never got going"
        time.sleep(0.2)
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # a terminal's Ctrl-C: every process of the group
    else:
        proc.send_signal(sig)
    proc.wait(timeout=180)


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_reproduce_says_how_far_and_resumes(tmp_path):
    out = tmp_path / "r"
    args = ["reproduce", "--quick", "--out", str(out), "--figure", "fig1_mode_split", "--workers", "1", "--no-progress"]
    # the verb's own line comes once the computation returns to Python; past the 4 s stop grace the
    # bounded stop says only "interrupted" (the grace has its own test below). One full-suite run on
    # the loaded 2-core host saw that plain line here (not reproduced since): the grace is long here,
    # so what this test checks is the verb's line, not the host's load
    proc, _, err = _start(args, tmp_path, MULTISPIN_STOP_GRACE_S="120")
    _interrupt_when(proc, lambda: len(list((out / "cache").glob("*/*.json"))) >= 1, signal.SIGINT)
    assert proc.returncode == 130
    line = err.read_text().strip()
    assert line.startswith("interrupted after ") and line.endswith(" drops; rerun the same command to resume"), line
    done, total = (int(w) for w in line.split()[2:5:2])
    assert 0 < done < total and len(err.read_text().splitlines()) == 1


def test_generate_prints_the_partial_texts(tmp_path):
    args = ["generate", "--pair", "tiny", "--devices", "2", "--max-new-tokens", "4000", "--temperature", "0"]
    proc, out, err = _start(args, tmp_path)
    _interrupt_when(proc, lambda: "generating: " in err.read_text() if err.exists() else False, signal.SIGTERM)
    assert proc.returncode == 143
    assert err.read_text().splitlines()[-1].startswith("interrupted after ")
    text = out.read_text()
    assert "device 0 " in text and "device 1 " in text and "multispin generate: tiny" in text


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_testbed_writes_a_partial_summary(tmp_path, sig):
    folder = tmp_path / "tb"
    args = ["testbed", "--pair", "tiny", "--devices", "2", "--rounds", "2000", "--out", str(folder)]
    proc, _, err = _start(args, tmp_path)
    _interrupt_when(proc, lambda: _lines(folder / "rounds.jsonl") >= 3, sig)
    assert proc.returncode == 128 + sig
    tail = err.read_text()
    assert tail.splitlines()[-1].startswith("interrupted after ") and "summary.json" in tail
    assert "connection lost" not in tail and "WARNING" not in tail, tail
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["consistent"] is True
    assert 3 <= summary["rounds"] < 2000


def test_a_verb_without_its_own_line_still_says_interrupted(capsys):
    """exit_code: typer reports every KeyboardInterrupt as 130 and prints nothing."""
    with catch_signals():  # a fresh run's state
        pass
    assert exit_code(0) == 0 and exit_code(2) == 2
    assert exit_code(130) == 130 and capsys.readouterr().err == "interrupted\n"


def test_reported_interrupt_shows_the_partial_result_then_one_line(capsys):
    import typer

    from multispin.errors import Interrupted

    shown = []
    with pytest.raises(typer.Exit) as exc:
        with reported_interrupt(shown.append):
            raise Interrupted("interrupted after 3 rounds", signal.SIGTERM, partial="texts")
    assert exc.value.exit_code == 143 and shown == ["texts"]
    assert capsys.readouterr().err == "interrupted after 3 rounds\n"


# Ctrl-C ends the process within seconds whatever runs (STOP_GRACE_S after the first signal, at
# once on a second). The bound below is far above that grace, for a loaded CI host, and far below
# what it was: a reproduce with a worker pool took 48-125 s after one Ctrl-C and hung after two.
STOPPED_WITHIN_S = 25


def _descendants(pid: int) -> list[int]:
    """Processes below ``pid`` (from /proc): the pool's forkserver and its workers."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _running(pid: int) -> bool:
    """``pid`` exists and is not a zombie waiting for its reaper."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _stops_within(proc, sigs: int) -> None:
    for _ in range(sigs):
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.05)
    proc.wait(timeout=STOPPED_WITHIN_S)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("presses", [1, 2])
def test_reproduce_with_a_worker_pool_stops_within_seconds(tmp_path, presses):
    """One Ctrl-C: the line and 130, not a minute's wait on the pool; two: 130 at once, no traceback."""
    args = [
        "reproduce",
        "--quick",
        "--out",
        str(tmp_path / "r"),
        "--figure",
        "fig1_mode_split",
        "--workers",
        "2",
        "--no-progress",
    ]
    proc, _, err = _start(args, tmp_path)
    deadline = time.monotonic() + 240
    while len(_descendants(proc.pid)) < 3:  # the forkserver and both workers
        assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
        time.sleep(0.2)
    time.sleep(1.0)  # the workers are computing
    helpers = _descendants(proc.pid)  # the forkserver, the workers and multiprocessing's resource tracker
    _stops_within(proc, presses)
    assert proc.returncode == 130
    # the resource tracker outlives the verb and would warn of leaked semaphores a second later:
    # read stderr once every helper process has ended
    deadline = time.monotonic() + STOPPED_WITHIN_S
    while any(_running(pid) for pid in helpers) and time.monotonic() < deadline:
        time.sleep(0.1)
    text = err.read_text()
    assert "Traceback" not in text and len(text.strip().splitlines()) == 1, text
    assert text.startswith("interrupted"), text


def _start_pool_reproduce(tmp_path: Path, sigint: object = signal.SIG_DFL) -> tuple[subprocess.Popen, Path, list[int]]:
    """`reproduce` with a two-worker pool, its SIGINT disposition at start ``sigint``; returns
    once the forkserver and both workers compute, with their pids."""
    args = ["reproduce", "--quick", "--out", str(tmp_path / "r"), "--figure", "fig1_mode_split", "--workers", "2"]
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.Popen(
        [sys.executable, "-m", "multispin", *args, "--no-progress"],
        stdout=out.open("w"),
        stderr=err.open("w"),
        env=env,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
    )
    deadline = time.monotonic() + 240
    while len(_descendants(proc.pid)) < 3:
        assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
        time.sleep(0.2)
    time.sleep(1.0)  # the workers are computing
    return proc, err, _descendants(proc.pid)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_sigint_to_the_main_process_alone_stops_reproduce_even_when_inherited_as_ignored(tmp_path):
    """`kill -INT PID` from a script that started the run with `&` (which leaves SIGINT ignored):
    it used to run on; now it stops as on a terminal's Ctrl-C."""
    control = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    time.sleep(0.5)
    control.send_signal(signal.SIGINT)
    with pytest.raises(subprocess.TimeoutExpired):  # negative control: the disposition really is ignore
        control.wait(timeout=1.5)
    control.kill()
    control.wait()
    proc, err, _ = _start_pool_reproduce(tmp_path, signal.SIG_IGN)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)  # the main process alone
    proc.wait(timeout=STOPPED_WITHIN_S)
    assert proc.returncode == 130 and time.monotonic() - sent < 10, err.read_text()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_killing_reproduce_leaves_no_forkserver_or_worker_behind(tmp_path):
    """SIGKILL to the main process (no cleanup of its own runs): the forkserver and the workers
    used to live on for the better part of an hour, re-parented to init."""
    proc, _, helpers = _start_pool_reproduce(tmp_path)
    assert sum(_running(pid) for pid in helpers) >= 3  # the helpers are there to be orphaned
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while any(_running(pid) for pid in helpers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in helpers if _running(pid)]
    for pid in left:  # not to leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not left


def _rounds_logged(folder: Path) -> int:
    return max((_lines(p) for p in folder.rglob("rounds.jsonl")), default=0)


@pytest.mark.slow
@pytest.mark.parametrize(
    "verb,ready",
    [
        ("testbed", lambda out, folder: "payload:" in out),  # models loaded, devices and server starting
        ("demo", lambda out, folder: "devices:" in out),  # set-up said, the first policy starting
        ("demo", lambda out, folder: _rounds_logged(folder) >= 2),  # rounds running
    ],
)
def test_testbed_and_demo_stop_within_seconds_at_each_phase(tmp_path, verb, ready):
    folder = tmp_path / "o"
    args = [verb, "--pair", "tiny", "--devices", "2", "--rounds", "60", "--out", str(folder)]
    proc, out, err = _start(args, tmp_path)
    deadline = time.monotonic() + 240
    while not ready(out.read_text(), folder):
        assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
        time.sleep(0.1)
    _stops_within(proc, 1)
    assert proc.returncode == 130
    assert "Traceback" not in err.read_text() and "ProtocolError" not in err.read_text()


_HARD_EXIT_WITH_A_LIVE_POOL = """
import multiprocessing, time
from concurrent.futures import ProcessPoolExecutor
from multispin.commands._interrupt import hard_exit

# a pool held to the end, as a verb's executor holds it while its units compute
pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("forkserver"))
units = [pool.submit(time.sleep, 60) for _ in range(4)]
time.sleep(2)  # the forkserver and both workers are up and sleeping
hard_exit(2, "interrupted")
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_hard_exit_leaves_no_leaked_semaphore_warning(tmp_path):
    """The bounded stop ends with os._exit, which skips the finalizers that unlink a worker pool's
    named semaphores; without `_release_named_semaphores` the resource tracker, which outlives the
    verb, printed "leaked semaphore objects" a second after the verb's one line."""
    err = tmp_path / "stderr"
    proc = subprocess.Popen(
        [sys.executable, "-c", _HARD_EXIT_WITH_A_LIVE_POOL],
        stderr=err.open("w"),
        env={**os.environ, "PYTHONPATH": SRC},
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while len(_descendants(proc.pid)) < 4 and proc.poll() is None:  # the tracker, the forkserver, 2 workers
        assert time.monotonic() < deadline, err.read_text()
        time.sleep(0.1)
    helpers = _descendants(proc.pid)
    assert proc.wait(timeout=STOPPED_WITHIN_S) == 130
    while any(_running(pid) for pid in helpers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert err.read_text() == "interrupted\n"
