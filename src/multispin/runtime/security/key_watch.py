"""Watching the allowed-keys folder of a running server: what changed, and when to look again.

What: `KeyWatch.poll` looks at the folder at most every ``KEY_POLL_S`` (or at the next poll after
`KeyWatch.request`, which SIGHUP calls) and reloads it when its signature changed; it returns what
happened as a `KeyChange` and leaves the logging and the sessions to the server loop.

Why here: an added key must be let in by the transport at once and a removed one's session ended
before the next round, without restarting the server. A folder that cannot be read is a passing
state: out of descriptors (a connection flood) the old keys stay and the folder is looked at
again one poll later; a half-copied or misnamed file keeps the old keys until the folder changes
again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from multispin.errors import SecurityError
from multispin.runtime.security.keys import AllowedKeys

#: how often the allowed-keys folder is looked at for a change (seconds)
KEY_POLL_S = 1.0

RELOADED, FAILED, NO_DESCRIPTORS = "reloaded", "failed", "no_descriptors"


@dataclass(frozen=True)
class KeyChange:
    """One look at the folder that did something: the keys reloaded (``added``, ``removed``), a
    reload refused for a bad file (``reason``; the previous ``keys`` stay), or the folder not read
    for want of descriptors (``reason``)."""

    kind: str
    keys: int
    added: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    reason: str = ""


class KeyWatch:
    """The allowed keys of one server, reloaded when their folder changes or on request."""

    def __init__(self, allowed: AllowedKeys, poll_s: float = KEY_POLL_S) -> None:
        self.allowed = allowed
        self.poll_s = poll_s
        self._requested = threading.Event()
        self._seen = allowed.signature()
        self._next_poll = 0.0
        self._retry_at = 0.0

    def request(self) -> None:
        """Look at the folder at the next poll, changed or not (SIGHUP; any thread)."""
        self._requested.set()

    @property
    def requested(self) -> bool:
        return self._requested.is_set()

    def poll(self, now: float) -> KeyChange | None:
        """Reload the keys if it is time and the folder changed (or a reload was requested);
        None when nothing was done."""
        if not self._requested.is_set() and now < self._next_poll:
            return None
        if now < self._retry_at:  # out of descriptors at the last look: once per poll, even on SIGHUP
            return None
        self._next_poll = now + self.poll_s
        before = self.allowed.ids()
        try:
            seen = self.allowed.signature()
            if not self._requested.is_set() and seen == self._seen:
                return None
            self.allowed.reload()
        except OSError as exc:  # out of descriptors (a flood): the old set stays, polled again next time
            self._retry_at = now + self.poll_s
            return KeyChange(NO_DESCRIPTORS, len(before), reason=str(exc.strerror))
        except SecurityError as exc:  # a half-copied or misnamed file: keep serving the old set
            self._requested.clear()
            self._seen = seen
            return KeyChange(FAILED, len(before), reason=str(exc))
        self._requested.clear()
        self._seen = seen
        after = self.allowed.ids()
        return KeyChange(RELOADED, len(after), sorted(after - before), sorted(before - after))


__all__ = ["FAILED", "KEY_POLL_S", "NO_DESCRIPTORS", "RELOADED", "KeyChange", "KeyWatch"]
