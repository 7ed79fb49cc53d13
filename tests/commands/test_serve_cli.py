"""`multispin serve`: a damaged journal is one line and exit 2 before any model is
loaded; the small mistakes of point 6 are one line naming the flag; the exit code says whether
every device finished."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from multispin.commands._outcome import serve_failure
from multispin.runtime.wire.records import DeviceRecord, ServerSummary

# real sockets, processes or models: `make test-fast` leaves these out
pytestmark = pytest.mark.integration

_CRASHED_WRITER = textwrap.dedent("""
    import json, os, sys
    from multispin.runtime.store.journal import DeviceRound, Journal, SessionRecord
    j = Journal(sys.argv[1])
    j.open_session(SessionRecord(0, "key-0", (1, 2), json.loads(sys.argv[2]), "dense-fp32", "dense-fp32", 0))
    for r in range(30):
        j.commit_round(r, {0: DeviceRound((r,), 1)})
    os._exit(0)  # the rounds stay in the WAL, as a kill -9 leaves them
""")


def _serve(multispin, *args: str):
    return multispin(
        "serve",
        "--pair",
        "tiny",
        "--insecure",
        "--secret",
        "serve-cli-test-secret",
        "--port",
        "0",
        "--join-timeout",
        "0.3",
        "--idle-timeout",
        "0.3",
        *args,
    )


def _crashed_journal(tmp_path, sampling: dict | None = None):
    path = tmp_path / "j.sqlite"
    subprocess.run(
        [sys.executable, "-c", _CRASHED_WRITER, str(path), json.dumps(sampling or {})], check=True, timeout=60
    )
    return path


def _tiny_session_params() -> dict:
    """What `serve --pair tiny` with its defaults records for a session (a repaired journal must
    agree with the server that resumes it)."""
    from multispin.models.registry import resolve_pair
    from multispin.runtime.net.server import EdgeServer
    from multispin.runtime.net.server_config import ServerConfig

    return EdgeServer(ServerConfig.make(port=0), resolve_pair("tiny"), "serve-cli-test-secret")._session_params


@pytest.mark.parametrize("damage", ["deleted WAL", "edited token"])
def test_a_damaged_journal_is_one_line_and_exit_2_before_the_model_loads(multispin, tmp_path, monkeypatch, damage):
    path = _crashed_journal(tmp_path)
    if damage == "deleted WAL":
        for tail in ("-wal", "-shm"):
            os.unlink(f"{path}{tail}")
    else:
        con = sqlite3.connect(path)
        con.execute("UPDATE round_tokens SET tokens = '[7]' WHERE round_index = 12")
        con.commit()
        con.close()

    def no_model(*a, **k):  # the refusal must come first: loading a real pair takes minutes
        raise AssertionError("the model was loaded before the journal was checked")

    monkeypatch.setattr("multispin.models.placement.place_pair", no_model)
    res = _serve(multispin, "--journal", str(path))
    assert res.code == 2
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: ") and "--journal-repair" in lines[0]
    assert "Traceback" not in res.err
    assert ("rounds 0..29 are missing" if damage == "deleted WAL" else "round 12 does not match") in lines[0]


def test_journal_repair_resumes_with_a_warning(multispin, tmp_path):
    path = _crashed_journal(tmp_path, _tiny_session_params())
    os.truncate(f"{path}-wal", os.path.getsize(f"{path}-wal") // 2)
    res = _serve(multispin, "--journal", str(path), "--journal-repair", "--log", str(tmp_path / "log.jsonl"))
    assert res.code == 1  # the run itself: device 0 never came back
    assert res.err.strip().splitlines()[-1].startswith("error: device(s) 0 did not finish (the server stopped: idle)")
    assert "WARNING multispin.server: journal repaired: resuming after round" in res.err and "regenerated" in res.err
    assert '"event":"journal_repaired"' in (tmp_path / "log.jsonl").read_text()
    assert list(tmp_path.glob("j.sqlite.damaged-*"))


@pytest.mark.parametrize(
    "args, says",
    [
        (["--journal", "{tmp}/no/such/dir/j.sqlite"], "error: --journal: the folder {tmp}/no/such/dir does not exist"),
        (["--log", "{tmp}/nowhere/log.jsonl", "--no-journal"], "error: --log: the folder {tmp}/nowhere does not exist"),
        (
            ["--max-connections", "2", "--max-pending", "10", "--no-journal"],
            "error: --max-pending: 10 is more than --max-connections 2",
        ),
        (["--journal-repair", "--no-journal"], "error: --journal-repair: there is no journal to repair"),
        (["--journal-check", "fast"], "error: --journal-check:"),
    ],
)
def test_mistakes_are_one_line_naming_the_flag_and_create_nothing(multispin, tmp_path, args, says):
    res = _serve(multispin, *[a.format(tmp=tmp_path) for a in args])
    assert res.code == 2
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(says.format(tmp=tmp_path)), res.err
    assert not (tmp_path / "no").exists() and not (tmp_path / "nowhere").exists()


def test_max_connections_alone_lowers_only_the_default_pending_limit():
    from multispin.models.base import LoadedPair
    from multispin.models.synthetic import MarkovBatchedLM, make_tables
    from multispin.runtime.net.server import EdgeServer
    from multispin.runtime.net.server_config import ServerConfig

    target, _ = make_tables(16, seed=0)
    pair = LoadedPair(name="markov", tokenizer=None, target=None, drafts={}, vocab_size=16)
    server = EdgeServer(
        ServerConfig.make(port=0, max_connections=2), pair, "serve-cli-test-secret", target_lm=MarkovBatchedLM(target)
    )
    assert server.proto.budget.limits.max_pending == 2
    from multispin.errors import ConfigError

    with pytest.raises(ConfigError, match="max_pending: must be in 1..max_connections=2"):
        EdgeServer(
            ServerConfig.make(port=0, max_connections=2, max_pending=10),
            pair,
            "serve-cli-test-secret",
            target_lm=MarkovBatchedLM(target),
        )


def test_a_bind_failure_is_one_line_without_the_waiting_banner(multispin):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = multispin(
            "serve",
            "--pair",
            "tiny",
            "--insecure",
            "--secret",
            "serve-cli-test-secret",
            "--port",
            str(port),
            "--no-journal",
        )
    assert res.code == 2
    assert "waiting for" not in res.err
    lines = res.err.strip().splitlines()
    # said before the model loads (the server's own bind error remains for a port taken in between)
    assert lines[-1].startswith(f"error: --port: {port} on 127.0.0.1 is in use") and len(lines) == 1


def test_the_banner_names_the_bound_endpoint_and_no_device_is_exit_1(multispin):
    t0 = time.monotonic()
    res = _serve(multispin, "--no-journal")
    assert time.monotonic() - t0 < 60
    assert res.code == 1
    assert "waiting for 1 device(s)" in res.err and "tcp://127.0.0.1:" in res.err
    assert res.err.strip().splitlines()[-1] == "error: no device joined within --join-timeout"


def _record(d: int, finished: bool, match, drops=()) -> DeviceRecord:
    return DeviceRecord(d, "x", 2, [1, 2, 3], finished, 1, list(drops), [], "aa", "aa", match)


@pytest.mark.parametrize(
    "stop, devices, failure",
    [
        ("done", [_record(0, True, True), _record(1, True, True)], None),
        ("rounds", [_record(0, False, None)], None),  # stopped as asked
        ("SIGTERM", [_record(0, False, None)], None),
        ("done", [_record(0, True, True), _record(1, True, False)], "device(s) 1: the device's digest differs"),
        (
            "idle",
            [_record(0, True, True), _record(1, False, None, ["no DRAFT within 3 s in round 4"])],
            "device(s) 1 did not finish (the server stopped: idle); device 1's session ended: no DRAFT",
        ),
        ("no devices", [], "no device joined"),
    ],
)
def test_serve_failure(stop, devices, failure):
    summary = ServerSummary(5, stop, 1.0, {r.device_id: r for r in devices}, 0)
    got = serve_failure(summary)
    assert (got is None) if failure is None else got.startswith(failure)
