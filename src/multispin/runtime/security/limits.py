"""Bounds on what an unauthenticated peer can cost the server: connections, handshakes, log lines.

What: `ConnectionBudget` admits a new peer only while there are fewer than
``max_connections`` peers and fewer than ``max_pending`` peers that have not finished the
handshake, and expires a pending peer at its handshake deadline. `SilentKeyQuota` admits one
key's handshakes only while fewer than ``per_key`` of its connections have authenticated and
sent nothing. `RefusalLog` turns a stream of refusals into at most one summary line per cause
per interval, with the count.

Why: before a peer has authenticated, anything it makes the server keep (a connection entry, a
pending HELLO with its prompt, a log line) is paid by the server; without bounds a flood grows
file descriptors, memory and the logs without limit. With them, a flood costs a fixed amount
and the devices already admitted keep their rounds.

Both are pure logic: the current time is an argument (``now``, seconds on any monotonic clock)
and nothing here touches a socket, so every limit is tested with a fake clock. The loops feed
them their events (a new routing id, a completed handshake, a disconnect) and act on the answer.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from multispin.errors import ConfigError

log = logging.getLogger(__name__)

TOO_MANY_CONNECTIONS = "too many connections"
TOO_MANY_PENDING = "too many pending handshakes"
SILENT_KEY_QUOTA = "too many silent connections of one key"
HANDSHAKE_DEADLINE = "handshake deadline passed"
# distinct device ids one server serves at most (a pool cannot hold more devices than that either)
MAX_SERVED_DEVICES = 4096


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = 512
    max_pending: int = 64
    handshake_deadline_s: float = 10.0

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ConfigError(f"max_connections: must be >= 1 (got {self.max_connections})")
        if not 1 <= self.max_pending <= self.max_connections:
            raise ConfigError(
                f"max_pending: must be in 1..max_connections={self.max_connections} (got {self.max_pending})"
            )
        if not self.handshake_deadline_s > 0:
            raise ConfigError(f"handshake_deadline_s: must be > 0 (got {self.handshake_deadline_s})")


class ConnectionBudget:
    """Who is connected, who is still handshaking, and since when.

    ``admit(peer, now)`` → None (admitted, pending) or the refusal cause; ``established(peer)``
    when its handshake completes; ``close(peer)`` when it goes; ``expired(now)`` → the pending
    peers whose deadline passed (removed here; the caller drops them)."""

    def __init__(self, limits: ConnectionLimits = ConnectionLimits()) -> None:
        self.limits = limits
        self._pending: dict[Hashable, float] = {}  # peer -> deadline, in admission order
        self._established: set[Hashable] = set()

    @property
    def connections(self) -> int:
        return len(self._pending) + len(self._established)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def is_pending(self, peer: Hashable) -> bool:
        return peer in self._pending

    def admit(self, peer: Hashable, now: float) -> str | None:
        if peer in self._pending or peer in self._established:
            return None
        self.expired(now)  # a deadline that passed frees its slot first
        if self.connections >= self.limits.max_connections:
            return TOO_MANY_CONNECTIONS
        if len(self._pending) >= self.limits.max_pending:
            return TOO_MANY_PENDING
        self._pending[peer] = now + self.limits.handshake_deadline_s
        return None

    def established(self, peer: Hashable) -> None:
        """The peer finished its handshake: it no longer counts against ``max_pending``."""
        if self._pending.pop(peer, None) is None and peer not in self._established:
            raise KeyError(f"peer {peer!r} was never admitted")
        self._established.add(peer)

    def close(self, peer: Hashable) -> None:
        self._pending.pop(peer, None)
        self._established.discard(peer)

    def expired(self, now: float) -> list[Hashable]:
        """Pending peers past their handshake deadline, removed from the budget."""
        out = []
        # deadlines grow with admission order (same deadline for everyone, time only advances)
        for peer, deadline in list(self._pending.items()):
            if deadline > now:
                break
            out.append(peer)
            del self._pending[peer]
        return out

    def next_deadline(self) -> float | None:
        """When the next pending handshake expires (to bound a poll's timeout), or None."""
        return next(iter(self._pending.values()), None)


class SilentKeyQuota:
    """At most ``per_key`` connections of one key that have authenticated and not yet sent a
    frame, counted from the authenticator's admissions (``admit``, in its thread) and the loop's
    first frames (``spoke``), each admission forgotten after ``window_s``.

    Why: a connection that authenticates and then says nothing is cut at the handshake deadline,
    or sooner to make room when the server is at its connection limit; ZeroMQ reconnects it
    100 ms later with a new accept, CURVE handshake and ZAP request. Hundreds of such DEALERs
    holding one valid key keep the server cutting and re-admitting them for as long as they run.
    Refused by the authenticator instead, a DEALER stops: libzmq does not reconnect after a
    handshake the server refused. A device sends its HELLO with its handshake, so its admission
    is released at once and it never meets the quota; only its own key's silent flood can crowd
    it out, for at most one ``window_s`` after the flood stops.

    Why forget after ``window_s`` (the handshake deadline): the loop never learns which key a
    silent connection holds (it sent no frame), so it cannot say when one closes; by the
    deadline the transport has cut it anyway. ``per_key`` < 1: no quota."""

    def __init__(self, per_key: int, window_s: float) -> None:
        self.per_key = int(per_key)
        self.window_s = float(window_s)
        self.refused = 0
        self._admitted: dict[bytes, deque[float]] = {}  # key -> admission times, oldest first
        self._lock = threading.Lock()  # admit runs in the authenticator's thread, spoke in the loop's

    def admit(self, key: bytes, now: float) -> bool:
        if self.per_key < 1:
            return True
        with self._lock:
            times = self._admitted.setdefault(key, deque())
            while times and times[0] <= now - self.window_s:
                times.popleft()
            if len(times) >= self.per_key:
                self.refused += 1
                return False
            times.append(now)
            return True

    def spoke(self, key: bytes) -> None:
        """A connection of ``key`` sent its first frame: it no longer counts as silent."""
        with self._lock:
            times = self._admitted.get(key)
            if times:
                times.popleft()
            if not times:
                self._admitted.pop(key, None)


@dataclass
class _Window:
    start: float
    count: int = 0  # refusals since the last line
    last_peer: str | None = None


class RefusalLog:
    """Refusals (or any stream a peer can repeat at will) as at most one log line per cause per
    interval.

    The first refusal of a cause is logged at once (an operator sees a problem start); further
    refusals of that cause within ``interval_s`` are only counted, and when the interval ends
    one line says how many there were. A cause quiet for a whole interval starts afresh.
    ``totals`` keeps the count per cause for the run's summary. Causes must come from a fixed
    vocabulary (the constants above, protocol error codes): never from what a peer sent."""

    def __init__(
        self, interval_s: float = 10.0, emit: Callable[[str], None] | None = None, label: str = "refused"
    ) -> None:
        if not interval_s > 0:
            raise ConfigError(f"interval_s: must be > 0 (got {interval_s})")
        self.interval_s = float(interval_s)
        self.label = label  # the lines' first word: "refused", or "churn" for sessions ending
        self.emit = emit if emit is not None else log.warning
        self.totals: dict[str, int] = {}
        self._windows: dict[str, _Window] = {}

    def refused(self, cause: str, now: float, peer: str | None = None, announce: bool = True) -> bool:
        """Count one; True when it is the first of its cause in this interval (then it is
        announced, unless ``announce=False``: the caller logs that one its own way)."""
        self.tick(now)
        self.totals[cause] = self.totals.get(cause, 0) + 1
        w = self._windows.get(cause)
        if w is None:
            self._windows[cause] = _Window(start=now)
            if announce:
                self.emit(f"{self.label}: {cause}" + (f" (peer {peer})" if peer else ""))
            return True
        w.count += 1
        w.last_peer = peer
        return False

    def tick(self, now: float) -> None:
        """Write the summary lines of intervals that have ended (call it from the loop's idle
        path too, so that the last burst is reported without waiting for another refusal)."""
        for cause, w in list(self._windows.items()):
            if now - w.start < self.interval_s:
                continue
            if w.count == 0:
                del self._windows[cause]  # quiet for a whole interval: the next one is news
                continue
            self._line(cause, w, now)
            self._windows[cause] = _Window(start=now)

    def flush(self, now: float) -> None:
        """Write every pending count now (at shutdown)."""
        for cause, w in list(self._windows.items()):
            if w.count:
                self._line(cause, w, now)
        self._windows.clear()

    def _line(self, cause: str, w: _Window, now: float) -> None:
        peer = f", last peer {w.last_peer}" if w.last_peer else ""
        self.emit(
            f"{self.label}: {cause} x{w.count} more in the last {now - w.start:.1f} s"
            f"{peer} ({self.totals[cause]} in all)"
        )
