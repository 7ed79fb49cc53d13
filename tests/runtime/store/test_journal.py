"""The crash-safe journal: sessions and rounds survive a kill -9 of the writer, whole or not at
all; no round is committed twice; a reader beside the writer sees whole rounds; a file that is
not a journal is one clear error."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from multispin.errors import JournalError
from multispin.runtime.store.journal import DeviceRound, Journal, SessionRecord

K = 4


def _session(d: int, **over) -> SessionRecord:
    kw = dict(
        device_id=d,
        identity=f"key-{d}",
        prompt_ids=(1, 2, 3 + d),
        sampling={"temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 32},
        ul_codec="dense-fp32",
        dl_codec="sparse:v_eff=64,q=8",
        seed=7,
    )
    kw.update(over)
    return SessionRecord(**kw)


def _round(r: int, k: int = K) -> dict[int, DeviceRound]:
    # deterministic content: device d commits (r % 3) + 1 tokens in round r
    return {
        d: DeviceRound(
            tuple(1000 * d + 10 * r + i for i in range(r % 3 + 1)),
            draft_len=4,
            mode=(None, "ul", "dl")[(r + d) % 3],
            bits=(r + d) * 100,
        )
        for d in range(k)
    }


def _expected_tokens(d: int, rounds: int) -> list[int]:
    return [t for r in range(rounds) for t in _round(r)[d].tokens]


def test_sessions_and_rounds_round_trip(tmp_path):
    path = tmp_path / "j.db"
    with Journal(path) as j:
        for d in range(K):
            assert j.open_session(_session(d)) is True
        for r in range(5):
            assert j.commit_round(r, _round(r)) is True
    with Journal(path) as j:
        rec = j.recover()
        assert rec.next_round == 5
        assert sorted(rec.sessions) == list(range(K))
        for d in range(K):
            s = rec.sessions[d]
            assert s.session == _session(d)
            assert s.tokens == _expected_tokens(d, 5) and s.rounds == 5
        assert j.round(3) == _round(3)
        assert j.integrity_check() == "ok"
        mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"


def test_an_empty_journal_recovers_to_round_zero(tmp_path):
    with Journal(tmp_path / "j.db") as j:
        rec = j.recover()
    assert rec.sessions == {} and rec.next_round == 0


def test_no_round_is_committed_twice(tmp_path):
    with Journal(tmp_path / "j.db") as j:
        for d in range(K):
            j.open_session(_session(d))
        assert j.commit_round(0, _round(0)) is True
        assert j.commit_round(0, _round(0)) is False  # the same round again: ignored
        other = dict(_round(0))
        other[1] = DeviceRound((99,), 4, "ul", 1)
        with pytest.raises(JournalError, match="round 0 is already committed"):
            j.commit_round(0, other)
        with pytest.raises(JournalError, match="out of order"):
            j.commit_round(2, _round(2))
        with pytest.raises(JournalError, match="no session for device"):
            j.commit_round(1, {**_round(1), 9: DeviceRound((1,), 4)})
        with pytest.raises(JournalError, match="mode must be one of"):
            j.commit_round(1, {0: DeviceRound((1,), 4, "xx")})
        assert j.commit_round(1, _round(1)) is True  # a refused commit wrote nothing
        rec = j.recover()
        assert rec.next_round == 2
        assert rec.sessions[0].tokens == _expected_tokens(0, 2)
        n = (
            sqlite3.connect(tmp_path / "j.db")
            .execute("SELECT count(*), count(DISTINCT round_index) FROM round_tokens")
            .fetchone()
        )
        assert n == (2 * K, 2)


def test_a_device_id_names_one_session(tmp_path):
    with Journal(tmp_path / "j.db") as j:
        assert j.open_session(_session(0)) is True
        assert j.open_session(_session(0)) is False
        with pytest.raises(JournalError, match="device 0 already has another session .different prompt"):
            j.open_session(_session(0, prompt_ids=(5, 6)))


def test_one_writer_at_a_time_and_readers_are_read_only(tmp_path):
    path = tmp_path / "j.db"
    with Journal(path) as j:
        j.open_session(_session(0))
        with pytest.raises(JournalError, match="already open for writing"):
            Journal(path)
        with Journal(path, readonly=True) as ro:
            assert list(ro.recover().sessions) == [0]
            with pytest.raises(JournalError, match="read-only"):
                ro.commit_round(0, {0: DeviceRound((1,), 1)})
    Journal(path).close()  # the lock went with the writer


_CHILD = textwrap.dedent("""
    import sys
    from multispin.runtime.store.journal import Journal
    sys.path.insert(0, {tests!r})
    from test_journal import K, _round, _session
    j = Journal({path!r})
    rec = j.recover()
    for d in range(K):
        j.open_session(_session(d))
    r = rec.next_round
    while True:
        j.commit_round(r, _round(r))
        print(r, flush=True)   # reported durable only after commit_round returned
        r += 1
