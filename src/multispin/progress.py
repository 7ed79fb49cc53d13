"""How a long job says how far it is, and how a command shows it: one convention for every verb.

The work reports one `Step` per unit done (a round, a prompt, a drop) to the callback it was given
(a `StepReporter`); it never draws anything, so a script or a test takes the same reports as
plain values. The command renders them with `step_progress` on stderr:

- on a terminal, a spinner while loading (``.loading(text)``), then one bar per phase with
  done/total, the elapsed time and the time left;
- in a log or a pipe (no live display there), one line each time a phase passes another tenth of
  its work (every ten units when the total is unknown), with the elapsed time and an estimate of
  the time left, so a job run under ``nohup`` or CI is not silent for minutes.

Any layer may import this module (it imports none); rich is loaded only when a command renders.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Step:
    """``done`` of ``total`` ``unit`` of one ``phase`` (``generating: 40/320 tokens``); ``total``
    None when unknown in advance (a run until its jobs end); ``note``: a running figure shown
    beside the count (``412 tokens``)."""

    phase: str
    done: int
    total: int | None
    unit: str
    note: str = ""

    def __str__(self) -> str:
        count = f"{self.done}/{self.total}" if self.total is not None else f"{self.done}"
        return f"{self.phase}: {count} {self.unit}" + (f", {self.note}" if self.note else "")


StepReporter = Callable[[Step], None]


def reporter(progress: StepReporter | None) -> StepReporter:
    """``progress`` itself, or a callback that ignores every step."""
    return progress or (lambda step: None)


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds >= 60 else f"{seconds} s"


class _Silent:
    """The renderer of ``step_progress(enabled=False)``: shows nothing."""

    def loading(self, text: str) -> None:
        pass

    def __call__(self, step: Step) -> None:
        pass


class _Lines:
    """The plain-text renderer: a line per tenth of each phase."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.shown: dict[str, int] = {}

    def loading(self, text: str) -> None:
        pass  # nothing to say until there is something to count

    def __call__(self, step: Step) -> None:
        now = time.monotonic()
        start = self.started.setdefault(step.phase, now)
        mark = step.done // 10 if step.total is None else 10 * step.done // max(step.total, 1)
        if self.shown.get(step.phase) == mark:
            return
        self.shown[step.phase] = mark
        elapsed = now - start
        left = ""
        if step.total is not None and 0 < step.done < step.total:
            left = f", about {_clock(elapsed * (step.total - step.done) / step.done)} left"
        print(f"{step} ({_clock(elapsed)}{left})", file=sys.stderr, flush=True)


class _Bars:
    """The terminal renderer: a spinner while loading, then a bar per phase."""

    def __init__(self, bars: Any) -> None:
        self.bars = bars  # a started rich.progress.Progress
        self.tasks: dict[str, Any] = {}
        self.spinner: Any = None

    def loading(self, text: str) -> None:
        self.spinner = self.bars.add_task(text, total=None, unit="", note="")

    def __call__(self, step: Step) -> None:
        if self.spinner is not None:
            self.bars.remove_task(self.spinner)
            self.spinner = None
        if step.phase not in self.tasks:
            self.tasks[step.phase] = self.bars.add_task(step.phase, total=step.total, unit=step.unit, note="")
        self.bars.update(self.tasks[step.phase], completed=step.done, total=step.total, note=step.note)


@contextlib.contextmanager
def step_progress(console: Any = None, enabled: bool = True, transient: bool = False) -> Iterator[Any]:
    """A renderer to pass as a job's ``progress`` (a `StepReporter`) that writes to stderr (or
    ``console``, a rich Console); ``.loading(text)`` shows a spinner (on a terminal) until the
    first step. ``enabled=False`` (``--no-progress``) shows nothing; ``transient``: the bars
    vanish when the job ends (a spinner before a result)."""
    if not enabled:
        yield _Silent()
        return
    # lazy: rich is slow to import, and a run that draws no bars never needs it
    from rich.console import Console  # noqa: PLC0415

    err = console or Console(stderr=True)
    if not err.is_terminal:
        yield _Lines()
        return
    from rich import progress as rich_progress  # noqa: PLC0415 (lazy: as above)

    with rich_progress.Progress(
        rich_progress.SpinnerColumn(),
        rich_progress.TextColumn("{task.description:<20}"),
        rich_progress.BarColumn(),
        rich_progress.MofNCompleteColumn(),
        rich_progress.TextColumn("{task.fields[unit]}"),
        rich_progress.TextColumn("{task.fields[note]}"),
        rich_progress.TimeElapsedColumn(),
        rich_progress.TextColumn("ETA"),
        rich_progress.TimeRemainingColumn(),
        console=err,
        transient=transient,
    ) as bars:
        yield _Bars(bars)
