"""A damaged journal is refused, never resumed.

The journals here are left as a kill -9 leaves them: a writer process commits 50 rounds and dies
without closing, so every round is still in the WAL (main file 4 KiB), as in the attack; or it
closes cleanly first, so the rounds are checkpointed into the main file (for the page damage).
Each damage is refused by ``Journal`` with one line that names the file, what is wrong and
``--journal-repair``, and leaves the files exactly as it found them. Before the chain and the
head file, every one of these was opened: a fresh run, or a resume at an earlier round, or an
edited token accepted. ``repair=True`` keeps the damaged files aside and resumes after the last
good round. The end-to-end run (devices' texts byte-identical after a repair) is in
test_recovery.py; the command line (exit 2) in tests/commands/test_serve_journal_cli.py.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from multispin.errors import JournalDamaged, JournalError
from multispin.runtime.store.journal import DeviceRound, Journal, SessionRecord

K, N = 3, 50

_WRITER = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {tests!r})
    from test_journal_damage import write_rounds
    j = write_rounds({path!r}, {n})
    if {crash}:
        os._exit(0)  # as a kill -9 leaves it: no close, no checkpoint, the rounds in the WAL
    j.close()
""")


def _tokens(d: int, r: int) -> tuple[int, ...]:
    return tuple(100 * d + r + i for i in range(8))


def write_rounds(path, n: int) -> Journal:
    j = Journal(path)
    for d in range(K):
        j.open_session(SessionRecord(d, f"key-{d}", (1, 2, 3), {"temperature": 1.0}, "dense-fp32", "dense-fp32", 7))
    for r in range(n):
        j.commit_round(r, {d: DeviceRound(_tokens(d, r), 4, "ul", 10) for d in range(K)})
    return j


def _journal(tmp_path: Path, crash: bool) -> Path:
    path = tmp_path / "j.sqlite"
    code = _WRITER.format(tests=os.path.dirname(__file__), path=str(path), n=N, crash=crash)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    return path


def _flip(path, offset: int, n: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        raw = f.read(n)
        f.seek(offset)
        f.write(bytes(b ^ 0xFF for b in raw))


def _sql(path, *statements: str) -> None:
    con = sqlite3.connect(path)
    for st in statements:
        con.execute(st)
    con.commit()
    con.close()


def _files(path: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.parent.iterdir())
        if p.name.startswith(path.name) and not p.name.endswith("-shm")
    }


def _page_flip(p):
    """40 bytes of SQLite page 4's header and cell pointers (the issue's case): the rounds still
    read back whole, so without quick_check it was resumed, and a later write failed."""
    _flip(p, 3 * 4096 + 8, 40)


def _delete(*tails):
    return lambda p: [Path(f"{p}{t}").unlink(missing_ok=True) for t in tails]


