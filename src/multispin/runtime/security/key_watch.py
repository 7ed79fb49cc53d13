"""Watching the allowed-keys folder of a running server: what changed, and when to look again.

What: `KeyWatch.poll` looks at the folder at most every ``KEY_POLL_S`` (or at the next poll after
`KeyWatch.request`, which SIGHUP calls) and reloads it when its signature changed; it returns what
happened as a `KeyChange` (with the line an operator reads) and leaves the logging to the server
loop. After a reload, `KeyWatch.revoked` names the sessions whose key is no longer allowed as their
device, which the loop ends between rounds; `KeyWatch.check_claim` is the test a HELLO passes: the
sender's key is the one allowed for the device id it claims.

Why here: an added key must be let in by the transport at once and a removed one's session ended
before the next round, without restarting the server. A folder that cannot be read is a passing
state: out of descriptors (a connection flood) the old keys stay and the folder is looked at
again one poll later; a half-copied or misnamed file keeps the old keys until the folder changes
again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

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

    @property
    def message(self) -> str:
        """The operator's line for this change."""
        if self.kind == RELOADED:
            added = f", added device(s) {self.added}" if self.added else ""
            removed = f", removed device(s) {self.removed}" if self.removed else ""
            return f"allowed keys reloaded: {self.keys} key(s){added}{removed}"
        if self.kind == FAILED:
            return f"allowed keys not reloaded, the previous {self.keys} stay: {self.reason}"
        return f"allowed keys not re-read ({self.reason})"

    @property
    def record(self) -> dict[str, Any]:
        """The log record of this change (a reload or a refused reload)."""
        if self.kind == RELOADED:
            return {"event": "keys_reloaded", "keys": self.keys, "added": self.added, "removed": self.removed}
        return {"event": "keys_reload_failed", "reason": self.reason}


class KeyWatch:
    """The allowed keys of one server, reloaded when their folder changes or on request."""

    def __init__(self, allowed: AllowedKeys, poll_s: float = KEY_POLL_S) -> None:
        self.allowed = allowed
        self.poll_s = poll_s
        self._requested = threading.Event()
        self._seen = allowed.signature()
        self._next_poll = 0.0
        self._retry_at = 0.0
        self._reloaded = False  # since the last look at the sessions (`revoked`)

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
        self._reloaded = True
        after = self.allowed.ids()
        return KeyChange(RELOADED, len(after), sorted(after - before), sorted(before - after))

    def revoked(self, sessions: Iterable[tuple[int, str]]) -> list[int]:
        """Of ``sessions`` (device id, the key its session was admitted with), the devices whose
        key is no longer allowed as theirs; empty unless the keys were reloaded since the last call."""
        if not self._reloaded:
            return []
        self._reloaded = False
        return [d for d, key in sessions if self.allowed.identity_for(key) != d]

    def check_claim(self, key: str | None, d: int) -> str | None:
        """None when ``key`` is the key allowed for device ``d``; else why the claim is refused."""
        owner = self.allowed.identity_for(key)
        if owner is None:
            return f"the sender's key is not allowed (claimed device {d})"
        if owner != d:
            return f"device {owner}'s key claimed device id {d}"
        return None


__all__ = ["FAILED", "KEY_POLL_S", "NO_DESCRIPTORS", "RELOADED", "KeyChange", "KeyWatch"]
