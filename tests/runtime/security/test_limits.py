"""Bounds on unauthenticated peers, with a fake clock: connection and handshake budgets, and
refusals summarised to at most one line per cause per interval."""

from __future__ import annotations

import pytest

from multispin.errors import ConfigError
from multispin.runtime.security.limits import (
    HANDSHAKE_DEADLINE,
    TOO_MANY_CONNECTIONS,
    TOO_MANY_PENDING,
    ConnectionBudget,
    ConnectionLimits,
    RefusalLog,
    SilentKeyQuota,
)


def test_a_key_holds_at_most_its_quota_of_silent_connections():
    q = SilentKeyQuota(per_key=2, window_s=10.0)
    assert [q.admit(b"A", now=0.0), q.admit(b"A", now=1.0), q.admit(b"A", now=2.0)] == [True, True, False]
    assert q.admit(b"B", now=2.0)  # another key: its own quota
    q.spoke(b"A")  # one of A's connections sent its HELLO: no longer silent
    assert q.admit(b"A", now=3.0) and not q.admit(b"A", now=3.0)
    assert q.refused == 2


def test_a_silent_admission_is_forgotten_after_the_window():
    """The loop never learns when a silent connection closes; by the window's end (the handshake
    deadline) the transport has cut it, so its admission no longer counts."""
    q = SilentKeyQuota(per_key=1, window_s=10.0)
    assert q.admit(b"A", now=0.0)
    assert not q.admit(b"A", now=9.9)
    assert q.admit(b"A", now=10.0)
    q.spoke(b"A")
    q.spoke(b"A")  # more first frames than admissions (admitted before a reload): nothing to free
    assert q.admit(b"A", now=10.0)


def test_a_quota_of_zero_admits_everything():
    q = SilentKeyQuota(per_key=0, window_s=10.0)
    assert all(q.admit(b"A", now=0.0) for _ in range(1000)) and q.refused == 0


def test_pending_handshakes_are_bounded_and_expire():
    b = ConnectionBudget(ConnectionLimits(max_connections=10, max_pending=3, handshake_deadline_s=5.0))
    assert [b.admit(p, now=0.0) for p in "abc"] == [None, None, None]
    assert b.admit("d", now=1.0) == TOO_MANY_PENDING
    assert b.admit("a", now=1.0) is None  # a known peer is not admitted twice
    b.established("a")
    assert b.pending == 2 and b.connections == 3
    assert b.admit("d", now=2.0) is None
    assert b.next_deadline() == 5.0
    assert b.expired(4.9) == []
    assert b.expired(5.0) == ["b", "c"]  # "a" finished its handshake in time
    assert b.expired(100.0) == ["d"]
    assert b.pending == 0 and b.connections == 1 and b.next_deadline() is None


def test_connections_are_bounded_and_slots_come_back():
    b = ConnectionBudget(ConnectionLimits(max_connections=4, max_pending=2, handshake_deadline_s=1.0))
    for i, p in enumerate("abcd"):
        assert b.admit(p, now=float(i)) is None
        b.established(p)
    assert b.admit("e", now=5.0) == TOO_MANY_CONNECTIONS
    b.close("b")
    assert b.admit("e", now=5.0) is None and b.connections == 4


def test_an_expired_handshake_frees_its_slot_for_the_next_peer():
    b = ConnectionBudget(ConnectionLimits(max_connections=2, max_pending=2, handshake_deadline_s=1.0))
    assert b.admit("a", 0.0) is None and b.admit("b", 0.0) is None
    assert b.admit("c", 0.5) == TOO_MANY_CONNECTIONS
    assert b.admit("c", 1.0) is None  # a and b timed out
    assert not b.is_pending("a") and b.is_pending("c")


def test_a_flood_costs_a_fixed_amount():
    b = ConnectionBudget(ConnectionLimits(max_connections=100, max_pending=10, handshake_deadline_s=2.0))
    refused = sum(b.admit(i, now=i * 1e-3) is not None for i in range(10_000))
    assert b.connections <= 100 and b.pending <= 10
    assert refused >= 10_000 - 10 * (10 / 2.0 + 1)  # ~10 slots per 2 s deadline over 10 s


def test_limits_are_checked():
    with pytest.raises(ConfigError, match="max_pending: must be in 1..max_connections=4"):
        ConnectionLimits(max_connections=4, max_pending=5)
    with pytest.raises(ConfigError, match="handshake_deadline_s"):
        ConnectionLimits(handshake_deadline_s=0)
    with pytest.raises(KeyError):
        ConnectionBudget().established("never admitted")


def test_refusals_are_one_line_per_cause_per_interval_with_the_count():
    lines: list[str] = []
    log = RefusalLog(interval_s=10.0, emit=lines.append)
    log.refused("bad mac", 0.0, peer="tcp://10.0.0.9:4000")
    assert lines == ["refused: bad mac (peer tcp://10.0.0.9:4000)"]  # the first one at once
    for i in range(1, 500):
        log.refused("bad mac", i * 0.01, peer=f"p{i}")
    log.refused(TOO_MANY_PENDING, 1.0)
    assert len(lines) == 2  # only the first of each cause so far
    log.tick(9.99)
    assert len(lines) == 2
    log.tick(10.0)
    assert lines[2] == "refused: bad mac x499 more in the last 10.0 s, last peer p499 (500 in all)"
    assert len(lines) == 3  # TOO_MANY_PENDING had nothing more to say
    log.tick(20.0)  # a quiet interval: nothing, and the cause starts afresh
    log.refused("bad mac", 25.0, peer="q")
    assert lines[3] == "refused: bad mac (peer q)"
    log.refused("bad mac", 26.0)
    log.flush(27.0)
    assert lines[4].startswith("refused: bad mac x1 more in the last 2.0 s")
    assert log.totals == {"bad mac": 502, TOO_MANY_PENDING: 1}


def test_a_long_flood_grows_the_log_by_a_bounded_number_of_lines():
    lines: list[str] = []
    log = RefusalLog(interval_s=5.0, emit=lines.append)
    causes = [TOO_MANY_CONNECTIONS, TOO_MANY_PENDING, HANDSHAKE_DEADLINE]
    for i in range(60_000):  # 60 s, 1,000 refusals/s, three causes
        log.refused(causes[i % 3], now=i * 1e-3)
    log.flush(60.0)
    for cause in causes:
        mine = [ln for ln in lines if ln.startswith(f"refused: {cause}")]
        assert len(mine) <= 60 / 5 + 2
        counted = 1 + sum(int(ln.split(" x")[1].split()[0]) for ln in mine[1:])
        assert counted == 20_000 == log.totals[cause]  # every refusal is counted, none lost


def test_refusal_interval_must_be_positive():
    with pytest.raises(ConfigError, match="interval_s"):
        RefusalLog(interval_s=0)


def test_a_quiet_first_line_is_left_to_the_caller_and_the_label_names_the_stream():
    lines: list[str] = []
    log = RefusalLog(10.0, emit=lines.append, label="churn")
    assert log.refused("device 2 resumed", 0.0, announce=False) is True  # the caller logs this one
    assert log.refused("device 2 resumed", 1.0, announce=False) is False
    assert log.refused("device 2 resumed", 2.0, announce=False) is False
    assert lines == []
    log.tick(10.5)
    assert lines == ["churn: device 2 resumed x2 more in the last 10.5 s (3 in all)"]
