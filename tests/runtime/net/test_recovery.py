"""Nothing is lost: the server killed (-9) mid-run and restarted on its journal, a device killed
(-9) and restarted, a device stopped past the round timeout and continued. Every device's final
text is byte-identical to an uninterrupted run with the same seed, and no round is committed
twice. The reference is the in-process round loop: randomness is keyed on (seed, device, committed
length), so a device's text depends neither on the server round nor on its batch."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from multispin.models.hf import HFBatchedLM, HFSequenceLM
from multispin.models.prompts import encode_prompt
from multispin.models.tiny import load_tiny_pair
from multispin.runtime.net.device import build_device_client
from multispin.runtime.net.launcher import free_port
from multispin.runtime.net.server import EdgeServer
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.round import roles
from multispin.runtime.round.engine import PolicyPair
from multispin.runtime.round.local import RandomMode, UniformDraftLength, fixed_policy, run_rounds
from multispin.runtime.security.keys import create_keyring
from multispin.runtime.store.journal import Journal
from multispin.speculative.codecs import make_codec
from multispin.speculative.warp import SamplingParams

pytestmark = [pytest.mark.slow, pytest.mark.integration]  # real sockets and processes

K, MAX_NEW, GAMMA, SEED = 4, 24, 3, 5
PROMPTS = ["Hello edge server", "The channel is", "abc", "Speculative decoding at the edge"]


@pytest.fixture(scope="module")
def pair():
    return load_tiny_pair()


@pytest.fixture(scope="module")
def expected(pair) -> dict[int, list[int]]:
    """Every device's tokens from the uninterrupted in-process loop."""
    codec = make_codec("dense-fp32")
    server = roles.VerifierServer(HFBatchedLM(pair.target, pair.vocab_size), SamplingParams(), codec, codec, SEED)
    devices = {
        k: roles.DraftDevice(
            k,
            HFSequenceLM(pair.drafts[pair.default_draft], pair.vocab_size),
            SamplingParams(),
            codec,
            codec,
            SEED,
            encode_prompt(pair, PROMPTS[k]),
        )
        for k in range(K)
    }
    run_rounds(server, devices, PolicyPair(UniformDraftLength(GAMMA), RandomMode(SEED)), MAX_NEW, pair.eos_token_ids)
    return {k: d.generated for k, d in devices.items()}


def _rounds_logged(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if '"event":"round"' in line)


def _wait_for(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _thread_device(pair, endpoint, k, keys):
    client = build_device_client(
        endpoint, k, None, pair, None, PROMPTS[k], keys=keys, server_timeout_s=60, reconnects=20
    )
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault("outcome", client.run()), daemon=True)
    th.start()
    return th, box


def _assert_journal_exact(path: Path, expected: dict[int, list[int]], pair) -> None:
    """The journal holds each device's tokens once, in order: no round committed twice."""
    with Journal(path, readonly=True) as j:
        rec = j.recover()
        assert j.integrity_check() == "ok"
    for k in range(K):
        s = rec.sessions[k]
        assert list(s.session.prompt_ids) + s.tokens == encode_prompt(pair, PROMPTS[k]) + expected[k], k
    assert rec.completed == "done"


def _serve_cmd(port, keys, journal, log):
    return [
        sys.executable,
        "-m",
        "multispin",
        "serve",
        "--pair",
        "tiny",
        "--port",
        str(port),
        "--devices",
        str(K),
        "--max-new-tokens",
        str(MAX_NEW),
        "--draft-len",
        str(GAMMA),
        "--seed",
        str(SEED),
        "--threads",
        "1",
        "--keys",
        str(keys),
        "--journal",
        str(journal),
        "--log",
        str(log),
        "--round-timeout",
        "20",
        "--join-timeout",
        "60",
    ]


