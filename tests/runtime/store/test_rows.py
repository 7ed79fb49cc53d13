"""The journal's rows, encoded and decoded in one place (store/rows.py): what is written reads back
as the same record, and the chain hashes the same entries whoever decodes them."""

from __future__ import annotations

from multispin.runtime.store.head import GENESIS, link
from multispin.runtime.store.records import DeviceRound, SessionRecord
from multispin.runtime.store.rows import chain_entry, device_round, round_row, session_record, session_row


def test_a_session_and_a_round_part_read_back_as_written():
    s = SessionRecord(3, "key", (5, 6, 7), {"top_k": 0, "temperature": 1.0}, "dense-fp32", "lattice:l=1024", 9, 2)
    assert session_record(session_row(s)) == s
    # the sampling is stored with sorted keys: the same settings in another order are the same row
    same = SessionRecord(3, "key", (5, 6, 7), {"temperature": 1.0, "top_k": 0}, "dense-fp32", "lattice:l=1024", 9, 2)
    assert session_row(same) == session_row(s)
    part = DeviceRound((1, 2, 3), 4, "ul", 96)
    assert device_round(round_row(3, part)) == (3, part)


def test_the_chain_entry_hashes_what_was_stored():
    rows = [round_row(0, DeviceRound((1, 2), 2, None, 0)), round_row(1, DeviceRound((3,), 4, "dl", 64))]
    ours = link(GENESIS, 0, [chain_entry(r) for r in rows])
    assert ours == link(GENESIS, 0, [(0, [1, 2], 2, None, 0), (1, [3], 4, "dl", 64)])
    edited = [rows[0], round_row(1, DeviceRound((4,), 4, "dl", 64))]  # negative control: one token
    assert link(GENESIS, 0, [chain_entry(r) for r in edited]) != ours
