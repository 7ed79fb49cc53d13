"""Imported by the reproduction's forkserver only (its preload list, `multispin.lifeline`): the
forkserver then ends when the main process that started it is gone, however it ended."""

from __future__ import annotations

from multispin.lifeline import exit_with_parent

exit_with_parent()
