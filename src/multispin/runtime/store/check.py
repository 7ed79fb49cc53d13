"""What a journal is checked for when it is opened, before any round is resumed from it.

Five checks, in order, each refusing with one [`JournalDamaged`][multispin.errors.JournalDamaged] line
that names what is wrong and what the operator can do:

1. **the files** (before SQLite touches them): a journal file that is missing while its head
   file, WAL or writer lock says it existed, or a 0-byte journal file. SQLite would take either
   for a new, empty database and the run would silently start again from round 0.
2. **SQLite's own check**: ``PRAGMA quick_check`` (pages, cells, free list; O(file size)) or, on
   request, the full ``integrity_check`` (indexes and constraints too).
3. **the chain** (`multispin.runtime.store.head`): rounds 0, 1, 2, … without a gap, each
   row's link recomputed from its content. An edited token, a deleted row or a round moved
   elsewhere breaks it at that round.
4. **the sessions**: each session row (identity, prompt, settings, codecs, seed, first
   round, when it started) against its own checksum, and every device that has rounds
   against its session row. A flipped prompt or seed would otherwise be resumed (and the device
   refused, or the settings blamed, only after the model loaded).
5. **the head** (writer only; a reader beside a writer may see the two files at different
   moments): the database must hold the round the head file names, with the same link. Fewer
   rounds means rounds were lost (a deleted, truncated or damaged WAL); one more round is the
   trace of a crash between the two writes (its COMMITs were never sent) and is fine. A journal
   database without its head file is refused even with no round in it: the head is written
   before the schema, and the schema is checkpointed into the main file at creation, so the main
   file alone says "a journal was here" after its WAL, -shm and head were all deleted (otherwise
   SQLite reads it as an empty database and the run silently starts again from round 0).

The repair (`multispin.runtime.store.repair`) uses the same chain walk to find the last
good round.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

from multispin.errors import JournalDamaged
from multispin.runtime.store.head import GENESIS, Head, head_path, link, read_head, session_seal
from multispin.runtime.store.rows import ROUND_COLUMNS, SESSION_COLUMNS, chain_entry

CHECKS = ("quick", "full")


def repair_hint(good_rounds: int | None = None) -> str:
    """What the operator can do, in the words of the `serve` command line."""
    where = (
        "from its last good round"
        if good_rounds is None
        else "from round 0"
        if good_rounds == 0
        else f"after its last good round {good_rounds - 1}"
    )
    return (
        f"`serve --journal-repair` resumes {where} (later rounds are regenerated, the texts are "
        "the same) and keeps the damaged files; or give a fresh --journal"
    )


@dataclass(frozen=True)
class Evidence:
    """What lies beside the journal before SQLite opens it."""

    main_size: int | None  # None: no journal file
    wal: bool
    shm: bool
    lock: bool  # a writer lock file was there before this open
    head: Head | None

    @classmethod
    def gather(cls, path: Path, lock_existed: bool) -> Evidence:
        try:
            size: int | None = path.stat().st_size
        except FileNotFoundError:
            size = None
        # read_head raises JournalDamaged for a head file without a valid slot
        return cls(
            size, Path(f"{path}-wal").exists(), Path(f"{path}-shm").exists(), lock_existed, read_head(head_path(path))
        )

    def forget_what_sqlite_added(self, path: Path) -> None:
        """After a refusal: remove the empty -wal and the -shm a read-only connection creates, so
        that the refused journal is left exactly as it was found."""
        wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
        if not self.wal and wal.exists() and wal.stat().st_size == 0:
            wal.unlink()
            if not self.shm:
                shm.unlink(missing_ok=True)

    def check_files(self, path: Path) -> None:
        """Refuse a journal file that vanished or was emptied (SQLite would start afresh)."""
        if self.main_size is None:
            traces = [
                what
                for what, there in (
                    (f"{head_path(path).name} says {self.head.describe() if self.head else ''}", self.head),
                    (f"{path.name}-wal remains", self.wal),
                    (f"{path.name}-writer.lock remains", self.lock),
                )
                if there
            ]
            if traces:
                raise JournalDamaged(
                    f"{path}: the journal file is missing but {traces[0]}: it was deleted "
                    f"or moved; restore it, or {repair_hint(0)}"
                )
        elif self.main_size == 0:
            raise JournalDamaged(
                f"{path}: the journal file is empty (0 bytes)"
                f"{'; its head file says ' + self.head.describe() if self.head else ''}: "
                f"it was truncated; restore it, or {repair_hint(0)}"
            )


def sqlite_check(db: sqlite3.Connection, path: Path, check: str) -> None:
    pragma = "integrity_check" if check == "full" else "quick_check"
    try:
        found = [r[0] for r in db.execute(f"PRAGMA {pragma}")]
    except sqlite3.DatabaseError as exc:
        found = [str(exc)]
    if found != ["ok"]:
        # SQLite's report may span lines ("*** in database main ***" first): one line, the first problem
        lines = [ln for row in found for ln in str(row).splitlines() if ln.strip() and not ln.startswith("***")]
        more = f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""
        raise JournalDamaged(
            f"{path}: damaged journal (SQLite {pragma}: {lines[0] if lines else found[0]}{more}); {repair_hint()}"
        )


def walk_chain(db: sqlite3.Connection, path: Path, stop_at_damage: bool = False) -> list[bytes]:
    """Every round's link, recomputed and compared with the stored one: ``links[r]`` is round r's.

    Raises JournalDamaged at the first bad round, or with ``stop_at_damage`` returns the good
    prefix (the repair)."""
    links: list[bytes] = []

    def bad(what: str) -> list[bytes]:
        if stop_at_damage:
            return links
        raise JournalDamaged(f"{path}: damaged journal ({what}); {repair_hint(len(links))}")

    try:
        columns = ", ".join(f"t.{c.strip()}" for c in ROUND_COLUMNS.split(","))
        rows = db.execute(
            f"SELECT r.round_index, r.link, {columns} FROM rounds r LEFT JOIN round_tokens t USING (round_index) "
            "ORDER BY r.round_index, t.device_id"
        )
        for r, grouped in groupby(rows, key=lambda row: row[0]):
            group = list(grouped)
            if r != len(links):
                return bad(f"round {len(links)} is missing; the next round is {r}")
            entries = [chain_entry(row[2:]) for row in group if row[2] is not None]
            ours = link(links[-1] if links else GENESIS, r, entries)
            if group[0][1] != ours:
                return bad(f"round {r} does not match its chain link: a row of it was edited or deleted")
            links.append(ours)
        orphan = db.execute(
            "SELECT min(round_index) FROM round_tokens WHERE round_index NOT IN (SELECT round_index FROM rounds)"
        ).fetchone()[0]
    except (sqlite3.DatabaseError, ValueError, TypeError) as exc:
        return bad(f"round {len(links)} cannot be read: {exc}")
    if orphan is not None:  # rows of a round whose round row was deleted (rounds before it are whole)
        return bad(f"round {orphan}'s row was deleted (its tokens remain)")
    return links


def check_sessions(db: sqlite3.Connection, path: Path) -> None:
    """Every session row matches its seal, and every device with rounds has its session row."""
    try:
        for row in db.execute(f"SELECT {SESSION_COLUMNS}, seal FROM sessions ORDER BY device_id"):
            if session_seal(row[:-1]) != row[-1]:
                raise JournalDamaged(
                    f"{path}: damaged journal (table sessions: device {row[0]}'s session does "
                    "not match its checksum: its prompt, settings, codecs, seed or identity "
                    f"were edited or damaged); {repair_hint()}"
                )
        orphan = db.execute(
            "SELECT min(device_id) FROM round_tokens WHERE device_id NOT IN (SELECT device_id FROM sessions)"
        ).fetchone()[0]
    except (sqlite3.DatabaseError, ValueError, TypeError, OverflowError) as exc:
        raise JournalDamaged(
            f"{path}: damaged journal (table sessions cannot be read: {exc}); {repair_hint()}"
        ) from None
    if orphan is not None:
        raise JournalDamaged(
            f"{path}: damaged journal (table sessions: device {orphan}'s session row was "
            f"deleted; its rounds remain); {repair_hint()}"
        )


def compare_head(path: Path, links: list[bytes], head: Head | None, fresh_ok: bool) -> None:
    """Refuse a database that lacks rounds its head file says were committed.

    ``fresh_ok``: no head is expected (no journal yet, or a repair's new one)."""
    last = len(links) - 1
    holds = f"the database holds rounds 0..{last}" if last >= 0 else "the database holds no round"
    if head is None:
        if not fresh_ok:
            raise JournalDamaged(
                f"{path}: its head file {head_path(path).name} is missing ({holds}), so "
                "lost rounds cannot be ruled out (were the journal's side files deleted?); "
                f"restore it, or {repair_hint(len(links))}"
            )
        return
    if last < head.round:
        missing = f"round {head.round} is" if last + 1 == head.round else f"rounds {last + 1}..{head.round} are"
        raise JournalDamaged(
            f"{path}: {missing} missing (the head file says round "
            f"{head.round} was committed; {holds}): its -wal was deleted, truncated or "
            f"damaged; restore it, or {repair_hint(len(links))}"
        )
    if head.round >= 0 and links[head.round] != head.link:
        raise JournalDamaged(
            f"{path}: round {head.round} differs from the round committed (its chain "
            f"link is not the head file's); {repair_hint()}"
        )
    if last > head.round + 1:
        raise JournalDamaged(
            f"{path}: the head file names round {head.round} but {holds}: the head file "
            f"is older than the database (restored from a copy?); {repair_hint(len(links))}"
        )


__all__ = [
    "CHECKS",
    "Evidence",
    "check_sessions",
    "compare_head",
    "repair_hint",
    "sqlite_check",
    "walk_chain",
]
