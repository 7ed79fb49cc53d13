"""The crash-safe journal: every session and every committed round of the edge server, in SQLite.

What: one SQLite file holds each device's session (its identity, prompt token ids, sampling
parameters, codec specs, seed) and, per round, each device's committed token ids with the draft
length, correction mode and payload bits of that round. `Journal.commit_round` writes a
round in one transaction; when it returns, the round is on disk. `Journal.recover` gives
back every session with its committed tokens and the index of the next round.

Why: randomness is derived from (seed, device, round, purpose), so a server restarted from the
journal continues every device's text exactly where the crashed one left it. The server sends a
round's replies only after `Journal.commit_round` has returned, so no device ever sees a
token that a restart could take back.

How it stays safe:

- **WAL mode**: a commit appends to the write-ahead log; a crash mid-transaction leaves the last
  committed state (the torn tail of the log is ignored on reopen), and readers (a monitor, a
  ``sqlite3`` shell) read a consistent snapshot while the server writes, without blocking it.
- **synchronous=FULL**: in WAL mode ``NORMAL`` survives a crash of the process but not of the
  machine (power loss, kernel panic): the last commits may sit in the OS cache, un-synced. The
  server promises a round is durable before a device sees its tokens, so every commit syncs the
  log (``FULL``); the cost is one fsync per round.
- **one round, one transaction, once**: rounds are committed in order (0, 1, 2, …); committing a
  round again with the same content is ignored (returns False), with other content is refused,
  and a gap is refused. No round is ever committed twice.
- **one writer**: a writer holds an exclusive lock on ``PATH-writer.lock`` while open, so two
  servers cannot interleave rounds in one journal (readers need no lock).
- **damage is refused, never resumed**: each session row carries a seal (``sessions.seal``, the
  sha256 of its other columns), each round row a chain link over its content and the previous
  link, and ``PATH-head`` (fsynced after each commit) names the last round and its link
  (`multispin.runtime.store.head`). Opening checks the files, SQLite's
  ``quick_check`` (``check="full"``: ``integrity_check``), the sessions, the chain and the head
  (`multispin.runtime.store.check`); a journal that lost or changed rounds raises
  [`JournalDamaged`][multispin.errors.JournalDamaged] unless opened with ``repair=True``, which keeps
  the damaged files aside and rebuilds the journal from its last good round (`Journal._rebuild`,
  with what `multispin.runtime.store.repair` salvages). Every row is encoded and decoded by
  `multispin.runtime.store.rows`.

A file that is not a journal (another SQLite database, a text file, a corrupted header) or one
written by another schema version raises one [`JournalError`][multispin.errors.JournalError] naming
the file. Journals of an older schema are refused, not migrated: multispin is an unreleased 0.1, and
a journal lives as long as one run.
The server wiring (a journal path on `serve`, reconnecting devices) lives in the loops, not here.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from multispin.errors import JournalDamaged, JournalError
from multispin.runtime.store.check import (
    CHECKS,
    Evidence,
    check_sessions,
    compare_head,
    repair_hint,
    sqlite_check,
    walk_chain,
)
from multispin.runtime.store.head import GENESIS, Head, HeadWriter, head_path, link, read_head, session_seal
from multispin.runtime.store.records import DeviceRound, RecoveredSession, Recovery, Repair, SessionRecord
from multispin.runtime.store.repair import salvage, set_aside
from multispin.runtime.store.rows import (
    RECORD_COLUMNS,
    ROUND_COLUMNS,
    SESSION_COLUMNS,
    chain_entry,
    device_round,
    read_round,
    round_row,
    session_record,
    session_row,
)
from multispin.vocabulary import LINK_MODES

#: 2: rounds.link (the chain) and the head file; 3: sessions.seal (each session row's checksum);
#: 4: no sessions.ended (nothing wrote it). Other versions are refused (`Journal._identify`).
JOURNAL_SCHEMA_VERSION = 4
#: SQLite's 32-bit application id in the file header: "MSPJ" (MultiSPin Journal)
APPLICATION_ID = 0x4D53504A
#: how long a write waits, retrying, for SQLite's write lock held by another process; the
#: devices wait for the round's COMMIT meanwhile (their --server-timeout is 120 s by default)
LOCK_WAIT_S = 60.0

log = logging.getLogger("multispin.journal")

_SCHEMA = """
CREATE TABLE schema_version (
    version     INTEGER NOT NULL,
    created_s   REAL NOT NULL
);
CREATE TABLE sessions (
    device_id   INTEGER PRIMARY KEY,
    identity    TEXT NOT NULL,      -- the device's CURVE public key (Z85) or another identity label
    prompt_ids  TEXT NOT NULL,      -- JSON list of token ids
    sampling    TEXT NOT NULL,      -- JSON object: temperature, top_k, top_p, max_new_tokens, ...
    ul_codec    TEXT NOT NULL,
    dl_codec    TEXT NOT NULL,
    seed        INTEGER NOT NULL,
    first_round INTEGER NOT NULL,   -- the first round the device takes part in
    created_s   REAL NOT NULL,
    seal        BLOB                -- sha256 of the row's other columns (head.session_seal)
);
CREATE TABLE rounds (
    round_index INTEGER PRIMARY KEY,
    committed_s REAL NOT NULL,
    link        BLOB                -- sha256(previous round's link, this round's rows): the chain
);
CREATE TABLE round_tokens (
    round_index INTEGER NOT NULL REFERENCES rounds(round_index),
    device_id   INTEGER NOT NULL REFERENCES sessions(device_id),
    tokens      TEXT NOT NULL,      -- JSON list of the token ids committed this round
    draft_len   INTEGER NOT NULL,
    mode        TEXT,               -- 'ul', 'dl' or NULL (every draft token accepted)
    bits        INTEGER NOT NULL,   -- payload bits the device's correction moved (0 if none)
    PRIMARY KEY (round_index, device_id)
) WITHOUT ROWID;
CREATE TABLE run_end (
    reason      TEXT NOT NULL,      -- why the run ended for good ('done': every device finished)
    ended_s     REAL NOT NULL
);
"""


class Journal:
    """One open journal file. ``Journal(path)`` opens (creating if needed) for writing;
    ``Journal(path, readonly=True)`` opens an existing one for reading beside a writer.

    ``check``: "quick" (SQLite's quick_check) or "full" (integrity_check) on open. ``repair``:
    a damaged journal is rebuilt from its last good round instead of refused (see `repaired`).

    SQLite's write lock: held by another process when a writer opens (a ``sqlite3`` shell in a
    transaction, a backup tool), the open is refused after ``timeout_s``; held while the journal
    is open, each write waits for it, retrying with backoff, for up to ``lock_wait_s`` before it
    fails (a brief backup is waited out, a lock held for good ends the run)."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        readonly: bool = False,
        timeout_s: float = 5.0,
        check: str = "quick",
        repair: bool = False,
        lock_wait_s: float = LOCK_WAIT_S,
    ) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.repaired: Repair | None = None
        # the connection and the head writer: set while the journal is open, None once closed
        self._db: sqlite3.Connection = None  # type: ignore[assignment]
        self._lock_fd: int | None = None
        self._head: HeadWriter = None  # type: ignore[assignment]
        self._timeout_s = timeout_s
        self.lock_wait_s = lock_wait_s
        self.check = check
        if check not in CHECKS:
            raise JournalError(f"check: one of {', '.join(CHECKS)} (got {check!r})")
        if readonly and repair:
            raise JournalError(f"{self.path}: a read-only journal cannot be repaired")
        if self.path.is_dir():
            raise JournalError(f"{self.path}: is a directory, not a journal file")
        if readonly and not self.path.exists():
            raise JournalError(f"{self.path}: no such journal")
        if not readonly:
            self._take_writer_lock()
        try:
            try:
                self._open_checked()
            except sqlite3.Error as exc:  # wherever else SQLite trips on a damaged file: one line too
                raise JournalDamaged(f"{self.path}: damaged journal (SQLite: {exc}); {repair_hint()}") from None
        except JournalDamaged as exc:
            if not repair:
                self._abandon()
                raise

            self.close(keep_lock=True)
            try:
                self.repaired = self._rebuild(str(exc))
            except BaseException:
                self._abandon()
                raise
        except BaseException:
            self._abandon()
            raise

    def _open_checked(self, fresh: bool = False) -> None:
        """Open the file and check it (files, SQLite, chain, head); ``fresh``: the repair's new
        file, which its own lock file and head must not make look deleted.

        Every check runs on a read-only connection: closing a refused journal's read-write
        connection would checkpoint what is left of its WAL into the file and delete the WAL,
        so the damage would no longer be there to keep aside or to look at."""
        evidence = None
        if not self.readonly:
            evidence = Evidence.gather(self.path, self._lock_existed and not fresh)
            if not fresh:
                evidence.check_files(self.path)
        if self.readonly and self.path.stat().st_size == 0:
            raise JournalError(f"{self.path}: not a multispin journal (an empty file)")
        try:
            version, links = self._check_existing(evidence, fresh)
        except BaseException:
            if evidence is not None:
                evidence.forget_what_sqlite_added(self.path)
            raise
        if self.readonly:
            return
        assert evidence is not None  # gathered for every writer
        self._db = self._connect(readonly=False)
        self._head = HeadWriter(head_path(self.path))
        if version == 0:
            # the head before the schema: a journal database is never without its head file, so
            # one found without it is refused (its side files were deleted), never taken as new
            self._enter_wal()
            self._head.reset(Head(-1, GENESIS))
        self._setup(version)
        if version == 0:
            # the schema into the main file: with the WAL, -shm and head all deleted, the main file
            # still says "a journal was here" (SQLite alone would read an empty database)
            self._checkpoint()
        if links is None:  # created now: nothing to compare yet
            links = walk_chain(self._db, self.path)
        current = Head(len(links) - 1, links[-1] if links else GENESIS)
        if fresh or evidence.head is None:
            self._head.reset(current)
        elif evidence.head.round != current.round:  # a crash between the two writes: catch up
            self._head.write(current)

    def _rebuild(self, problem: str) -> Repair:
        """Set the damaged files aside and write their good part into a new journal at the same
        path, through the ordinary writing path (a fresh chain and head). The caller holds the
        writer lock (no other server can open the journal meanwhile)."""
        try:
            head = read_head(head_path(self.path))
        except JournalError:  # a damaged head cannot say how many rounds there were
            head = None
        good = salvage(self.path)
        kept_aside = set_aside(self.path)
        self._open_checked(fresh=True)
        for s in good.sessions:
            self.open_session(s)
        for r, devices in enumerate(good.rounds):
            self.commit_round(r, devices)
        kept = len(good.rounds)
        lost = head.round + 1 - kept if head is not None and head.round + 1 > kept else None
        return Repair(problem, kept, lost, kept_aside, good.sessions_lost)

    def _check_existing(self, evidence: Evidence | None, fresh: bool) -> tuple[int, list[bytes] | None]:
        """(schema version, every round's link) of the file there, checked; (0, None): no journal
        yet. A reader keeps its connection; a writer's check connection is closed."""
        links: list[bytes] | None = None
        version = 0
        if self.path.exists() and self.path.stat().st_size > 0:
            db = self._connect(readonly=True)
            try:
                version = self._identify(db)
                sqlite_check(db, self.path, self.check)
                links = walk_chain(db, self.path)
                check_sessions(db, self.path)
            except BaseException:
                db.close()
                raise
            if self.readonly:
                self._db, self._version = db, version
                return version, links
            db.close()
        # an empty file too: SQLite reads a journal whose WAL vanished as empty; no head is
        # expected where there is no journal yet (version 0) or a repair starts one
        compare_head(
            self.path,
            links or [],
            None if fresh or evidence is None else evidence.head,
            fresh_ok=fresh or version == 0,
        )
        return version, links

    def _connect(self, readonly: bool) -> sqlite3.Connection:
        try:
            if readonly:
                uri = f"{self.path.resolve().as_uri()}?mode=ro"
                return sqlite3.connect(
                    uri, uri=True, timeout=self._timeout_s, isolation_level=None, check_same_thread=False
                )
            # opened where the server is built, written by its loop thread: one thread at a time
            return sqlite3.connect(self.path, timeout=self._timeout_s, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise JournalError(f"{self.path}: cannot open ({exc})") from None

    # -- opening -------------------------------------------------------------------------------

    def _take_writer_lock(self) -> None:
        self._lock_existed = False
        try:
            import fcntl  # noqa: PLC0415  (POSIX only: guarded)
        except ImportError:  # not POSIX: SQLite's own locking still serialises the writes
            return
        lock_path = f"{self.path}-writer.lock"
        self._lock_created = not os.path.exists(lock_path)
        self._lock_existed = not self._lock_created  # a trace that a journal was here
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise JournalError(f"{self.path}: cannot create {lock_path} ({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise JournalError(f"{self.path}: already open for writing by another process") from None
        self._lock_fd = fd

    def _abandon(self) -> None:
        """A failed open leaves no trace: no connection, no lock, no lock file it created."""
        created = self._lock_fd is not None and getattr(self, "_lock_created", False)
        self.close()
        if created:
            try:
                os.unlink(f"{self.path}-writer.lock")
            except OSError:
                pass

    def _release_writer_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def _identify(self, db: sqlite3.Connection) -> int:
        """The journal's schema version (0: no journal yet); refuses what is not a journal, or a
        journal of another version."""
        try:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            app_id = db.execute("PRAGMA application_id").fetchone()[0]
            if not tables and app_id == 0:
                if self.readonly:
                    raise JournalError(f"{self.path}: not a multispin journal (an empty database)")
                return 0
            if app_id != APPLICATION_ID or "schema_version" not in tables:
                raise JournalError(
                    f"{self.path}: not a multispin journal (an SQLite database of "
                    f"something else: tables {', '.join(sorted(tables)) or 'none'})"
                )
            row = db.execute("SELECT max(version) FROM schema_version").fetchone()
        except sqlite3.DatabaseError as exc:
            if not self.readonly and head_path(self.path).exists():  # it was a journal
                raise JournalDamaged(
                    f"{self.path}: damaged journal: no longer a readable database ({exc}); "
                    f"restore it, or {repair_hint()}"
                ) from None
            raise JournalError(f"{self.path}: not a multispin journal ({exc})") from None
        version = row[0] if row else None
        if version is None:
            raise JournalDamaged(f"{self.path}: damaged journal (no schema version recorded); {repair_hint()}")
        if version > JOURNAL_SCHEMA_VERSION:
            raise JournalError(
                f"{self.path}: journal schema version {version} is newer than this "
                f"multispin reads ({JOURNAL_SCHEMA_VERSION}); upgrade multispin"
            )
        if version < JOURNAL_SCHEMA_VERSION:
            raise JournalError(
                f"{self.path}: journal schema version {version} is older than this multispin "
                f"reads ({JOURNAL_SCHEMA_VERSION}) and is not migrated; finish the run with the multispin "
                "that wrote it, or give a fresh --journal"
            )
        return int(version)

    def _enter_wal(self) -> None:
        try:
            mode = self._db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise JournalError(f"{self.path}: cannot set up the journal ({exc})") from None
        if str(mode).lower() != "wal":
            raise JournalError(f"{self.path}: the file system does not allow WAL mode (got {mode})")

    def _probe_write_lock(self) -> None:
        """Refuse to start on a journal whose SQLite write lock another process holds: every
        round would wait for it (and the first would fail), so say so now, in one line."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                raise
            raise JournalError(
                f"{self.path}: another process holds its write lock (an open sqlite3 "
                f"transaction? a backup?) and did not release it within {self._timeout_s:g} s; "
                "end that process's transaction and start again"
            ) from None
        self._db.execute("ROLLBACK")

    def _checkpoint(self) -> None:
        """Copy the WAL into the main file (synced), as far as no reader's snapshot holds it back."""
        try:
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.DatabaseError as exc:
            raise JournalError(f"{self.path}: cannot checkpoint the journal ({exc})") from None

    def _setup(self, version: int) -> None:
        """The writer's connection: its pragmas, and the schema created where there was none."""
        db = self._db
        self._enter_wal()
        try:
            db.execute("PRAGMA synchronous = FULL")
            db.execute("PRAGMA foreign_keys = ON")
            self._probe_write_lock()
            if version == 0:
                self._create()
        except sqlite3.DatabaseError as exc:
            raise JournalError(f"{self.path}: cannot set up the journal ({exc})") from None
        self._version = JOURNAL_SCHEMA_VERSION

    def _create(self) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    db.execute(stmt)
            db.execute("INSERT INTO schema_version VALUES (?, ?)", (JOURNAL_SCHEMA_VERSION, time.time()))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def close(self, keep_lock: bool = False) -> None:
        db = getattr(self, "_db", None)
        if db is not None:
            db.close()
            self._db = None  # type: ignore[assignment]
        head = getattr(self, "_head", None)
        if head is not None:
            head.close()
            self._head = None  # type: ignore[assignment]
        if not keep_lock:
            self._release_writer_lock()

    def set_aside(self, suffix: str) -> Path:
        """Close and rename the journal and its head to ``PATH.SUFFIX`` (a finished run kept),
        so that a fresh journal can start at PATH; returns the new path."""
        self.close()
        kept = self.path.with_name(f"{self.path.name}.{suffix}")
        self.path.rename(kept)
        if head_path(self.path).exists():
            head_path(self.path).rename(head_path(kept))
        try:
            os.unlink(f"{self.path}-writer.lock")  # released: a later writer makes its own
        except OSError:
            pass
        return kept

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------------------

    def _write(self):
        if self.readonly:
            raise JournalError(f"{self.path}: opened read-only")
        if self._db is None:
            raise JournalError(f"{self.path}: journal is closed")
        return _Transaction(self)

    def open_session(self, s: SessionRecord) -> bool:
        """Record a device's session (durable on return). True if written; False if the same
        session is already there. A different session under the same device id is refused: a
        device id names one session for the journal's whole life."""
        row = session_row(s)
        with self._write() as db:
            old = db.execute(f"SELECT {RECORD_COLUMNS} FROM sessions WHERE device_id = ?", (row[0],)).fetchone()
            if old is not None:
                if tuple(old) == row:
                    return False
                raise JournalError(
                    f"{self.path}: device {s.device_id} already has another session "
                    f"(different {_first_difference(old, row)})"
                )
            full = (*row, time.time())
            db.execute(
                f"INSERT INTO sessions ({SESSION_COLUMNS}, seal) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*full, session_seal(full)),
            )
        return True

    def commit_round(self, round_index: int, devices: Mapping[int, DeviceRound]) -> bool:
        """Write round ``round_index`` (every device's committed tokens) in one transaction.

        When this returns the round is durable: send the round's replies after it, never before.
        Returns True if the round was written, False if the very same round was already there
        (a retry after an interrupted call). Raises `JournalError` for a round committed
        before with other content, a round out of order (rounds go 0, 1, 2, … without gaps), a
        device without a session, or a malformed entry; nothing is written then."""
        r = int(round_index)
        rows = []
        for d, e in sorted(devices.items()):
            if e.mode is not None and e.mode not in LINK_MODES:
                raise JournalError(
                    f"{self.path}: round {r}, device {d}: mode must be one of "
                    f"{', '.join(LINK_MODES)} or None (got {e.mode!r})"
                )
            if int(e.draft_len) < 0 or int(e.bits) < 0:
                raise JournalError(
                    f"{self.path}: round {r}, device {d}: draft_len and bits must be >= 0 (got {e.draft_len}, {e.bits})"
                )
            rows.append((r, *round_row(d, e)))
        with self._write() as db:
            nxt = db.execute("SELECT coalesce(max(round_index) + 1, 0) FROM rounds").fetchone()[0]
            if r < nxt:
                if [(r, *o) for o in read_round(db, r)] == rows:
                    return False
                raise JournalError(
                    f"{self.path}: round {r} is already committed with other content; no round is committed twice"
                )
            if r > nxt:
                raise JournalError(f"{self.path}: round {r} out of order (the next round is {nxt})")
            if rows:
                known = {
                    row[0]
                    for row in db.execute(
                        f"SELECT device_id FROM sessions WHERE device_id IN ({','.join('?' * len(rows))})",
                        [row[1] for row in rows],
                    )
                }
                missing = sorted({row[1] for row in rows} - known)
                if missing:
                    raise JournalError(
                        f"{self.path}: round {r}: no session for device(s) {', '.join(map(str, missing))}"
                    )
            prev = (
                GENESIS
                if r == 0
                else db.execute("SELECT link FROM rounds WHERE round_index = ?", (r - 1,)).fetchone()[0]
            )
            chained = link(prev, r, [chain_entry(row[1:]) for row in rows])
            db.execute("INSERT INTO rounds VALUES (?, ?, ?)", (r, time.time(), chained))
            db.executemany("INSERT INTO round_tokens VALUES (?, ?, ?, ?, ?, ?)", rows)
        # after SQLite's commit: the head never names a round the database may not hold
        self._head.write(Head(r, chained))
        return True

    def complete(self, reason: str) -> None:
        """Mark the run ended for good (every device done): a server started on this file then
        sets it aside instead of resuming it."""
        with self._write() as db:
            db.execute("INSERT INTO run_end VALUES (?, ?)", (str(reason), time.time()))

    # -- reading -------------------------------------------------------------------------------

    def recover(self) -> Recovery:
        """Every session with its committed tokens (in round order) and the next round's index,
        read in one snapshot (consistent even while another process writes)."""
        if self._db is None:
            raise JournalError(f"{self.path}: journal is closed")
        db = self._db
        try:
            db.execute("BEGIN")  # one read snapshot for the three queries
            try:
                nxt = db.execute("SELECT coalesce(max(round_index) + 1, 0) FROM rounds").fetchone()[0]
                sessions: dict[int, RecoveredSession] = {}
                for row in db.execute(f"SELECT {RECORD_COLUMNS} FROM sessions ORDER BY device_id"):
                    rec = session_record(row)
                    sessions[rec.device_id] = RecoveredSession(rec)
                for row in db.execute(f"SELECT {ROUND_COLUMNS} FROM round_tokens ORDER BY round_index, device_id"):
                    d, part = device_round(row)
                    s = sessions[d]
                    s.tokens.extend(part.tokens)
                    s.rounds += 1
                end = db.execute("SELECT reason FROM run_end ORDER BY ended_s DESC LIMIT 1").fetchone()
            finally:
                db.execute("COMMIT")
        except (sqlite3.DatabaseError, ValueError, KeyError, TypeError) as exc:
            raise JournalError(f"{self.path}: damaged journal ({type(exc).__name__}: {exc})") from None
        return Recovery(sessions, int(nxt), end[0] if end else None)

    def round(self, round_index: int) -> dict[int, DeviceRound]:
        """One committed round's entries (empty if the round is not committed)."""
        return dict(device_round(row) for row in read_round(self._db, round_index))

    def integrity_check(self) -> str:
        """SQLite's own check of the file: "ok" or the first problems found."""
        return "; ".join(r[0] for r in self._db.execute("PRAGMA integrity_check"))


class _Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (or ``ROLLBACK`` on any error): all or nothing. SQLite
    errors inside become one JournalError naming the file."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def __enter__(self) -> sqlite3.Connection:
        j = self.journal
        give_up = time.monotonic() + j.lock_wait_s
        pause = 0.05
        while True:
            try:  # each try waits up to the connection's timeout_s in SQLite's busy handler
                j._db.execute("BEGIN IMMEDIATE")
                return j._db
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise JournalError(f"{j.path}: cannot start a write ({exc})") from None
                left = give_up - time.monotonic()
                if left <= 0:
                    raise JournalError(
                        f"{j.path}: another process held its write lock for over {j.lock_wait_s:g} s; gave up waiting"
                    ) from None
                if pause == 0.05:
                    log.warning(
                        "%s: another process holds the journal's write lock; retrying for up to %.0f s",
                        j.path,
                        j.lock_wait_s,
                    )
                time.sleep(min(pause, left))
                pause = min(2 * pause, 2.0)
            except sqlite3.Error as exc:
                raise JournalError(f"{j.path}: cannot start a write ({exc})") from None

    def __exit__(self, etype, exc, tb) -> None:  # never swallows the exception
        db = self.journal._db
        if etype is None:
            try:
                db.execute("COMMIT")
                return
            except sqlite3.Error as err:
                exc, etype = err, type(err)
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        if isinstance(exc, sqlite3.Error):
            raise JournalError(f"{self.journal.path}: write failed ({exc}){_room_hint(exc)}") from None


def _room_hint(exc: sqlite3.Error) -> str:
    """What to do after a write that failed for want of room (a full disk, a file-size limit): the
    transaction was rolled back, so the journal holds every round acknowledged before it."""
    text = str(exc)
    if "full" in text or "disk I/O error" in text:
        return "; the rounds acknowledged before it are kept: free space, then rerun with the same journal to resume"
    return ""


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY / SQLITE_LOCKED: another connection holds the lock."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (5, 6)
    return "locked" in str(exc) or "busy" in str(exc)


def _first_difference(old: Sequence[Any], new: Sequence[Any]) -> str:
    names = ("device id", "identity", "prompt", "sampling", "UL codec", "DL codec", "seed", "first round")
    for name, a, b in zip(names, old, new):
        if a != b:
            return name
    return "content"
