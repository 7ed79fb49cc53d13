"""Rebuild a damaged journal from its last good round (``Journal(path, repair=True)``).

What: the damaged files (the journal, its WAL, its head) are renamed aside, untouched, to
``PATH.damaged-STAMP`` (``-wal``, ``-head``); every session and every round before the first one
that fails its chain link (or cannot be read) is copied, from a scratch copy, into a new journal
at PATH through the ordinary writing path, so the new file has a fresh chain and head.

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

import json
import shutil
import sqlite3
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from multispin.errors import JournalError
from multispin.runtime.store.check import SESSION_COLUMNS, round_rows, walk_chain
from multispin.runtime.store.head import head_path, read_head, session_seal
from multispin.runtime.store.records import DeviceRound, Repair, SessionRecord

if TYPE_CHECKING:  # pragma: no cover
    from multispin.runtime.store.journal import Journal


@dataclass
class _Salvage:
    sessions: list[SessionRecord] = field(default_factory=list)
    rounds: list[dict[int, DeviceRound]] = field(default_factory=list)
    sessions_lost: bool = False


def rebuild(journal: Journal, problem: str) -> Repair:
    """Set the damaged files aside and write the good part into a new journal at its path. The
    caller holds the writer lock (no other server can open the journal meanwhile)."""
    path = journal.path
    try:
        head = read_head(head_path(path))
    except JournalError:  # a damaged head cannot say how many rounds there were
        head = None
    with tempfile.TemporaryDirectory(prefix=".repair-", dir=path.parent) as scratch:
        salvaged = _salvage(path, Path(scratch))
    kept_aside = _set_aside(path)
    journal._open_checked(fresh=True)
    for s in salvaged.sessions:
        journal.open_session(s)
    for r, devices in enumerate(salvaged.rounds):
        journal.commit_round(r, devices)
    kept = len(salvaged.rounds)
    lost = head.round + 1 - kept if head is not None and head.round + 1 > kept else None
    return Repair(problem, kept, lost, kept_aside, salvaged.sessions_lost)


def _salvage(path: Path, scratch: Path) -> _Salvage:
    """Sessions and the chain-valid rounds, read from a copy (SQLite may write while reading a
    WAL; the damaged originals stay as they were)."""
    out = _Salvage()
    if not path.exists() or path.stat().st_size == 0:
        return out
    copy = scratch / "journal.sqlite"
    shutil.copyfile(path, copy)
    if Path(f"{path}-wal").exists():
        shutil.copyfile(f"{path}-wal", f"{copy}-wal")
    db = sqlite3.connect(copy, isolation_level=None)
    try:
        try:
            for row in db.execute(f"SELECT {SESSION_COLUMNS}, seal FROM sessions ORDER BY device_id"):
                if session_seal(row[:-1]) != row[-1]:
                    continue  # a damaged session is not kept: its device starts again from its prompt
                d, ident, prompt, sampling, ul, dl, seed, first = row[:8]
                out.sessions.append(
                    SessionRecord(
                        int(d), ident, tuple(json.loads(prompt)), json.loads(sampling), ul, dl, int(seed), int(first)
                    )
                )
        except (sqlite3.DatabaseError, ValueError, TypeError):
            return _Salvage(sessions_lost=True)
        known = {s.device_id for s in out.sessions}
        for r in range(len(walk_chain(db, path, stop_at_damage=True))):
            rows = round_rows(db, r)
            if not {d for d, *_ in rows} <= known:
                break
            out.rounds.append({d: DeviceRound(tuple(t), g, m, b) for d, t, g, m, b in rows})
    finally:
        db.close()
    return out


def _set_aside(path: Path) -> tuple[Path, ...]:
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


__all__ = ["rebuild"]
