"""`multispin.lifeline.exit_with_parent`: a helper process ends when its parent dies, however it
died (SIGKILL: no cleanup of the parent's runs). The launcher's forked device and pool processes,
the device-job subprocesses and the reproduction's forkserver and workers call it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# real processes killed with SIGKILL: `make test-fast` leaves these out
pytestmark = pytest.mark.integration

SRC = str(Path(__file__).resolve().parents[1] / "src")

PARENT = """
import multiprocessing, sys, time
from multispin.lifeline import exit_with_parent

def child(watch):
    if watch:
        exit_with_parent()
    time.sleep(60)

if __name__ == "__main__":
    p = multiprocessing.get_context("fork").Process(target=child, args=(sys.argv[1] == "watch",))
    p.start()
    print(p.pid, flush=True)
    time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _orphan_survives(tmp_path: Path, mode: str) -> bool:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen(
        [sys.executable, str(script), mode], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": SRC}
    )
    child = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 3.0
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    survived = _alive(child)
    if survived:
        os.kill(child, signal.SIGKILL)
    return survived


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_child_that_watches_its_parent_ends_with_it(tmp_path):
    assert not _orphan_survives(tmp_path, "watch")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_negative_control_a_child_that_does_not_watch_outlives_its_killed_parent(tmp_path):
    assert _orphan_survives(tmp_path, "plain")
