"""The journal under an operator's adversary: side files deleted after a crash, a flipped bit in
the schema or in a session row, another process holding SQLite's write lock.

Each was reproduced on 127.0.0.1 before the change: ``rm j.sqlite-*`` after a kill -9 gave a
silent fresh start at round 0; ``PRIMARY`` → ``PRHMARY`` in the sessions table's schema gave a
49-line traceback; a flipped session field was resumed (or blamed on the operator's settings
after the model loaded); a held write lock ended the run after 5 s. Now each is one line (exit 2
from `serve`, before any model loads), or, for a lock taken during a run, waited out.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from multispin.errors import JournalDamaged, JournalError
from multispin.runtime.store.journal import DeviceRound, Journal

K, N = 3, 20
SECRET = "journal-attack-test-secret"

_WRITER = textwrap.dedent("""
    import json, os, sys
    from multispin.runtime.store.journal import DeviceRound, Journal, SessionRecord
    j = Journal(sys.argv[1])
    for d in range({k}):
        j.open_session(SessionRecord(d, f"key-{{d}}", tuple(range(10 * d + 1, 10 * d + 6)),
                                     json.loads(sys.argv[2]), "dense-fp32", "dense-fp32", 1234567 + d))
    for r in range({n}):
        j.commit_round(r, {{d: DeviceRound((100 * d + r, 7), 2, "ul", 10) for d in range({k})}})
    if sys.argv[3] == "crash":
        os._exit(0)  # as a kill -9 leaves it: the rounds in the WAL
    j.close()