""")


@pytest.mark.parametrize("after", [3, 17, 40])
def test_kill_9_while_committing_loses_no_reported_round_and_leaves_nothing_partial(tmp_path, after):
    path = tmp_path / "j.db"
    reported = -1
    for _life in range(2):  # killed twice: the second life resumes from the first one's journal
        code = _CHILD.format(tests=os.path.dirname(__file__), path=str(path))
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        reader = None
        try:
            start = reported
            for line in child.stdout:
                reported = int(line)
                # a reader in another process, beside the writer: whole rounds, never behind
                reader = reader or Journal(path, readonly=True)
                rec = reader.recover()
                assert rec.next_round >= reported + 1
                assert rec.sessions[K - 1].tokens == _expected_tokens(K - 1, rec.next_round)
                if reported >= start + after:
                    break
            os.kill(child.pid, signal.SIGKILL)  # most likely in the middle of the next commit
            child.wait(timeout=10)
            for line in child.stdout:  # what it reported before dying, not yet read
                reported = int(line)
        finally:
            if reader is not None:
                reader.close()
            child.kill()
            child.wait(timeout=10)
            child.stdout.close()
        assert child.returncode == -signal.SIGKILL
        with Journal(path) as j:
            assert j.integrity_check() == "ok"
            rec = j.recover()
            assert rec.next_round >= reported + 1, "a round reported durable is missing"
            assert rec.next_round <= reported + 2  # at most the one being committed at the kill
            for d in range(K):
                assert rec.sessions[d].tokens == _expected_tokens(d, rec.next_round)
                assert rec.sessions[d].rounds == rec.next_round
            reported = rec.next_round - 1


def test_a_reader_beside_the_writer_sees_only_whole_rounds(tmp_path):
    path = tmp_path / "j.db"
    with Journal(path) as j:
        for d in range(K):
            j.open_session(_session(d))
    done = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:  # a connection belongs to its thread: the writer opens its own
        try:
            with Journal(path) as writer:
                for r in range(60):
                    writer.commit_round(r, _round(r))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            done.set()

    t = threading.Thread(target=write)
    seen = []
    with Journal(path, readonly=True) as reader:
        t.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            finished = done.is_set()
            rec = reader.recover()
            for d in range(K):
                assert rec.sessions[d].tokens == _expected_tokens(d, rec.next_round)
            seen.append(rec.next_round)
            if finished:
                break
            time.sleep(0.001)
    t.join()
    assert not errors
    assert seen == sorted(seen) and seen[-1] == 60
    assert len(set(seen)) > 2  # the reader really read while the writer wrote


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_a_text_file_is_not_a_journal(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("these are not the rounds you are looking for\n" * 50)
    with pytest.raises(JournalError) as exc:
        Journal(path)
    msg = _one_line(exc)
    assert str(path) in msg and "not a multispin journal" in msg
    assert path.read_text().startswith("these are not")  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # no lock file left


def test_a_corrupted_journal_is_one_clear_error(tmp_path):
    path = tmp_path / "j.db"
    with Journal(path) as j:
        j.open_session(_session(0))
    with open(path, "r+b") as f:  # wreck the header and the first pages
        f.write(os.urandom(4096))
    for wal in (tmp_path / "j.db-wal", tmp_path / "j.db-shm"):
        wal.unlink(missing_ok=True)
    with pytest.raises(JournalError) as exc:
        Journal(path)
    assert str(path) in _one_line(exc)


def test_another_sqlite_database_is_not_a_journal(tmp_path):
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE users (name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(JournalError, match=r"not a multispin journal .* tables users") as exc:
        Journal(path)
    assert str(path) in _one_line(exc)


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "j.db"
    Journal(path).close()
    con = sqlite3.connect(path)
    con.execute("INSERT INTO schema_version VALUES (99, 0)")
    con.commit()
    con.close()
    with pytest.raises(JournalError, match="schema version 99 is newer"):
        Journal(path)


def test_an_older_schema_is_refused_in_one_line_not_migrated(tmp_path):
    """0.1 is unreleased: a journal of an older schema is refused, naming the file and what to do;
    the same file at the current version opens (the negative control)."""
    path = tmp_path / "j.db"
    Journal(path).close()
    Journal(path).close()
    con = sqlite3.connect(path)
    con.execute("UPDATE schema_version SET version = 3")
    con.commit()
    con.close()
    for readonly in (False, True):
        with pytest.raises(JournalError, match="schema version 3 is older .* not migrated") as exc:
            Journal(path, readonly=readonly)
        assert str(path) in _one_line(exc) and "--journal" in str(exc.value)


def test_paths_that_cannot_be_journals(tmp_path):
    with pytest.raises(JournalError, match="is a directory"):
        Journal(tmp_path)
    with pytest.raises(JournalError, match="no such journal"):
        Journal(tmp_path / "missing.db", readonly=True)
    with pytest.raises(JournalError, match="cannot"):
        Journal(tmp_path / "no" / "such" / "dir" / "j.db")
