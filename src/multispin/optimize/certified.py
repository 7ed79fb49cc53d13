"""Branch and bound over draft lengths (policy ``certified``): the SAA optimum, proven, for small K.

The shipped search's plan is the first incumbent. A node is a box lo ≤ γ ≤ hi; its bound is the
exact maximum over the box (`multispin.optimize.bound.maximise_ratio`) of
``N(γ) / (T_comp(γ) + Ē_lo)``, with Ē_lo a lower bound on Ē(γ) over the box: on every sample the
rejected set of any γ in the box contains that of lo, so ``T*(o_s(γ)) ≥ T̲(o_s(lo))`` where
``T̲(R) = min_{R' ⊇ R} T*(R')`` (the superset minimum of the exact 2^K table, computed once; it
needs no monotonicity of T*). Nodes are expanded best bound first, the widest device range split
in two; a node whose bound is not above the incumbent (relative 10⁻⁹) is closed. When none is
open the incumbent is **proven optimal**; when the time budget runs out first the plan is the
incumbent and the certificate is the largest open bound (still a valid upper bound).
"""

from __future__ import annotations

import heapq
import time

import numpy as np

from multispin.errors import ConfigError
from multispin.optimize.bound import maximise_ratio, t_comm_table
from multispin.optimize.goodput import SAAObjective, t_comp_s
from multispin.optimize.incremental import sample_levels

CERTIFIED_MAX_DEVICES = 12
DEFAULT_TIME_BUDGET_S = 20.0
_PROOF_RTOL = 1e-9  # "proven optimal": no γ is more than this (relative) above the plan


def superset_min(table: np.ndarray) -> np.ndarray:
    """``T̲(R) = min over R' ⊇ R of T*(R')`` for every R (a K-pass transform over the bits)."""
    out = table.copy()
    k = int(np.log2(table.size))
    idx = np.arange(table.size)
    for b in range(k):
        without = (idx >> b) & 1 == 0
        out[idx[without]] = np.minimum(out[idx[without]], out[idx[without] | (1 << b)])
    return out


class _Exact:
    """G(γ) and the box lower bound on Ē from the 2^K table (codes of every sample's rejected set)."""

    def __init__(self, obj: SAAObjective):
        self.obj = obj
        self.inst = obj.inst
        self.levels = sample_levels(obj)
        self.table = t_comm_table(obj)
        self.floor = superset_min(self.table)
        self.weights = np.int64(1) << np.arange(self.inst.num_devices, dtype=np.int64)

    def codes(self, gamma: np.ndarray) -> np.ndarray:
        return (gamma[None, :] > self.levels).astype(np.int64) @ self.weights

    def value(self, gamma: np.ndarray) -> float:
        k = self.inst.num_devices
        num = float(self.inst.expected_tokens[np.arange(k), gamma].sum())
        return num / (float(t_comp_s(self.inst, gamma)) + float(self.table[self.codes(gamma)].mean()))

    def node_bound(self, lo: np.ndarray, hi: np.ndarray):
        res = maximise_ratio(self.inst, None, 0.0, lo, hi, const=float(self.floor[self.codes(lo)].mean()))
        return res.value, res.draft_len


def branch_and_bound(
    obj: SAAObjective,
    incumbent: np.ndarray,
    time_budget_s: float = DEFAULT_TIME_BUDGET_S,
    max_devices: int = CERTIFIED_MAX_DEVICES,
):
    """``(γ, value, upper_bound, proven, nodes)``: the best γ found from ``incumbent``, a valid upper
    bound on max_γ G(γ), and whether the two meet (the module doc)."""
    inst = obj.inst
    k = inst.num_devices
    if k > max_devices:
        raise ConfigError(
            f"devices: the certified policy (branch and bound) is limited to {max_devices} devices "
            f"(got {k}); use the shipped greedy, whose certificate is the communication-aware bound"
        )
    if obj.modes == "random":
        raise ConfigError("modes: the certified policy needs a deterministic mode policy (optimal, all_ul, all_dl)")
    ex = _Exact(obj)
    best_g = np.asarray(incumbent, dtype=np.int64).copy()
    best = ex.value(best_g)
    deadline = time.monotonic() + time_budget_s
    lo0, hi0 = np.zeros(k, dtype=np.int64), np.full(k, inst.gamma_max, dtype=np.int64)
    ub, arg = ex.node_bound(lo0, hi0)
    heap = [(-ub, 0, lo0, hi0, arg)]
    nodes, counter = 0, 1
    while heap:
        neg_ub, _, lo, hi, arg = heap[0]
        if -neg_ub <= best * (1 + _PROOF_RTOL):
            heap = []
            break
        if time.monotonic() > deadline:
            break
        heapq.heappop(heap)
        nodes += 1
        v = ex.value(arg)  # the relaxation's maximiser is a plan too
        if v > best:
            best, best_g = v, arg.copy()
        if np.array_equal(lo, hi):
            continue
        j = int(np.argmax(hi - lo))
        mid = (lo[j] + hi[j]) // 2
        for a, b in ((lo[j], mid), (mid + 1, hi[j])):
            clo, chi = lo.copy(), hi.copy()
            clo[j], chi[j] = a, b
            cub, carg = ex.node_bound(clo, chi)
            if cub > best * (1 + _PROOF_RTOL):
                heapq.heappush(heap, (-cub, counter, clo, chi, carg))
                counter += 1
    upper = max(best, max((-h[0] for h in heap), default=best))
    return best_g, best, upper, not heap, nodes
