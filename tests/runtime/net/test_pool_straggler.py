"""The issue's attack at pool scale: a pool process stopped (SIGSTOP, a laptop lid closed) long
enough to miss two draft deadlines in a row, twice. Before, the server told every device of the
pool to back off for longer than its own idle timeout and the devices burnt their reconnects on
the busy answers: the pool exited 1 and the texts were lost. Now every device waits the bounded
back-off, rejoins, and the pool's texts are byte-identical to an unstalled run on the same seed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from multispin.models.tiny import load_tiny_pair
from multispin.runtime.net.server import EdgeServer
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.round.local import fixed_policy
from multispin.runtime.security.auth import SECRET_ENV

pytestmark = [pytest.mark.slow, pytest.mark.integration]  # a pool process, a server, real waits

SECRET = "pool-straggler-secret-0123456"
ROUND_TIMEOUT_S = 1.0
IDLE_TIMEOUT_S = 8.0  # the back-off given is half of it
STALL_S = 2 * ROUND_TIMEOUT_S + 1.5  # two deadlines missed in a row


def _run(tmp_path, name: str, stalls: int):
    """A pool of devices 0-2 against a server; the pool stopped ``stalls`` times once the run is
    under way. Returns (server summary, the pool's --result, its exit code)."""
    cfg = ServerConfig.make(
        port=0,
        expected_devices=3,
        max_new_tokens=40,
        seed=7,
        join_timeout_s=60,
        round_timeout_s=ROUND_TIMEOUT_S,
        idle_timeout_s=IDLE_TIMEOUT_S,
        max_draft_misses=2,
    )
    server = EdgeServer(cfg, load_tiny_pair(), SECRET, policy=fixed_policy(2, seed=cfg.seed))
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault("summary", server.run()), daemon=True)
    th.start()
    assert server.ready.wait(30)
    result = tmp_path / f"{name}.json"
    env = dict(os.environ, **{SECRET_ENV: SECRET, "MULTISPIN_TEST_THREADS": "1"})
    cmd = [sys.executable, "-c", "from multispin.cli import main; main()", "device", "--devices", "0-2"]
    cmd += ["--pair", "tiny", "--insecure", "--server", server.endpoint, "--result", str(result), "--threads", "1"]
    cmd += ["--reconnects", "2", "--server-timeout", "10"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for i in range(stalls):
            deadline = time.monotonic() + 120
            while server.round_idx < 2 + 4 * i and time.monotonic() < deadline:
                assert proc.poll() is None, proc.communicate()[1]
                time.sleep(0.02)
            os.kill(proc.pid, signal.SIGSTOP)
            time.sleep(STALL_S)
            os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
    th.join(60)
    assert not th.is_alive()
    return box["summary"], json.loads(result.read_text()), proc.returncode, err


def test_a_pool_stalled_twice_waits_rejoins_and_ends_with_the_same_texts(tmp_path):
    calm, calm_doc, calm_rc, err = _run(tmp_path, "calm", stalls=0)
    assert calm_rc == 0, err
    assert calm.stragglers["backed_off"] == 0
    stalled, doc, rc, err = _run(tmp_path, "stalled", stalls=2)
    # the attack really happened: deadlines missed in a row and the pool's devices told to back off
    assert stalled.stragglers["missed"] >= 4 and stalled.stragglers["backed_off"] >= 1, stalled.stragglers
    assert rc == 0, err
    texts = {d["device_id"]: d for d in doc["devices"]}
    calm_texts = {d["device_id"]: d for d in calm_doc["devices"]}
    assert set(texts) == {0, 1, 2}
    for d, dev in texts.items():
        assert dev["finished"] is True, dev
        assert dev["tokens"] == calm_texts[d]["tokens"]  # byte for byte the unstalled run's
