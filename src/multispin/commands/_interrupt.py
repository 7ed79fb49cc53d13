"""Ctrl-C and SIGTERM on the command line: one line saying how far the verb got, exit 130 / 143.

`catch_signals` (run by `multispin.cli.main`) turns SIGTERM into the same
`multispin.errors.Interrupted` as Ctrl-C, so every verb stops the same way on both; a
verb wraps its long part in `reported_interrupt` to print the experiment's own line (``interrupted
after 12 of 40 drops; rerun the same command to resume``) and to show partial results. A verb
that does neither still gets one line, ``interrupted``.

As a program (``multispin ...``, not `multispin.cli.main` called with arguments, as the tests do),
the stop is bounded: a watcher thread sees each signal the moment it arrives (the signal module's
wakeup fd, so a main thread busy in C code cannot delay it), and ``STOP_GRACE_S`` after the first
one, or at once on a second one, ends the process with 128 + signum after killing its child
processes, whatever the verb was doing; a verb that drains on its own (``serve``) opts out of the
grace (`drain_on_signal`), not of the second signal. After an interrupted verb has said its line,
the process ends at once (interpreter shutdown can wait on a worker pool's threads).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import typer

from multispin.errors import Interrupted

# seconds from the first Ctrl-C (or SIGTERM) to the end of the process, clean stop or not
STOP_GRACE_S = float(os.environ.get("MULTISPIN_STOP_GRACE_S", "4"))


class _State:
    signum: int | None = None  # the signal that stopped the verb, once one has
    reported: bool = False  # the verb printed its own line
    drain: bool = False  # the verb stops on its own after the first signal (no grace timer)
    watching: bool = False  # a watcher thread bounds the stop (the program, not a test's call)


def _on_signal(signum: int, frame: Any) -> None:
    if _State.signum is not None and _State.watching:
        return  # a second signal: the watcher ends the process; no exception in the verb's cleanup
    _State.signum = signum
    raise Interrupted("interrupted", signum)


def drain_on_signal() -> None:
    """The verb handles the first signal itself (``serve`` drains its round): no grace timer; a
    second signal still ends the process at once."""
    _State.drain = True


def _kill_children() -> None:
    import multiprocessing

    for child in multiprocessing.active_children():
        with contextlib.suppress(Exception):
            child.kill()
    with contextlib.suppress(Exception):
        from multispin.runtime.net.launcher import kill_device_processes

        kill_device_processes()


def hard_exit(signum: int, line: str) -> None:
    """End the process now: ``line`` on stderr unless the verb said its own, children killed, exit
    128 + signum. No Python cleanup runs (it is what may hang)."""
    if not _State.reported and line:
        _State.reported = True
        with contextlib.suppress(OSError):
            os.write(2, (line + "\n").encode())
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    _kill_children()
    _release_named_semaphores()
    os._exit(128 + signum)


def _release_named_semaphores(timeout_s: float = 1.0) -> None:
    """Unlink the named semaphores of a worker pool's queues, which their finalizers would do at a
    normal exit and ``os._exit`` skips: otherwise multiprocessing's resource tracker, which outlives
    this process, prints a "leaked semaphore objects" warning on stderr a second after our line.
    The finalizers of priority >= 0 unlink and close, they do not join; the thread bounds them anyway."""
    from multiprocessing import util

    runner = threading.Thread(target=util._run_finalizers, args=(0,), name="multispin-unlink", daemon=True)
    runner.start()
    runner.join(timeout_s)


def _watch(receiver: socket.socket) -> None:
    """The watcher thread: the grace timer from the first signal, an immediate exit on the second."""
    seen: list[int] = []
    while True:
        try:
            data = receiver.recv(64)
        except OSError:
            return
        if not data:
            return
        for signum in data:
            if signum not in (signal.SIGINT, signal.SIGTERM):
                continue
            seen.append(signum)
            if len(seen) > 1:
                hard_exit(signum, "interrupted again: stopped at once")
            elif not _State.drain:
                threading.Thread(target=_grace, args=(signum,), name="multispin-stop-grace", daemon=True).start()


def _grace(signum: int) -> None:
    time.sleep(STOP_GRACE_S)
    if not _State.drain:
        hard_exit(signum, f"interrupted (stopped after {STOP_GRACE_S:g} s without a clean stop)")


@contextlib.contextmanager
def _watcher() -> Iterator[None]:
    receiver, sender = socket.socketpair()
    sender.setblocking(False)
    try:
        old_fd = signal.set_wakeup_fd(sender.fileno(), warn_on_full_buffer=False)
    except (ValueError, OSError):  # not the main thread of the main interpreter
        receiver.close(), sender.close()
        yield
        return
    _State.watching = True
    threading.Thread(target=_watch, args=(receiver,), name="multispin-signal-watch", daemon=True).start()
    try:
        yield
    finally:
        _State.watching = False
        signal.set_wakeup_fd(old_fd)
        sender.close()  # the watcher's recv ends


@contextlib.contextmanager
def catch_signals(bounded: bool = False) -> Iterator[None]:
    """SIGINT and SIGTERM raise `Interrupted` while the block runs (main thread only;
    a verb may install its own handlers inside, as ``serve`` does to drain a round). ``bounded``:
    the program's stop is bounded in time (module doc)."""
    _State.signum, _State.reported, _State.drain = None, False, False
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # SIGINT too where it was inherited as ignored (a job a script started with `&`): a verb stops
    # on `kill -INT PID` from a script or a supervisor as it does on a terminal's Ctrl-C
    sigs = [signal.SIGTERM, signal.SIGINT]
    old = {s: signal.signal(s, _on_signal) for s in sigs}
    try:
        with _watcher() if bounded else contextlib.nullcontext():
            try:
                yield
            finally:
                if bounded and _State.signum is not None:  # said its line: end now (module doc)
                    hard_exit(_State.signum, "interrupted")
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
        _State.reported = True
    return 128 + (_State.signum or signal.SIGINT)


@contextlib.contextmanager
def reported_interrupt(show_partial: Callable[[Any], None] | None = None) -> Iterator[None]:
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