def _serve_and_kill_at(pair, tmp_path: Path, kill_after: int):
    """`multispin serve` on a fresh journal with K thread devices, killed with -9 once round
    `kill_after` is logged. Returns (port, server keys, journal, env, devices) for the restart."""
    server_keys, device_keys = create_keyring(tmp_path / "keys", range(K))
    port, journal = free_port(), tmp_path / "journal.sqlite"
    env = dict(os.environ, MULTISPIN_TEST_THREADS="1")
    first = subprocess.Popen(
        _serve_cmd(port, server_keys, journal, tmp_path / "a.jsonl"),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    devices = [_thread_device(pair, f"tcp://127.0.0.1:{port}", k, device_keys[k]) for k in range(K)]
    try:
        _wait_for(
            lambda: _rounds_logged(tmp_path / "a.jsonl") >= kill_after or first.poll() is not None,
            240,
            f"round {kill_after}",
        )
        assert first.poll() is None, first.communicate()[1]
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    return port, server_keys, journal, env, devices


@pytest.mark.parametrize("kill_after", sorted(random.Random(12).sample(range(1, 7), 2)))
def test_server_killed_at_a_round_and_restarted_from_its_journal(pair, expected, tmp_path, kill_after):
    port, server_keys, journal, env, devices = _serve_and_kill_at(pair, tmp_path, kill_after)
    second = None
    try:
        second = subprocess.Popen(
            _serve_cmd(port, server_keys, journal, tmp_path / "b.jsonl"),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out, err = second.communicate(timeout=300)
    finally:
        if second is not None and second.poll() is None:
            second.kill()
    assert second.returncode == 0, err
    assert "resuming" in err and "stopped (done)" in out
    # resumed, not regenerated from the prompt (the same seed would regenerate the same text)
    start = json.loads((tmp_path / "b.jsonl").read_text().splitlines()[0])
    assert start["event"] == "start" and start["recovered"] == list(range(K)) and start["next_round"] >= kill_after
    for th, _box in devices:
        th.join(60)
    for k, (_th, box) in enumerate(devices):
        outcome = box["outcome"]
        assert outcome.finished and outcome.generated == expected[k], f"device {k}"
        assert outcome.sessions == 2  # one session per server process
        assert outcome.server_digest == outcome.digest
    _assert_journal_exact(journal, expected, pair)


def test_a_damaged_journal_is_refused_and_repair_resumes_with_the_same_texts(pair, expected, tmp_path, caplog):
    """kill -9 at round 3 leaves the rounds in the WAL; half the WAL is cut off. `serve` on it is
    refused (one line, exit 2: it used to resume at an earlier round without a word, though the
    devices held COMMITs for the lost rounds); `serve --journal-repair` resumes from the last
    good round, the devices take the shorter record and regenerate the lost rounds, and every
    text is byte-identical to the uninterrupted run."""
    port, server_keys, journal, env, devices = _serve_and_kill_at(pair, tmp_path, 3)
    second = None
    try:
        wal = Path(f"{journal}-wal")
        os.truncate(wal, wal.stat().st_size // 2)
        refused = subprocess.run(
            _serve_cmd(port, server_keys, journal, tmp_path / "b.jsonl"),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert refused.returncode == 2
        assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
        assert "missing" in refused.stderr and "--journal-repair" in refused.stderr
        assert not (tmp_path / "b.jsonl").exists()  # refused before it started anything
        second = subprocess.Popen(
            _serve_cmd(port, server_keys, journal, tmp_path / "c.jsonl") + ["--journal-repair"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out, err = second.communicate(timeout=300)
    finally:
        if second is not None and second.poll() is None:
            second.kill()
    assert second.returncode == 0, err
    assert "journal repaired: resuming" in err and "stopped (done)" in out
    log = [json.loads(line) for line in (tmp_path / "c.jsonl").read_text().splitlines()]
    repaired = next(e for e in log if e["event"] == "journal_repaired")
    assert repaired["lost_rounds"] and repaired["kept_aside"]
    for th, _box in devices:
        th.join(60)
    for k, (_th, box) in enumerate(devices):
        outcome = box["outcome"]
        assert outcome.finished and outcome.generated == expected[k], f"device {k}"
        assert outcome.server_digest == outcome.digest
    assert "shorter than this device's (its journal was repaired)" in caplog.text
    _assert_journal_exact(journal, expected, pair)


def _server_thread(pair, tmp_path, round_timeout_s, on_round):
    server_keys, device_keys = create_keyring(tmp_path / "keys", range(K))
    config = ServerConfig.make(
        port=0,
        expected_devices=K,
        max_new_tokens=MAX_NEW,
        seed=SEED,
        round_timeout_s=round_timeout_s,
        join_timeout_s=120,
        idle_timeout_s=120,
    )
    server = EdgeServer(
        config,
        pair,
        keys=server_keys,
        journal=tmp_path / "journal.sqlite",
        policy=fixed_policy(GAMMA, seed=SEED),
        log_path=tmp_path / "server.jsonl",
        on_round=on_round,
    )
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault("summary", server.run()), daemon=True)
    th.start()
    assert server.ready.wait(30)
    return server, th, box, device_keys


def _device_process(server, k, keys, result):
    cmd = [
        sys.executable,
        "-m",
        "multispin",
        "device",
        "--server",
        server.endpoint,
        "--device-id",
        str(k),
        "--pair",
        "tiny",
        "--prompt",
        PROMPTS[k],
        "--keys",
        str(keys),
        "--threads",
        "1",
        "--result",
        str(result),
        "--server-timeout",
        "60",
        "--reconnects",
        "20",
    ]
    return subprocess.Popen(
        cmd, env=dict(os.environ, MULTISPIN_TEST_THREADS="1"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_device_killed_or_stopped_past_the_timeout_ends_with_the_same_text(pair, expected, tmp_path, fault):
    """Device 0 is a process: SIGKILL at round 3 and a fresh process resumes it, or SIGSTOP at round
    3 for longer than the round timeout (the server drops it and goes on), then SIGCONT."""
    seen = threading.Event()
    server, th, box, keys = _server_thread(
        pair, tmp_path, 3.0 if fault == "stop" else 20.0, lambda ev: ev.round >= 3 and seen.set()
    )
    others = [_thread_device(pair, server.endpoint, k, keys[k]) for k in range(1, K)]
    proc = _device_process(server, 0, keys[0], tmp_path / "d0.json")
    try:
        assert seen.wait(240)
        if fault == "kill":
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            proc = _device_process(server, 0, keys[0], tmp_path / "d0.json")
        else:
            proc.send_signal(signal.SIGSTOP)
            time.sleep(5.0)  # past the 3 s round timeout: the server drops device 0
            proc.send_signal(signal.SIGCONT)
        assert proc.wait(240) == 0, proc.communicate()[1]
        th.join(240)
    finally:
        if proc.poll() is None:
            proc.kill()
    summary = box["summary"]
    assert summary.stop_reason == "done"
    for k in range(K):
        assert summary.devices[k].generated == expected[k], f"device {k}"
        assert summary.devices[k].digest_match
    assert summary.devices[0].sessions == 2 and summary.devices[0].drops
    for t, b in others:
        t.join(60)
        assert b["outcome"].generated == expected[b["outcome"].device_id]
    _assert_journal_exact(tmp_path / "journal.sqlite", expected, pair)
