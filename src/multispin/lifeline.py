"""Helper processes end when the process they work for is gone, however it ended (SIGKILL
included, when no cleanup of the parent runs).

`exit_with_parent` starts a daemon thread that looks at the parent's pid every ``WATCH_S``
seconds and ends this process (``os._exit``) once the parent has changed, that is once the
parent died and this process was re-parented (to init or a subreaper). A thread rather than
Linux's ``PR_SET_PDEATHSIG``: that signal follows the *thread* that forked the child, and the
processes here may be forked from a worker thread that ends long before its process does.

The reproduction's worker pool runs under a forkserver: the forkserver is the workers' parent and
the main process is the forkserver's, so the forkserver imports `multispin._lifeline_preload`
(its preload list) to watch the main process, and each worker watches the forkserver: a killed
main process takes both down within about two ``WATCH_S``.
"""

from __future__ import annotations

import os
import threading
import time

# how often a helper looks at its parent's pid (seconds)
WATCH_S = 0.5
# exit status of a helper whose parent went away
ORPHANED_EXIT = 70


def _watch(parent: int, interval_s: float) -> None:
    while True:
        time.sleep(interval_s)
        if os.getppid() != parent:
            os._exit(ORPHANED_EXIT)


def exit_with_parent(interval_s: float = WATCH_S) -> None:
    """End this process within ``interval_s`` of its parent's death (see the module doc)."""
    parent = os.getppid()
    if parent == 1:  # re-parented already: the process it was started for is gone
        os._exit(ORPHANED_EXIT)
    threading.Thread(target=_watch, args=(parent, interval_s), name="multispin-lifeline", daemon=True).start()


__all__ = ["ORPHANED_EXIT", "WATCH_S", "exit_with_parent"]
