"""``multispin reproduce``: the paper's figures with confidence bands, an identification study of the unpublished settings and a
checked-claims report, from one command.

Modules: one per figure (``fig_*.py``, ``identification.py``: ``table``, ``plot``, ``describe``;
one figure alone is ``multispin reproduce --figure NAME``), `.studies` (what one drop computes, the grids),
`.runner` (process pool, per-chunk cache, progress bar), `.stats` (means and CIs),
`.claims` (the checks of docs/system-model.md §6), `.report` (report.md),
`.pipeline` (everything, in order).
"""

from multispin.experiments.reproduce.config import RunConfig

__all__ = ["RunConfig", "reproduce"]


def reproduce(cfg: RunConfig, command: str = ""):
    # lazy: the pipeline imports scipy and the sweeps, and the CLI's start-up path imports this package
    from multispin.experiments.reproduce.pipeline import reproduce as _run  # noqa: PLC0415

    return _run(cfg, command)
