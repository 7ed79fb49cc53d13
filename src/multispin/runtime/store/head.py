"""The journal's chain of rounds and its head file: how a restart knows that no round was lost.

What: every committed round carries a *link*, ``sha256(previous link ‖ the round's index and
every device's committed tokens, draft length, mode, bits)``, starting from `GENESIS`. The
head file (``JOURNAL-head``, beside the SQLite file) holds the index and link of the last round
committed, fsynced after each round's SQLite commit and before any device is told of the round.

Why: SQLite alone cannot tell "no rounds yet" from "the rounds were lost". A deleted or truncated
WAL, a WAL frame with flipped bytes or a 0-byte main file are each read by SQLite as an older,
perfectly valid database; a token edited with valid SQL or a deleted row pass `integrity_check`.
The chain makes every edited, missing or reordered round visible (its link no longer matches);
the head, a separate file, makes rounds missing at the *end* visible, even when the WAL that held
them is gone. It is a check against damage and mistakes, not a signature: whoever can rewrite
both files can forge both.

How the head survives a crash of its own write: two fixed 64-byte slots, each with its own
CRC-32; round ``r`` goes to slot ``r % 2``, so a torn write spoils at most the slot being written
and the other one still names round ``r - 1``. The reader takes the valid slot with the higher
round. Since the head is written after the SQLite commit, the database may be one round ahead of
the head after a crash (that round's COMMITs were never sent), never behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from multispin.errors import JournalDamaged, JournalError

#: the link "before round 0"
GENESIS = bytes(32)
_MAGIC = b"MSPH"
_VERSION = 1
_BODY = struct.Struct("<4sIq32s")  # magic, version, round (-1: none yet), link
_SLOT = 64


def link(prev: bytes, round_index: int, rows: Iterable[Sequence]) -> bytes:
    """The chain link of one round: ``rows`` are (device, tokens, draft_len, mode, bits) in device
    order, the values as the journal stores them (tokens as a list of ints)."""
    body = [int(round_index), [[int(d), [int(t) for t in toks], int(g), m, int(b)] for d, toks, g, m, b in rows]]
    return hashlib.sha256(prev + json.dumps(body, separators=(",", ":")).encode()).digest()


def session_seal(row: Sequence) -> bytes:
    """The checksum of one session row: (device, identity, prompt ids as JSON, sampling as JSON,
    UL codec, DL codec, seed, first round, created), the values as the journal stores them."""
    d, ident, prompt, sampling, ul, dl, seed, first, created = row
    body = [
        int(d),
        str(ident),
        str(prompt),
        str(sampling),
        str(ul),
        str(dl),
        int(seed),
        int(first),
        repr(float(created)),
    ]
    return hashlib.sha256(b"session\0" + json.dumps(body, separators=(",", ":")).encode()).digest()


@dataclass(frozen=True)
class Head:
    round: int  # the last round committed (-1: none)
    link: bytes

    def describe(self) -> str:
        return "no round committed" if self.round < 0 else f"round {self.round} committed"


def head_path(journal_path: Path) -> Path:
    return Path(f"{journal_path}-head")


def _slot(head: Head) -> bytes:
    body = _BODY.pack(_MAGIC, _VERSION, head.round, head.link)
    return (body + struct.pack("<I", zlib.crc32(body))).ljust(_SLOT, b"\0")


def _parse(raw: bytes) -> Head | None:
    if len(raw) < _BODY.size + 4:
        return None
    body, (crc,) = raw[: _BODY.size], struct.unpack_from("<I", raw, _BODY.size)
    if zlib.crc32(body) != crc:
        return None
    magic, version, r, chain = _BODY.unpack(body)
    if magic != _MAGIC or version != _VERSION:
        return None
    return Head(r, chain)


def read_head(path: Path) -> Head | None:
    """The head file's last round, or None when there is no head file; a head file with no
    valid slot raises (it was damaged or is not a head file)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise JournalError(f"{path}: cannot read the journal's head file ({exc.strerror})") from None
    heads = [h for h in (_parse(raw[i : i + _SLOT]) for i in (0, _SLOT)) if h is not None]
    if not heads:
        raise JournalDamaged(
            f"{path}: the journal's head file is damaged (no valid slot); restore it, "
            "or `serve --journal-repair` resumes from the database's last good round"
        )
    return max(heads, key=lambda h: h.round)


class HeadWriter:
    """The writer's open head file: `write` is durable when it returns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise JournalError(f"{path}: cannot open the journal's head file ({exc.strerror})") from None

    def write(self, head: Head) -> None:
        """Write ``head`` into its slot and sync it; the other slot keeps the previous round."""
        assert self._fd is not None
        try:
            os.pwrite(self._fd, _slot(head), (head.round % 2) * _SLOT)
            getattr(os, "fdatasync", os.fsync)(self._fd)
        except OSError as exc:
            raise JournalError(f"{self.path}: cannot write the journal's head file ({exc.strerror})") from None

    def reset(self, head: Head) -> None:
        """Both slots to ``head`` (a new or rebuilt journal: no older round may linger)."""
        assert self._fd is not None
        try:
            os.pwrite(self._fd, _slot(head) * 2, 0)  # the file never shrinks: no moment without a slot
            os.fsync(self._fd)
        except OSError as exc:
            raise JournalError(f"{self.path}: cannot write the journal's head file ({exc.strerror})") from None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


__all__ = ["GENESIS", "Head", "HeadWriter", "head_path", "link", "read_head", "session_seal"]
