"""How a long experiment says how far it is: one `Step` per unit of work done.

The experiment reports; the command renders (a bar with an ETA on a terminal, a line every tenth
of the way in a log), so a script or a test can take the same reports as plain values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """``done`` of ``total`` ``unit`` of one ``phase`` (``generating``: 40 of 320 tokens)."""

    phase: str
    done: int
    total: int
    unit: str

    def __str__(self) -> str:
        return f"{self.phase}: {self.done}/{self.total} {self.unit}"


Progress = Callable[[Step], None]


def reporter(progress: Progress | None) -> Progress:
    """``progress`` itself, or a callback that ignores every step."""
    return progress or (lambda step: None)
