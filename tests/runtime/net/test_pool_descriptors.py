"""Pools and descriptors. Before: each pooled device held about 9 descriptors (a ZeroMQ context of
its own), a pool never raised its soft RLIMIT_NOFILE, and a pool too big for it lost devices to
"Too many open files" mid-run. Now the devices share one context (4 descriptors each, measured
here), the pool raises its soft limit towards the hard one, and a pool that cannot fit is refused
up front in one line naming the descriptors it needs."""

from __future__ import annotations

import dataclasses
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from multispin.models.tiny import load_tiny_pair
from multispin.runtime.net.pool import FDS_BASE, FDS_PER_DEVICE
from multispin.runtime.net.server import EdgeServer
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.round.local import fixed_policy
from multispin.runtime.security.auth import SECRET_ENV

pytestmark = [pytest.mark.slow, pytest.mark.integration]  # pool processes and a server

SECRET = "pool-descriptors-secret-0123"
SRC = str(Path(__file__).resolve().parents[3] / "src")
# a pool as the command line starts it; ``PATCH`` (Python) runs first, in the pool's process
POOL = "import sys; {patch}; from multispin.cli import main; main(sys.argv[1:])"


@pytest.fixture(scope="module")
def pair():
    return load_tiny_pair()


def _server(pair, devices: int, tokens: int):
    cfg = ServerConfig.make(
        port=0, expected_devices=devices, max_new_tokens=tokens, seed=1, join_timeout_s=20, idle_timeout_s=5
    )
    server = EdgeServer(cfg, pair, SECRET, policy=fixed_policy(2, seed=1))
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault("summary", server.run()), daemon=True)
    th.start()
    assert server.ready.wait(30)
    return server, th, box


def _pool(server, devices: int, nofile: tuple[int, int] | None = None, patch: str = "pass") -> subprocess.Popen:
    cmd = [sys.executable, "-c", POOL.format(patch=patch), "device", "--devices", f"0-{devices - 1}"]
    cmd += ["--pair", "tiny", "--insecure", "--server", server.endpoint, "--threads", "1", "--reconnects", "0"]

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, nofile)

    env = {**os.environ, "PYTHONPATH": SRC, SECRET_ENV: SECRET}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=limit)


def _descriptors_mid_run(pair, devices: int) -> int:
    server, th, _ = _server(dataclasses.replace(pair, eos_token_ids=()), devices, 100_000)
    proc = _pool(server, devices)
    try:
        deadline = time.monotonic() + 120
        while server.round_idx < 3 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.05)
        return len(os.listdir(f"/proc/{proc.pid}/fd"))
    finally:
        proc.kill()
        proc.communicate()
        server.request_stop("test over")
        th.join(30)


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="reads /proc")
def test_a_pooled_device_holds_four_descriptors(pair):
    small, large = _descriptors_mid_run(pair, 2), _descriptors_mid_run(pair, 10)
    per_device = (large - small) / 8
    # 3 at least: the measure sees the devices' sockets at all (a count of nothing would pass below)
    assert 3 <= per_device <= 4 < FDS_PER_DEVICE < 9, per_device
    assert small < FDS_BASE


def test_a_pool_that_cannot_fit_is_refused_up_front_in_one_line(pair):
    server, th, _ = _server(pair, 32, 8)
    try:
        proc = _pool(server, 32, nofile=(100, 100))
        out, err = proc.communicate(timeout=120)
    finally:
        server.request_stop("test over")
        th.join(30)
    needed = FDS_BASE + FDS_PER_DEVICE * 32
    assert proc.returncode == 2
    assert err.strip().splitlines() == [
        f"error: devices: a pool of 32 devices needs about {needed} file descriptors ({FDS_PER_DEVICE} per device "
        f"+ {FDS_BASE}); this process may open 100 (ulimit -n, hard limit 100): raise it or split the pool"
    ]
    assert not server.records  # refused before any device connected


def _run_to_the_end(pair, patch: str) -> tuple[subprocess.Popen, str, dict]:
    """32 devices with a soft limit of 96 descriptors (the hard one 4096): they need about 190."""
    server, th, box = _server(pair, 32, 8)
    try:
        proc = _pool(server, 32, nofile=(96, 4096), patch=patch)
        _, err = proc.communicate(timeout=240)
    finally:
        server.request_stop("test over")
        th.join(60)
    return proc, err, box["summary"].devices


def test_a_pool_raises_its_soft_limit_and_every_device_finishes(pair):
    proc, err, devices = _run_to_the_end(pair, "pass")
    assert proc.returncode == 0, err[-2000:]
    assert len(devices) == 32 and all(r.finished for r in devices.values())


def test_negative_control_without_the_raise_the_pool_hits_its_limit(pair):
    """The same pool with the check and raise switched off: the limit is really hit."""
    patch = "import multispin.runtime.net.pool as p; p.ensure_descriptors = lambda n: 0"
    proc, err, devices = _run_to_the_end(pair, patch)
    assert proc.returncode != 0
    assert "Too many open files" in err or "EMFILE" in err or not all(r.finished for r in devices.values()), err[-2000:]
