"""Progress of a long verb on stderr, from the `multispin.experiments.progress.Step`
reports of the experiment it runs.

On a terminal: one bar per phase with done/total, the elapsed time and the time left. In a log
or a pipe (no live display there): one line each time a phase passes another tenth of its work,
with the elapsed time and an estimate of the time left, so a job run under ``nohup`` or CI is
not silent for minutes.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from multispin.experiments.progress import Step


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds >= 60 else f"{seconds} s"


class _Lines:
    """The plain-text reporter: a line per tenth of each phase."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.shown: dict[str, int] = {}

    def loading(self, text: str) -> None:
        pass  # nothing to say until there is something to count

    def __call__(self, step: Step) -> None:
        now = time.monotonic()
        start = self.started.setdefault(step.phase, now)
        tenth = 10 * step.done // max(step.total, 1)
        if self.shown.get(step.phase) == tenth:
            return
        self.shown[step.phase] = tenth
        elapsed = now - start
        left = ""
        if 0 < step.done < step.total:
            left = f", about {_clock(elapsed * (step.total - step.done) / step.done)} left"
        print(f"{step} ({_clock(elapsed)}{left})", file=sys.stderr, flush=True)


class _Bars:
    """The terminal reporter: a spinner while loading, then a bar per phase."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.tasks: dict[str, int] = {}
        self.spinner: int | None = None

    def loading(self, text: str) -> None:
        self.spinner = self.progress.add_task(text, total=None, unit="")

    def __call__(self, step: Step) -> None:
        if self.spinner is not None:
            self.progress.remove_task(self.spinner)
            self.spinner = None
        if step.phase not in self.tasks:
            self.tasks[step.phase] = self.progress.add_task(step.phase, total=step.total, unit=step.unit)
        self.progress.update(self.tasks[step.phase], completed=step.done, total=step.total)


@contextlib.contextmanager
def step_progress(console: Console | None = None) -> Iterator:
    """A reporter to pass as an experiment's ``progress``; ``.loading(text)`` shows a spinner
    (on a terminal) until the first step."""
    err = console or Console(stderr=True)
    if not err.is_terminal:
        yield _Lines()
        return
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description:<20}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[unit]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err,
    ) as progress:
        yield _Bars(progress)
