"""Oracles the optimiser's tests compare against: slow, exhaustive, and used by nothing shipped.

(`multispin.optimize.reactive.brute_force_oracle` stays in the package: the benchmarks time it.)
"""

from __future__ import annotations

import numpy as np

from multispin.errors import ConfigError
from multispin.optimize.bandwidth import SplitDecision, _fixed_modes
from multispin.optimize.modes import BatchDecision, optimal_modes_batch
from multispin.system.instance import Instance


def linear_scan_oracle(rejected, inst: Instance) -> BatchDecision:
    """Every n = 0..|R| of the prefix structure, each with its own DL root (Brent-free)."""
    return optimal_modes_batch(rejected, inst, method="scan", return_modes=True)


def brute_force_split_oracle(rejected, inst: Instance, max_rejected: int = 12) -> SplitDecision:
    """Oracle: every UL/DL mode set of each row, each with the exact joint bandwidth/power solve."""
    mask = np.atleast_2d(np.asarray(rejected, dtype=bool))
    lat = np.zeros(mask.shape[0])
    best_ul = np.zeros_like(mask)
    cnt = mask.sum(axis=1)
    if cnt.max(initial=0) > max_rejected:
        raise ConfigError(f"rejected: brute force is limited to {max_rejected} rejected devices (got {cnt.max()})")
    rows_l, ul_l = [], []
    for r in np.flatnonzero(cnt > 0):
        idx = np.flatnonzero(mask[r])
        codes = np.arange(2**idx.size)
        ul = np.zeros((codes.size, inst.num_devices), dtype=bool)
        ul[:, idx] = ((codes[:, None] >> np.arange(idx.size)[None, :]) & 1).astype(bool)
        rows_l.append(np.full(codes.size, r))
        ul_l.append(ul)
    if not rows_l:
        return SplitDecision(lat, best_ul)
    rows, ul = np.concatenate(rows_l), np.concatenate(ul_l)
    t, _ = _fixed_modes(ul, mask[rows] & ~ul, inst)
    order = np.lexsort((t, rows))
    first = np.ones(order.size, dtype=bool)
    first[1:] = rows[order][1:] != rows[order][:-1]
    pick = order[first]
    lat[rows[pick]] = t[pick]
    best_ul[rows[pick]] = ul[pick]
    return SplitDecision(lat, best_ul)
