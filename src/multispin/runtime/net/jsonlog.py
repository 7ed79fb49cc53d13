"""The server's JSON-lines log: one object per line, flushed line by line so that a SIGTERM
never loses one, and forwarded to an optional callback."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from multispin.side_output import SideFile


class JsonlLog:
    """Append-only JSON-lines log, flushed after every line; also forwards to a callback. It is
    side output (`multispin.side_output`): a full disk stops the file with one line, the run and
    the callback go on."""

    def __init__(self, path: str | Path | None, on_event: Callable[[dict], None] | None = None):
        self.path = Path(path) if path else None
        self._file: SideFile | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = SideFile(self.path, "server log")
        self._on_event = on_event
        self._t0 = time.monotonic()

    @property
    def active(self) -> bool:
        """Whether a line goes anywhere (a file or a callback): else a caller need not build it."""
        return self._file is not None or self._on_event is not None

    def write(self, event: str, **fields_: Any) -> None:
        rec = {"event": event, "t_s": round(time.monotonic() - self._t0, 6), **fields_}
        self.write_record(rec)

    def write_record(self, rec: dict) -> None:
        rec.setdefault("t_s", round(time.monotonic() - self._t0, 6))
        if self._file is not None:
            self._file.write_line(json.dumps(rec, separators=(",", ":")))
        if self._on_event is not None:
            self._on_event(rec)

    def notify(self, event: str, **fields_: Any) -> None:
        """Forward to the callback only: for what is counted in the file, not written line by line."""
        if self._on_event is not None:
            self._on_event({"event": event, "t_s": round(time.monotonic() - self._t0, 6), **fields_})

    def close(self) -> None:
        if self._file is not None:
            self._file.close(sync=True)
