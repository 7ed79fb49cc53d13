"""``multispin reproduce``: the paper's figures with confidence bands, an identification study of the unpublished settings and a
checked-claims report, from one command.

Modules: one per figure (``fig_*.py``, ``identification.py``: ``table``, ``plot``, ``describe``;
runnable with ``--export/--plot``), :mod:`.studies` (what one drop computes, the grids),
:mod:`.runner` (process pool, per-chunk cache, progress bar), :mod:`.stats` (means and CIs),
:mod:`.claims` (the checks of docs/system-model.md §6), :mod:`.report` (report.md),
:mod:`.pipeline` (everything, in order).
"""

from multispin.experiments.reproduce.config import RunConfig

__all__ = ["RunConfig", "reproduce"]


def reproduce(cfg: RunConfig, command: str = ""):
    from multispin.experiments.reproduce.pipeline import reproduce as _run

    return _run(cfg, command)