""").format(k=K, n=N)


def _journal(tmp_path: Path, crash: bool, sampling: dict | None = None) -> Path:
    path = tmp_path / "j.sqlite"
    subprocess.run(
        [
            sys.executable,
            "-c",
            _WRITER,
            str(path),
            json.dumps(sampling or {"temperature": 1.0}),
            "crash" if crash else "close",
        ],
        check=True,
        timeout=60,
    )
    return path


def _serve_refuses(multispin, monkeypatch, path: Path, says: str) -> str:
    """`serve` on the journal: exit 2, one line naming the journal, before any model is loaded."""

    def no_model(*a, **k):
        raise AssertionError("the model was loaded before the journal was checked")

    monkeypatch.setattr("multispin.models.placement.place_pair", no_model)
    res = multispin(
        "serve",
        "--pair",
        "tiny",
        "--insecure",
        "--secret",
        SECRET,
        "--port",
        "0",
        "--join-timeout",
        "0.3",
        "--journal",
        str(path),
    )
    lines = res.err.strip().splitlines()
    assert res.code == 2, res.err
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}"), res.err
    assert says in lines[0], lines[0]
    return lines[0]


# ---------------------------------------------------------------- vanished side files


def test_side_files_deleted_after_a_crash_are_refused(multispin, monkeypatch, tmp_path):
    """`rm j.sqlite-*` after a kill -9 (WAL, -shm, head and writer lock): every round was in the
    WAL, so the main file alone looks like an empty journal; it used to start again at round 0."""
    path = _journal(tmp_path, crash=True)
    side = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("j.sqlite-"))
    assert side == ["j.sqlite-head", "j.sqlite-shm", "j.sqlite-wal", "j.sqlite-writer.lock"]
    for name in side:
        (tmp_path / name).unlink()
    with pytest.raises(JournalDamaged, match="head file j.sqlite-head is missing .*side files deleted"):
        Journal(path)
    _serve_refuses(multispin, monkeypatch, path, "--journal-repair")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j.sqlite"]  # refused as found
    with Journal(path, repair=True) as j:  # the repair still resumes what the main file holds
        assert j.repaired is not None and j.recover().next_round == 0


def test_a_fresh_journal_only_on_purpose(tmp_path):
    """Controls: a journal whose side files are all there resumes; one whose main file was
    removed too (the operator's "start again") starts fresh; a new journal's main file already
    holds the schema, so it alone is recognised."""
    path = _journal(tmp_path, crash=True)
    with Journal(path) as j:
        assert j.recover().next_round == N
    for p in tmp_path.iterdir():
        p.unlink()
    with Journal(path) as j:
        assert j.recover().next_round == 0
        shutil.copyfile(path, tmp_path / "main-only")  # while open: the main file without its WAL
    con = sqlite3.connect(tmp_path / "main-only")
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    con.close()
    assert {"sessions", "rounds", "round_tokens"} <= tables


# ---------------------------------------------------------------- flipped bits


def _flip_primary(path: Path, which: int) -> None:
    raw = bytearray(path.read_bytes())
    hits = [m.start() for m in re.finditer(rb"PRIMARY", raw)]
    raw[hits[which] + 2] ^= 0x01  # PRIMARY -> PRHMARY
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_bit_flipped_in_the_schema_is_one_line(multispin, monkeypatch, tmp_path, which):
    """Every ``PRIMARY`` of the schema page flipped to ``PRHMARY``: a table that no longer
    parses, or (the sessions table) an INTEGER PRIMARY KEY turned into a plain column whose ids
    read as NULL, which used to end in a 49-line traceback."""
    path = _journal(tmp_path, crash=False)
    _flip_primary(path, which)
    _serve_refuses(multispin, monkeypatch, path, "damaged journal")


@pytest.mark.parametrize(
    "field, sql, says",
    [
        ("seed", "UPDATE sessions SET seed = 1234569 WHERE device_id = 1", "device 1's session does not match"),
        (
            "prompt",
            "UPDATE sessions SET prompt_ids = '[11,12,13,14,16]' WHERE device_id = 1",
            "device 1's session does not match",
        ),
        ("identity", "UPDATE sessions SET identity = 'key-9' WHERE device_id = 2", "device 2's session does not match"),
        ("deleted row", "DELETE FROM sessions WHERE device_id = 2", "device 2's session row was deleted"),
    ],
)
def test_a_changed_session_is_refused_before_the_model_loads(multispin, monkeypatch, tmp_path, field, sql, says):
    """A session's seed used to be caught only after the model loaded, blaming the operator's
    settings; its prompt made every resuming device refused; a deleted row read as "(2)"."""
    path = _journal(tmp_path, crash=True)
    con = sqlite3.connect(path)
    con.execute(sql)
    con.commit()
    con.close()
    line = _serve_refuses(multispin, monkeypatch, path, says)
    assert "table sessions" in line


def test_repair_leaves_out_a_changed_session(tmp_path):
    """`--journal-repair` on a flipped seed: the damaged session is not kept (its device starts
    again from its prompt, the same text since the seed is the server's), the others are, and
    the rebuilt journal opens cleanly."""
    path = _journal(tmp_path, crash=True)
    con = sqlite3.connect(path)
    con.execute("UPDATE sessions SET seed = 1 WHERE device_id = 1")
    con.commit()
    con.close()
    with Journal(path, repair=True) as j:
        assert "device 1's session does not match" in j.repaired.problem
        rec = j.recover()
        assert sorted(rec.sessions) == [0, 2] and rec.next_round == 0  # device 1 was in round 0
        assert {d: s.session.seed for d, s in rec.sessions.items()} == {0: 1234567, 2: 1234569}
    with Journal(path) as j:
        assert sorted(j.recover().sessions) == [0, 2]


def test_single_bit_flips_in_the_sessions_page_are_refused_or_harmless(tmp_path):
    """300 seeded single-bit flips over the page that holds the sessions: each is refused in one
    line, or the journal recovers exactly what was written (a flip in free space). Before the
    seal, flips in a prompt, seed or identity were resumed silently."""
    (tmp_path / "orig").mkdir()
    original = _journal(tmp_path / "orig", crash=False)
    with Journal(original, readonly=True) as j:
        want = j.recover()
    raw = original.read_bytes()
    page = raw.find(json.dumps(list(range(11, 16)), separators=(",", ":")).encode()) // 4096
    rng = random.Random(40)
    bits = rng.sample(range(page * 4096 * 8, (page + 1) * 4096 * 8), 300)
    outcomes = {"refused": 0, "identical": 0}
    for n, bit in enumerate(bits):
        case = tmp_path / f"flip{n}"
        case.mkdir()
        path = case / "j.sqlite"
        damaged = bytearray(raw)
        damaged[bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(bytes(damaged))
        (case / "j.sqlite-head").write_bytes((original.parent / "j.sqlite-head").read_bytes())
        try:
            with Journal(path, readonly=True) as j:
                got = j.recover()
        except JournalError as exc:
            assert "\n" not in str(exc)
            outcomes["refused"] += 1
            continue
        assert got == want, f"bit {bit} changed what the journal recovers without being refused"
        outcomes["identical"] += 1
    assert outcomes["refused"] > 0 and outcomes["identical"] > 0, outcomes  # both kinds of flip occurred


# ---------------------------------------------------------------- SQLite's write lock

_HOLDER = textwrap.dedent("""
    import sqlite3, sys, time
    con = sqlite3.connect(sys.argv[1], isolation_level=None)
    con.execute("BEGIN IMMEDIATE")
    print("held", flush=True)
    sys.stdin.readline()  # until the test says so
    con.execute("ROLLBACK")
""")


def _hold_write_lock(path: Path) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def _release(holder: subprocess.Popen) -> None:
    holder.stdin.write("\n")
    holder.stdin.flush()
    holder.wait(timeout=10)


def test_a_write_lock_held_at_start_is_refused_in_one_line(multispin, monkeypatch, tmp_path):
    path = _journal(tmp_path, crash=False)
    holder = _hold_write_lock(path)
    try:
        with pytest.raises(JournalError, match="another process holds its write lock"):
            Journal(path, timeout_s=0.2)
        _serve_refuses(multispin, monkeypatch, path, "another process holds its write lock")
    finally:
        _release(holder)
    with Journal(path) as j:  # control: released, it opens
        assert j.recover().next_round == N


def test_a_write_lock_taken_during_a_run_is_waited_out_then_given_up(tmp_path):
    path = _journal(tmp_path, crash=False)
    j = Journal(path, timeout_s=0.1, lock_wait_s=60.0)
    try:
        holder = _hold_write_lock(path)
        threading.Timer(1.0, _release, (holder,)).start()  # a backup that takes a second
        assert j.commit_round(N, {d: DeviceRound((1,), 1) for d in range(K)})  # waited, then written
        j.lock_wait_s = 0.3
        holder = _hold_write_lock(path)
        try:
            with pytest.raises(JournalError, match=r"held its write lock for over 0\.3 s; gave up"):
                j.commit_round(N + 1, {d: DeviceRound((1,), 1) for d in range(K)})
        finally:
            _release(holder)
        assert j.commit_round(N + 1, {d: DeviceRound((1,), 1) for d in range(K)})  # nothing was half-written
    finally:
        j.close()
