"""What the repair of a damaged journal reads and moves: the good part, and the damaged files.

What: `salvage` reads every session and every round before the first one that fails its chain
link (or cannot be read), from a scratch copy; `set_aside` renames the damaged files (the
journal, its WAL, its head), untouched, to ``PATH.damaged-STAMP`` (``-wal``, ``-head``). The journal
itself writes the salvaged part into a new file through its ordinary writing path
(``Journal(path, repair=True)``, `multispin.runtime.store.journal.Journal._rebuild`), so the new
file has a fresh chain and head. This module only reads and renames files: it knows nothing of
an open journal.

Why this is safe for the texts: a device's randomness is keyed on (seed, device, committed
length), never on the server's round, so the rounds that were lost are drawn again with the same
tokens; a device that already held them takes the server's shorter record at its next WELCOME
and regenerates them. What is lost is the promise that a restart never takes a token back, which
is why the repair is never automatic and always says how many rounds it drops.

Without its sessions no round can be kept (a round's tokens mean nothing without the prompt they
continue): a journal whose sessions cannot be read is rebuilt empty, and every device starts
again from its prompt, with the same text. A session that fails its seal is left out, and with
it every round from the first one its device took part in.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from multispin.runtime.store.check import walk_chain
from multispin.runtime.store.head import session_seal
from multispin.runtime.store.records import DeviceRound, SessionRecord
from multispin.runtime.store.rows import SESSION_COLUMNS, device_round, read_round, session_record


@dataclass
class Salvage:
    """The good part of a damaged journal: its readable sessions and its chain-valid rounds."""

    sessions: list[SessionRecord] = field(default_factory=list)
    rounds: list[dict[int, DeviceRound]] = field(default_factory=list)
    sessions_lost: bool = False


def salvage(path: Path) -> Salvage:
    """Sessions and the chain-valid rounds of the journal at ``path``, read from a scratch copy
    beside it (SQLite may write while reading a WAL; the damaged originals stay as they were)."""
    if not path.exists() or path.stat().st_size == 0:
        return Salvage()
    with tempfile.TemporaryDirectory(prefix=".repair-", dir=path.parent) as scratch:
        copy = Path(scratch) / "journal.sqlite"
        shutil.copyfile(path, copy)
        if Path(f"{path}-wal").exists():
            shutil.copyfile(f"{path}-wal", f"{copy}-wal")
        db = sqlite3.connect(copy, isolation_level=None)
        try:
            return _read_good_part(db, path)
        finally:
            db.close()


def _read_good_part(db: sqlite3.Connection, path: Path) -> Salvage:
    out = Salvage()
    try:
        for row in db.execute(f"SELECT {SESSION_COLUMNS}, seal FROM sessions ORDER BY device_id"):
            if session_seal(row[:-1]) != row[-1]:
                continue  # a damaged session is not kept: its device starts again from its prompt
            out.sessions.append(session_record(row))
    except (sqlite3.DatabaseError, ValueError, TypeError):
        return Salvage(sessions_lost=True)
    known = {s.device_id for s in out.sessions}
    for r in range(len(walk_chain(db, path, stop_at_damage=True))):
        devices = dict(device_round(row) for row in read_round(db, r))
        if not set(devices) <= known:
            break
        out.rounds.append(devices)
    return out


def set_aside(path: Path) -> tuple[Path, ...]:
    """Rename the journal's files to ``PATH.damaged-STAMP[-wal|-head]``; the -shm index is
    derived from the WAL and is removed (a stale one must not meet the new file)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while any(Path(f"{base}{tail}").exists() for tail in ("", "-wal", "-head")):
        n += 1
        base = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    moved = []
    for tail in ("", "-wal", "-head"):
        src = Path(f"{path}{tail}")
        if src.exists():
            src.rename(f"{base}{tail}")
            moved.append(Path(f"{base}{tail}"))
    Path(f"{path}-shm").unlink(missing_ok=True)
    return tuple(moved)


__all__ = ["Salvage", "salvage", "set_aside"]
