"""A full disk loses nothing the run is for. Side output (`serve --log`, a testbed's rounds.jsonl
and summary.json, a device's `--result`) stops with one line and the run goes on; the texts still
reach the devices and stdout; the journal refuses the round it cannot make durable and keeps every
round acknowledged before it. Before: `serve --log` on a full disk ended the run with an ENOSPC
traceback, `testbed --out` ended in a traceback, and a pool whose `--result` could not be written
printed no texts.

A full disk is simulated two ways (no tmpfs without privileges): a writer that raises ENOSPC, and
a file-size limit (RLIMIT_FSIZE) in a subprocess, where a write past the limit fails with EFBIG
(the command line ignores SIGXFSZ, which would kill it) and is treated like ENOSPC."""

from __future__ import annotations

import errno
import json
import logging
import os
import resource
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from multispin.models.tiny import load_tiny_pair
from multispin.runtime.net.device import build_device_client
from multispin.runtime.net.server import EdgeServer
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.round.local import fixed_policy
from multispin.runtime.security.auth import SECRET_ENV
from multispin.side_output import SideFile

SECRET = "disk-full-secret-0123456789"
SRC = str(Path(__file__).resolve().parents[3] / "src")


class FullAfter:
    """A file object whose writes fail with ENOSPC once ``room`` lines have been written."""

    def __init__(self, fh, room: int):
        self.fh, self.room, self.refused = fh, room, 0

    def write(self, text: str) -> int:
        if self.room <= 0:
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= 1
        return self.fh.write(text)

    def flush(self) -> None:
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()


def test_a_side_file_stops_with_one_line_and_keeps_its_whole_lines(tmp_path, caplog):
    path = tmp_path / "log.jsonl"
    side = SideFile(path, "server log")
    side._fh = full = FullAfter(side._fh, 2)
    with caplog.at_level(logging.WARNING, logger="multispin.output"):
        for i in range(5):
            side.write_line(json.dumps({"i": i}))
    side.close()
    assert full.refused == 1  # the disk really filled, once: later lines were not even tried
    assert [json.loads(line)["i"] for line in path.read_text().splitlines()] == [0, 1]
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        f"server log {path}: not written from here on: disk full (No space left on device); the run goes on"
    ]


def test_negative_control_a_side_file_with_room_writes_every_line(tmp_path, caplog):
    path = tmp_path / "log.jsonl"
    side = SideFile(path, "server log")
    with caplog.at_level(logging.WARNING, logger="multispin.output"):
        for i in range(5):
            side.write_line(json.dumps({"i": i}))
    side.close()
    assert len(path.read_text().splitlines()) == 5 and not caplog.records


@pytest.mark.integration
def test_a_full_disk_under_the_server_log_loses_no_text(tmp_path, caplog):
    pair = load_tiny_pair()
    cfg = ServerConfig.make(port=0, expected_devices=2, max_new_tokens=16, seed=2, join_timeout_s=60)
    log_path = tmp_path / "serve.jsonl"
    server = EdgeServer(cfg, pair, SECRET, policy=fixed_policy(3, seed=cfg.seed), log_path=log_path)
    side = server.log._file
    side._fh = full = FullAfter(side._fh, 3)
    box: dict = {}
    outcomes: dict = {}
    with caplog.at_level(logging.WARNING, logger="multispin"):
        th = threading.Thread(target=lambda: box.setdefault("summary", server.run()), daemon=True)
        th.start()
        assert server.ready.wait(30)
        clients = [
            build_device_client(server.endpoint, k, SECRET, pair, None, p)
            for k, p in enumerate(["Hello edge", "The channel"])
        ]
        threads = [threading.Thread(target=lambda c=c: outcomes.setdefault(c.device_id, c.run())) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        th.join(60)
    summary = box["summary"]
    assert full.refused >= 1  # the log's disk filled during the run
    assert all(o.finished and o.digest == o.server_digest for o in outcomes.values())
    assert all(r.finished and r.digest_match for r in summary.devices.values())
    lost = [r.getMessage() for r in caplog.records if "not written from here on" in r.getMessage()]
    assert len(lost) == 1 and "disk full" in lost[0]
    assert len(log_path.read_text().splitlines()) == 3


def _limited(limit_bytes: int):
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return preexec


@pytest.mark.slow
@pytest.mark.integration
def test_a_testbed_under_a_file_size_limit_still_ends_with_its_summary(tmp_path):
    out = tmp_path / "tb"
    cmd = [sys.executable, "-m", "multispin", "testbed", "--pair", "tiny", "--devices", "2"]
    cmd += ["--max-new-tokens", "24", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": SRC}
    run = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=300, preexec_fn=_limited(4096), cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr[-2000:]
    warned = [line for line in run.stderr.splitlines() if "not written" in line]
    assert any("rounds log" in line for line in warned) and any("testbed summary" in line for line in warned)
    assert all("disk full (File too large)" in line for line in warned), warned
    assert "Traceback" not in run.stderr
    assert "goodput" in run.stdout.lower() or "tokens" in run.stdout  # the summary table is printed
    assert not (out / "summary.json").exists()  # no truncated document left behind
    rows = [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]
    assert rows  # whole lines up to the limit, none cut


@pytest.mark.slow
@pytest.mark.integration
def test_a_pool_whose_result_cannot_be_written_still_prints_its_texts(tmp_path):
    pair = load_tiny_pair()
    cfg = ServerConfig.make(port=0, expected_devices=2, max_new_tokens=12, seed=4, join_timeout_s=120)
    server = EdgeServer(cfg, pair, SECRET, policy=fixed_policy(3, seed=cfg.seed))
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault("summary", server.run()), daemon=True)
    th.start()
    assert server.ready.wait(30)
    result = tmp_path / "pool.json"
    cmd = [sys.executable, "-m", "multispin", "device", "--devices", "0-1", "--pair", "tiny", "--insecure"]
    cmd += ["--server", server.endpoint, "--result", str(result)]
    env = {**os.environ, "PYTHONPATH": SRC, SECRET_ENV: SECRET}
    # SIGXFSZ inherited as the default: the command line itself must turn it into EFBIG
    run = subprocess.run(
        cmd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: (signal.signal(signal.SIGXFSZ, signal.SIG_DFL), _limited(200)()),
    )
    th.join(60)
    assert run.returncode == 0, run.stderr[-2000:]
    warned = [line for line in run.stderr.splitlines() if line.startswith("warning:")]
    assert warned == [f"warning: --result {result}: not written: disk full (File too large)"]
    texts = box["summary"].devices
    assert all(r.finished for r in texts.values())
    for d in (0, 1):
        assert f"--- device {d} ---" in run.stdout
        decoded = pair.tokenizer.decode(texts[d].generated, skip_special_tokens=True)
        assert decoded in run.stdout
    assert not result.exists()