# (name, crash-state journal?, damage, what the refusal says, rounds a repair keeps)
DAMAGE = [
    ("page flip", False, _page_flip, "SQLite quick_check: On tree page 4 cell", None),
    ("truncated main file", False, lambda p: os.truncate(p, p.stat().st_size // 2), "no longer a readable database", 0),
    ("deleted WAL", True, _delete("-wal", "-shm"), "rounds 0..49 are missing", 0),
    ("0-byte file", True, lambda p: os.truncate(p, 0), "the journal file is empty (0 bytes)", 0),
    (
        "truncated WAL",
        True,
        lambda p: os.truncate(f"{p}-wal", os.path.getsize(f"{p}-wal") // 2),
        "rounds 25..49 are missing",
        25,
    ),
    (
        "flipped WAL bytes",
        True,
        lambda p: _flip(f"{p}-wal", os.path.getsize(f"{p}-wal") // 2, 64),
        "rounds 25..49 are missing",
        25,
    ),
    (
        "edited token",
        True,
        lambda p: _sql(p, "UPDATE round_tokens SET tokens = '[1,2,3]' WHERE round_index = 20 AND device_id = 1"),
        "round 20 does not match its chain link",
        20,
    ),
    (
        "deleted round row",
        True,
        lambda p: _sql(
            p, "DELETE FROM round_tokens WHERE round_index = 20", "DELETE FROM rounds WHERE round_index = 20"
        ),
        "round 20 is missing; the next round is 21",
        20,
    ),
    (
        "deleted last round",
        True,
        lambda p: _sql(
            p, "DELETE FROM round_tokens WHERE round_index = 49", "DELETE FROM rounds WHERE round_index = 49"
        ),
        "round 49 is missing",
        49,
    ),
    (
        "deleted tokens of a round",
        True,
        lambda p: _sql(p, "DELETE FROM round_tokens WHERE round_index = 7 AND device_id = 2"),
        "round 7 does not match its chain link",
        7,
    ),
    (
        "deleted file",
        True,
        _delete("", "-wal", "-shm"),
        "the journal file is missing but j.sqlite-head says round 49 committed",
        0,
    ),
    ("deleted head file", True, _delete("-head"), "head file j.sqlite-head is missing", N),
    ("damaged head file", True, lambda p: _flip(f"{p}-head", 0, 128), "head file is damaged", N),
]


@pytest.mark.parametrize("name, crash, damage, says, kept", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_damage_is_refused_in_one_line_and_left_as_found(tmp_path, name, crash, damage, says, kept):
    path = _journal(tmp_path, crash)
    damage(path)
    before = _files(path)
    with pytest.raises(JournalDamaged) as exc:
        Journal(path)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(str(path))  # the journal, or its head file
    assert says in msg
    assert "--journal-repair" in msg
    assert _files(path) == before  # nothing checkpointed, created or deleted by the refusal
    with pytest.raises(JournalDamaged):  # and again: a refusal is not a one-off
        Journal(path)


@pytest.mark.parametrize("name, crash, damage, says, kept", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_repair_keeps_the_damaged_files_and_resumes_after_the_last_good_round(
    tmp_path, name, crash, damage, says, kept
):
    path = _journal(tmp_path, crash)
    damage(path)
    before = _files(path)
    with Journal(path, repair=True) as j:
        assert j.repaired is not None and says in j.repaired.problem
        rec = j.recover()
        n = rec.next_round
        if kept is not None:
            assert n == kept
        for d, s in rec.sessions.items():  # what it kept is exactly what was committed
            assert s.tokens == [t for r in range(rec.next_round) for t in _tokens(d, r)]
        aside = j.repaired.kept_aside
        assert aside and all(p.exists() for p in aside)
        line = j.repaired.describe()
        assert "\n" not in line and (f"resuming after round {n - 1}" if n else "resuming from round 0") in line
        # the kept files are the damaged ones, byte for byte, under new names
        moved = {
            re.sub(r"\.damaged-\d{8}-\d{6}(-\d+)?", "", p.name): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in aside
        }
        assert {k: v for k, v in before.items() if k in moved} == moved
        j.commit_round(n, {d: DeviceRound((9,), 1) for d in rec.sessions})
    with Journal(path) as j:  # the rebuilt journal opens cleanly, with the round committed after
        assert j.recover().next_round == n + 1


def test_undamaged_journals_open_as_before(tmp_path):
    """Negative control: the same journals, undamaged (crash state and checkpointed), open with
    every round; so does one whose database is a round ahead of its head (a kill -9 between the
    two writes: that round's COMMITs were never sent)."""
    for crash in (True, False):
        sub = tmp_path / str(crash)
        sub.mkdir()
        path = _journal(sub, crash)
        with Journal(path, check="full") as j:
            assert j.recover().next_round == N and j.repaired is None
    head = path.with_name(path.name + "-head").read_bytes()
    with Journal(path) as j:
        j.commit_round(N, {d: DeviceRound((1,), 1) for d in range(K)})
    path.with_name(path.name + "-head").write_bytes(head)  # as if killed before the head write
    with Journal(path) as j:
        assert j.recover().next_round == N + 1
    with Journal(path) as j:  # and the head caught up
        assert j.recover().next_round == N + 1


def test_a_head_older_than_the_database_by_more_than_a_round_is_refused(tmp_path):
    path = _journal(tmp_path, crash=True)
    head = path.with_name(path.name + "-head")
    with Journal(path) as j:
        j.commit_round(N, {d: DeviceRound((1,), 1) for d in range(K)})
        old = head.read_bytes()
        j.commit_round(N + 1, {d: DeviceRound((1,), 1) for d in range(K)})
        j.commit_round(N + 2, {d: DeviceRound((1,), 1) for d in range(K)})
    head.write_bytes(old)
    with pytest.raises(JournalDamaged, match="head file is older than the database"):
        Journal(path)


def test_readers_check_the_chain_and_the_check_option_is_validated(tmp_path):
    path = _journal(tmp_path, crash=False)
    _sql(path, "UPDATE round_tokens SET tokens = '[5]' WHERE round_index = 3 AND device_id = 0")
    with pytest.raises(JournalDamaged, match="round 3"):
        Journal(path, readonly=True)
    with pytest.raises(JournalError, match="check: one of quick, full"):
        Journal(path, check="fast")
    with pytest.raises(JournalError, match="read-only journal cannot be repaired"):
        Journal(path, readonly=True, repair=True)
