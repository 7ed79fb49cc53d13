"""A pool (or a lone device) stopped by SIGTERM or SIGINT sent to its main process alone keeps what
it generated: ``--result`` is written with every device ``finished: false`` and its partial text,
and the texts are printed. Before, a signalled pool wrote no ``--result`` and printed nothing."""

from __future__ import annotations

import dataclasses
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

pytestmark = [pytest.mark.slow, pytest.mark.integration]  # a pool process and a server

SECRET = "pool-signals-secret-0123456"


@pytest.fixture(scope="module")
def pair():
    return dataclasses.replace(load_tiny_pair(), eos_token_ids=())  # runs until stopped


def _server(pair, devices: int = 2):
    cfg = ServerConfig.make(
        port=0, expected_devices=devices, max_new_tokens=100_000, seed=3, join_timeout_s=120, idle_timeout_s=30
    )
    server = EdgeServer(cfg, pair, SECRET, policy=fixed_policy(2, seed=cfg.seed))
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault("summary", server.run()), daemon=True)
    th.start()
    assert server.ready.wait(30)
    return server, th


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_pool_writes_its_partial_texts_to_result(pair, tmp_path, signum):
    server, th = _server(pair)
    result = tmp_path / "pool.json"
    env = dict(os.environ, **{SECRET_ENV: SECRET, "MULTISPIN_TEST_THREADS": "1"})
    cmd = [sys.executable, "-c", "from multispin.cli import main; main()", "device", "--devices", "0-1"]
    cmd += ["--pair", "tiny", "--insecure", "--server", server.endpoint, "--result", str(result), "--threads", "1"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while server.round_idx < 4 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.05)
        assert server.round_idx >= 4  # the pool really is mid-text when the signal comes
        sent = time.monotonic()
        proc.send_signal(signum)  # the main process alone, as a supervisor's kill does
        out, err = proc.communicate(timeout=30)
        stopped_s = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
        server.request_stop("test over")
        th.join(30)
    assert proc.returncode == 128 + signum, err
    assert stopped_s < 5.0
    doc = json.loads(result.read_text())
    assert doc["interrupted"] is True
    devices = {d["device_id"]: d for d in doc["devices"]}
    assert set(devices) == {0, 1}
    for d, dev in devices.items():
        assert dev["finished"] is False
        generated = dev["tokens"][dev["num_prompt"] :]
        assert generated, dev  # partial, not empty
        record = server.records[d][dev["num_prompt"] :]
        assert record[: len(generated)] == generated  # the server's committed text, a prefix of it at least
        assert f"--- device {d} ---" in out


def test_a_signalled_lone_device_writes_its_partial_text_to_result(pair, tmp_path):
    server, th = _server(pair, devices=1)
    result = tmp_path / "device.json"
    env = dict(os.environ, **{SECRET_ENV: SECRET, "MULTISPIN_TEST_THREADS": "1"})
    cmd = [sys.executable, "-c", "from multispin.cli import main; main()", "device", "--device-id", "0"]
    cmd += ["--prompt", "Hello", "--pair", "tiny", "--insecure", "--server", server.endpoint, "--result", str(result)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while server.round_idx < 4 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        server.request_stop("test over")
        th.join(30)
    assert proc.returncode == 128 + signal.SIGTERM, err
    dev = json.loads(result.read_text())
    generated = dev["tokens"][dev["num_prompt"] :]
    assert dev["finished"] is False and generated
    assert server.records[0][dev["num_prompt"] :][: len(generated)] == generated
    assert dev["text"] and dev["text"] in out
