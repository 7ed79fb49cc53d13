"""The journal's rows, encoded and decoded in one place.

A session is stored as one ``sessions`` row and a device's part of a round as one ``round_tokens``
row; token ids and the sampling parameters are stored as compact JSON. The journal writes and
reads through these functions, and its check (`multispin.runtime.store.check`) and its repair
(`multispin.runtime.store.repair`) read through them too, so that a column's encoding is written
once and the chain link hashes the same values whoever computes it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from multispin.runtime.store.records import DeviceRound, SessionRecord

#: the columns of a `SessionRecord`, in its field order
RECORD_COLUMNS = "device_id, identity, prompt_ids, sampling, ul_codec, dl_codec, seed, first_round"
#: every column of a session row that its seal covers (`multispin.runtime.store.head.session_seal`)
SESSION_COLUMNS = f"{RECORD_COLUMNS}, created_s"
#: the columns of a device's part of a round, after ``round_index``
ROUND_COLUMNS = "device_id, tokens, draft_len, mode, bits"


def tokens_json(tokens: Iterable[int]) -> str:
    return json.dumps([int(t) for t in tokens], separators=(",", ":"))


def session_row(s: SessionRecord) -> tuple[Any, ...]:
    """The RECORD_COLUMNS values of a session, as stored."""
    sampling = json.dumps(dict(s.sampling), sort_keys=True, separators=(",", ":"))
    return (
        int(s.device_id),
        str(s.identity),
        tokens_json(s.prompt_ids),
        sampling,
        str(s.ul_codec),
        str(s.dl_codec),
        int(s.seed),
        int(s.first_round),
    )


def session_record(row: Sequence[Any]) -> SessionRecord:
    """The session of a row that starts with the RECORD_COLUMNS values."""
    d, ident, prompt, sampling, ul, dl, seed, first = row[:8]
    return SessionRecord(int(d), ident, tuple(json.loads(prompt)), json.loads(sampling), ul, dl, int(seed), int(first))


def round_row(device_id: int, e: DeviceRound) -> tuple[Any, ...]:
    """The ROUND_COLUMNS values of one device's part of a round, as stored."""
    return (int(device_id), tokens_json(e.tokens), int(e.draft_len), e.mode, int(e.bits))


def device_round(row: Sequence[Any]) -> tuple[int, DeviceRound]:
    """(device, its part of the round) of a stored ROUND_COLUMNS row."""
    d, t, g, m, b = row
    return int(d), DeviceRound(tuple(json.loads(t)), int(g), m, int(b))


def chain_entry(row: Sequence[Any]) -> tuple[Any, ...]:
    """What the chain link hashes of a stored ROUND_COLUMNS row (`multispin.runtime.store.head.link`)."""
    d, t, g, m, b = row
    return (d, json.loads(t), g, m, b)


def read_round(db: sqlite3.Connection, round_index: int) -> list[tuple[Any, ...]]:
    """Round ``round_index``'s stored ROUND_COLUMNS rows, in device order (none if not committed)."""
    return db.execute(
        f"SELECT {ROUND_COLUMNS} FROM round_tokens WHERE round_index = ? ORDER BY device_id", (int(round_index),)
    ).fetchall()


__all__ = [
    "RECORD_COLUMNS",
    "ROUND_COLUMNS",
    "SESSION_COLUMNS",
    "chain_entry",
    "device_round",
    "read_round",
    "round_row",
    "session_record",
    "session_row",
    "tokens_json",
]
