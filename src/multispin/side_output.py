"""Side output: the files a run writes beside its real work (the server's ``--log``, a testbed's
rounds.jsonl and summary.json, a device's ``--result``). When one cannot be written, a full disk
above all (ENOSPC, EDQUOT; EFBIG under a file-size limit, which the command line turns from a
SIGXFSZ kill into this error), the run goes on: that file stops with one line saying so, and
every later write to it is skipped. What the run is for is not side output: the texts still
reach the devices and stdout, and the journal keeps its own guarantee (it refuses a round it
cannot make durable; `multispin.runtime.store.journal`).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, TextIO

log = logging.getLogger("multispin.output")

# errnos that mean "no room": a full disk, a full quota, a file-size limit
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def why_not_written(exc: OSError) -> str:
    """``disk full (No space left on device)`` or the error's own words."""
    words = exc.strerror or str(exc)
    return f"disk full ({words})" if exc.errno in DISK_FULL else words


def lost_line(what: str, path: Path | str, exc: OSError) -> str:
    return f"{what} {path}: not written from here on: {why_not_written(exc)}; the run goes on"


class SideFile:
    """A text file written line by line (each line flushed). The first failed write or flush
    closes it and logs `lost_line` once; later lines are dropped. ``lost``: that line, or None."""

    def __init__(self, path: str | Path, what: str, mode: str = "a"):
        self.path, self.what = Path(path), what
        self.lost: str | None = None
        self._lock = threading.Lock()
        self._fh: TextIO | None = open(self.path, mode, encoding="utf-8")
        self._whole = self.path.stat().st_size  # bytes up to the end of the last whole line

    def write_line(self, text: str) -> None:
        with self._lock:
            if self._fh is None:
                return
            try:
                self._fh.write(text + "\n")
                self._fh.flush()
            except OSError as exc:
                self._give_up(exc)
                return
            self._whole += len(text.encode("utf-8")) + 1

    def close(self, sync: bool = False) -> None:
        with self._lock:
            if self._fh is None:
                return
            try:
                self._fh.flush()
                if sync:
                    os.fsync(self._fh.fileno())
            except OSError as exc:
                self._give_up(exc)
                return
            self._fh.close()
            self._fh = None

    def _give_up(self, exc: OSError) -> None:
        fh, self._fh = self._fh, None
        try:
            if fh is not None:
                fh.close()
        except OSError:
            pass  # the buffered rest cannot be written either
        try:  # no half line at the end: a reader of the file sees whole lines only
            os.truncate(self.path, self._whole)
        except OSError:
            pass
        self.lost = lost_line(self.what, self.path, exc)
        log.warning("%s", self.lost)


def write_side_json(doc: Any, path: Path, what: str, indent: int | None = None) -> str | None:
    """``doc`` as a JSON file at ``path``; None when written, else the one line saying it was
    not, for the caller to show: it goes on, and shows what it can elsewhere."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=indent) + "\n", encoding="utf-8")
        return None
    except OSError as exc:
        try:  # no truncated document left to be read as if whole
            path.unlink(missing_ok=True)
        except OSError:
            pass
        return f"{what} {path}: not written: {why_not_written(exc)}"


__all__ = ["DISK_FULL", "SideFile", "lost_line", "why_not_written", "write_side_json"]
