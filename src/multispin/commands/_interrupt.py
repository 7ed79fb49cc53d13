"""Ctrl-C and SIGTERM on the command line: one line saying how far the verb got, exit 130 / 143.

`catch_signals` (run by `multispin.cli.main`) turns SIGTERM into the same
`multispin.errors.Interrupted` as Ctrl-C, so every verb stops the same way on both; a
verb wraps its long part in `reported_interrupt` to print the experiment's own line (``interrupted
after 12 of 40 drops; rerun the same command to resume``) and to show partial results. A verb
that does neither still gets one line, ``interrupted``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Callable, Iterator, Optional

import typer

from multispin.errors import Interrupted


class _State:
    signum: Optional[int] = None  # the signal that stopped the verb, once one has
    reported: bool = False  # the verb printed its own line


def _on_signal(signum: int, frame: Any) -> None:
    _State.signum = signum
    raise Interrupted("interrupted", signum)


@contextlib.contextmanager
def catch_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise `Interrupted` while the block runs (main thread only;
    a verb may install its own handlers inside, as ``serve`` does to drain a round). SIGINT is
    left alone where it is ignored (a background job of a script)."""
    _State.signum, _State.reported = None, False
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = [signal.SIGTERM] + ([signal.SIGINT] if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN else [])
    old = {s: signal.signal(s, _on_signal) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def exit_code(code: Any) -> Any:
    """The verb's exit code, made 128 + signum (with one line, if the verb printed none) when a
    signal stopped it: the flag parser reports every KeyboardInterrupt as 130."""
    if _State.signum is None and code != 130:
        return code
    if not _State.reported:
        typer.echo("interrupted", err=True)
    return 128 + (_State.signum or signal.SIGINT)


@contextlib.contextmanager
def reported_interrupt(show_partial: Optional[Callable[[Any], None]] = None) -> Iterator[None]:
    """On Ctrl-C or SIGTERM inside the block: ``show_partial(exc.partial)`` when the experiment
    left partial results, then the interruption's one line on stderr, then exit 128 + signum."""
    try:
        yield
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        _State.signum, _State.reported = signum, True
        partial = getattr(exc, "partial", None)
        if show_partial is not None and partial is not None:
            show_partial(partial)
        typer.echo(str(exc) or "interrupted", err=True)
        raise typer.Exit(128 + signum) from None
