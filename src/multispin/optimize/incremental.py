"""Incremental SAA goodput: G(γ) for many neighbouring γ's on one set of common random numbers.

With common uniforms u (N, K), device k is rejected in sample s at draft length γ exactly when
``γ > L[s, k]``, where ``L[s, k]`` (the sample's *level*) is the largest γ at which its first γ
tokens are all accepted (``u ≤ P(first γ accepted)``). So a move of γ_k changes only the samples
whose level lies between the old and the new γ_k, and in those only device k's bit. The state
keeps, per sample, the current T_comm* and, per (sample, device), the T_comm* with that device's
bit flipped (``flip``), recomputed lazily where a move invalidated it. A line search over all
γ_k' ∈ 0..γ_max of one device then costs one bincount; a move that changes several devices
re-solves only the samples whose outcome changed. Every value equals the full evaluation of
`multispin.optimize.goodput.SAAObjective` (tested to 1e-12). Sets are solved by `t_comm_of`: the
objective's solver, or where the closed form covers it `FlipSolver.solve` (the same values, bit
for bit, at a fraction of the cost on small batches).
"""

from __future__ import annotations

import numpy as np

from multispin.optimize.flips import solver_for
from multispin.optimize.goodput import SAAObjective, _row_keys

# Batches from this many rows up (and K ≤ 62, where a row's key is one integer) are deduplicated
# before `FlipSolver.solve`: a search's large batches (its group starts: few devices, many lengths)
# repeat most sets; its small ones cost less to solve than to sort.
_DEDUP_ROWS = 512


def sample_levels(obj: SAAObjective) -> np.ndarray:
    """``L[s, k]`` = the largest γ ≤ γ_max with u_{s,k} ≤ P(first γ tokens of device k accepted).

    Computed once per objective (its uniforms and instance never change) and kept on it: a search
    builds many states on one objective. Callers must not write into the array."""
    cached = getattr(obj, "_sample_levels", None)
    if cached is not None and cached[0] is obj.uniforms and cached[1] is obj.inst:
        return cached[2]
    surv = obj.inst.survival[:, 1:]  # (K, γ_max), non-increasing in γ; P(γ = 0 accepted) = 1
    levels = np.zeros(obj.uniforms.shape, dtype=np.int64)
    for g in range(surv.shape[1]):  # a loop over γ keeps memory at O(N·K)
        levels += obj.uniforms <= surv[None, :, g]
    levels.flags.writeable = False
    obj._sample_levels = (obj.uniforms, obj.inst, levels)  # type: ignore[attr-defined]  # a cache riding on the objective
    return levels


def head(obj: SAAObjective, m: int) -> SAAObjective:
    """`SAAObjective.head` with the levels of its samples taken from ``obj``'s (the first m rows)
    instead of computed again."""
    out = obj.head(m)
    out._sample_levels = (out.uniforms, out.inst, sample_levels(obj)[:m])  # type: ignore[attr-defined]
    return out


def t_comm_of(obj: SAAObjective, mask: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``obj.t_comm_rows(mask, rows)``: by `FlipSolver.solve` where the closed form covers the
    objective (the same values, bit for bit, at a fraction of the cost on a search's small batches)."""
    solver = solver_for(obj)
    if solver is None:
        return obj.t_comm_rows(mask, rows)
    if mask.shape[0] >= _DEDUP_ROWS and mask.shape[1] <= 62:  # many rows repeat: solve each set once
        keys = _row_keys(mask)
        order = np.argsort(keys)  # any row of a group stands for it: no stable sort needed
        new = np.empty(keys.size, dtype=bool)
        new[0] = True
        np.not_equal(keys[order[1:]], keys[order[:-1]], out=new[1:])
        inverse = np.empty(keys.size, dtype=np.int64)
        inverse[order] = np.cumsum(new) - 1
        first = order[new]
        obj.num_solves += first.size
        return solver.solve(mask[first])[inverse]
    obj.num_solves += mask.shape[0]
    return solver.solve(mask)


def t_comp_unchecked(inst, gamma: np.ndarray) -> np.ndarray:
    """`multispin.optimize.goodput.t_comp_s` (the same operations, so the same values) without its
    validation of γ: a search's own candidates are valid by construction, and on its hot path the
    checks cost as much as the arithmetic."""
    c = inst.compute
    draft = (gamma * inst.token_latency_s).max(axis=-1)
    return draft + c.t_ver0_s + inst.num_devices * c.t_ver1_s + c.t_ver_tok_s * (gamma + 1).sum(axis=-1)


class IncrementalSAA:
    """The SAA goodput at a current γ, with cheap evaluation of moves away from it."""

    def __init__(
        self,
        obj: SAAObjective,
        gamma,
        t_comm: np.ndarray | None = None,
        closed_form: bool = False,
        repeated_sets: bool = False,
    ):
        self.obj = obj
        # ``closed_form``: flipped outcomes from `multispin.optimize.flips` (O(log K) each instead of a
        # K-wide solve) where it covers the objective. Its values differ from the solver's by rounding
        # (up to ~1e-10 relative where a deep fade's 1/h dominates a sum), so they only rank moves:
        # the samples' T_comm* at the current γ, and so every value() and candidate_values(), stay the
        # solver's. ``repeated_sets``: the samples share a few rejected sets (most devices never
        # rejected), so each distinct set's flips are computed once (`FlipSolver.by_set`: the same
        # values).
        self._flipper = solver_for(obj) if closed_form else None
        self._flip_values = None
        if self._flipper is not None:
            self._flip_values = self._flipper.by_set if repeated_sets else self._flipper
        inst = obj.inst
        self.inst = inst
        self.levels = sample_levels(obj)
        self.gamma = np.asarray(gamma, dtype=np.int64).copy()
        self.rejected = self.gamma[None, :] > self.levels
        # ``t_comm``: the samples' T_comm* at γ when the caller has it (saves one solve of every row)
        self.t_comm = (
            t_comm_of(obj, self.rejected, np.arange(self.rejected.shape[0]))
            if t_comm is None
            else np.array(t_comm, dtype=float)
        )
        n, k = self.levels.shape
        self.flip = np.zeros((n, k))
        self.flip_valid = np.zeros((n, k), dtype=bool)
        self.solves = n if t_comm is None else 0
        c = inst.compute
        self._t_fixed = c.t_ver0_s + k * c.t_ver1_s + c.t_ver_tok_s * k
        self._below_max: np.ndarray | None = None
        self._bins: np.ndarray | None = None  # line_table's histogram bin of every (sample, device)

    # ------------------------------------------------------------------ the current point

    @property
    def n_saa(self) -> int:
        return self.levels.shape[0]

    def tokens(self, gamma=None) -> float:
        g = self.gamma if gamma is None else gamma
        return float(np.sum(self.inst.expected_tokens[np.arange(g.size), g]))

    def value(self) -> float:
        """G at the current γ."""
        tc = float(t_comp_unchecked(self.inst, self.gamma))
        return self.tokens() / (tc + float(np.mean(self.t_comm)))

    # ------------------------------------------------------------------ one device, every γ_k'

    def _solve_flips(self, rows: np.ndarray, cols: np.ndarray) -> None:
        """Re-solve the flipped entries (rows[i], cols[i]) in one batch and mark them valid."""
        if rows.size and self._flip_values is not None:
            self.flip[rows, cols] = self._flip_values(self.rejected, rows, cols)
            self.flip_valid[rows, cols] = True
            self.solves += rows.size
        elif rows.size:
            i = np.arange(rows.size)
            masks = self.rejected[rows].copy()
            masks[i, cols] = ~masks[i, cols]
            self.flip[rows, cols] = t_comm_of(self.obj, masks, rows)
            self.flip_valid[rows, cols] = True
            self.solves += rows.size

    def _flip_column(self, k: int) -> np.ndarray:
        """T_comm* of every sample with device k's bit flipped (re-solving only invalid entries)."""
        rows = np.flatnonzero(~self.flip_valid[:, k] & self._movable()[:, k])
        self._solve_flips(rows, np.full(rows.size, k))
        return self.flip[:, k]

    def _movable(self) -> np.ndarray:
        """``levels < γ_max``: the (sample, device) entries some γ_k rejects (built once per state)."""
        if self._below_max is None:
            self._below_max = self.levels < self.inst.gamma_max
        return self._below_max

    def refresh_flips(self) -> None:
        """Re-solve every invalid flipped entry in one batch (cheaper than column by column)."""
        self._solve_flips(*np.nonzero(~self.flip_valid & self._movable()))

    def line_values(self, k: int) -> np.ndarray:
        """G with γ_k replaced by each of 0..γ_max (the others fixed), shape (γ_max + 1,)."""
        inst = self.inst
        gmax = inst.gamma_max
        lv = self.levels[:, k]
        use = lv < gmax  # a sample at level γ_max is accepted at every γ_k: never changes
        diff = self._flip_column(k)[use] - self.t_comm[use]
        # cum[j] = Σ over samples with level < j of (flipped − current)
        cum = np.concatenate([[0.0], np.cumsum(np.bincount(lv[use], weights=diff, minlength=gmax + 1))])
        cand = np.arange(gmax + 1)
        gk = self.gamma[k]
        delta = np.where(cand >= gk, cum[cand] - cum[gk], cum[gk] - cum[cand])
        others = np.delete(self.gamma * inst.token_latency_s, k)
        draft = np.maximum(others.max(initial=0.0), cand * inst.token_latency_s[k])
        tc = draft + self._t_fixed + inst.compute.t_ver_tok_s * (self.gamma.sum() - gk + cand)
        num = self.tokens() - inst.expected_tokens[k, gk] + inst.expected_tokens[k, cand]
        return num / (tc + (self.t_comm.sum() + delta) / self.n_saa)

    def comm_table(self) -> np.ndarray:
        """E[T_comm] with γ_k replaced by each of 0..γ_max (the others fixed), shape (K, γ_max + 1):
        one batch of flipped re-solves and one bincount."""
        self.refresh_flips()
        gmax, (n, k) = self.inst.gamma_max, self.levels.shape
        diff = np.where(self._movable(), self.flip - self.t_comm[:, None], 0.0)
        # hist[k, l] = Σ over samples at level l of device k's (flipped − current)
        if self._bins is None:
            self._bins = (np.arange(k)[None, :] * (gmax + 1) + np.minimum(self.levels, gmax)).ravel()
        hist = np.bincount(self._bins, weights=diff.ravel(), minlength=k * (gmax + 1)).reshape(k, gmax + 1)
        cum = np.zeros((k, gmax + 2))
        np.cumsum(hist, axis=1, out=cum[:, 1:])  # (K, γ_max + 2)
        cand = np.arange(gmax + 1)[None, :]
        gk = self.gamma[:, None]
        at_gk = cum[np.arange(k), self.gamma][:, None]
        delta = np.where(cand >= gk, cum[:, : gmax + 1] - at_gk, at_gk - cum[:, : gmax + 1])
        return (self.t_comm.sum() + delta) / n

    def line_table(self) -> np.ndarray:
        """`line_values` of every device at once, shape (K, γ_max + 1): row k is G with γ_k replaced
        by each of 0..γ_max, the others fixed. One batch of flipped re-solves and one bincount, so
        a step that weighs every single-device move costs a few numpy calls, not K of them."""
        comm = self.comm_table()
        inst = self.inst
        gmax, k = inst.gamma_max, self.levels.shape[1]
        cand = np.arange(gmax + 1)[None, :]
        gk = self.gamma[:, None]
        lat = self.gamma * inst.token_latency_s
        top = np.argsort(-lat, kind="stable")[:2]
        others = np.full(k, lat[top[0]] if k else 0.0)
        if k > 1:
            others[top[0]] = lat[top[1]]
        else:
            others[:] = 0.0
        draft = np.maximum(others[:, None], cand * inst.token_latency_s[:, None])
        tc = draft + self._t_fixed + inst.compute.t_ver_tok_s * (self.gamma.sum() - gk + cand)
        e = inst.expected_tokens
        num = self.tokens() - e[np.arange(k), self.gamma][:, None] + e[:, : gmax + 1]
        return num / (tc + comm)

    def set_device(self, k: int, new: int) -> None:
        """Move γ_k to ``new`` (uses the flipped column computed by `line_values`)."""
        old = self.gamma[k]
        lo, hi = min(old, new), max(old, new)
        rows = np.flatnonzero((self.levels[:, k] >= lo) & (self.levels[:, k] < hi))
        if rows.size:
            t_old = self.t_comm[rows].copy()
            if self._flipper is None:
                self.t_comm[rows] = self._flip_column(k)[rows]
            self.flip[rows, k] = t_old  # flipping back gives the old value: still valid
            self.rejected[rows, k] = ~self.rejected[rows, k]
            if self._flipper is not None:  # the solver's values at the new point (see __init__)
                self.t_comm[rows] = t_comm_of(self.obj, self.rejected[rows], rows)
                self.solves += rows.size
            valid_k = self.flip_valid[rows, k]
            self.flip_valid[rows] = False
            self.flip_valid[rows, k] = valid_k
        self.gamma[k] = new

    # ------------------------------------------------------------------ several devices at once

    def candidate_values(self, gammas: np.ndarray):
        """G at each candidate γ (C, K); only samples whose outcome changes are re-solved, all
        candidates in one batch. Returns ``(values (C,), changes)`` for `move_to`."""
        gammas = np.atleast_2d(np.asarray(gammas, dtype=np.int64))
        inst = self.inst
        new_rej = gammas[:, None, :] > self.levels[None, :, :]  # (C, N, K)
        changed = np.any(new_rej != self.rejected[None], axis=2)  # (C, N)
        cand_idx, rows = np.nonzero(changed)
        t_new = t_comm_of(self.obj, new_rej[cand_idx, rows], rows) if rows.size else np.zeros(0)
        self.solves += rows.size
        dsum = np.bincount(cand_idx, weights=t_new - self.t_comm[rows], minlength=gammas.shape[0])
        num = inst.expected_tokens[np.arange(inst.num_devices)[None, :], gammas].sum(axis=1)
        values = num / (t_comp_unchecked(inst, gammas) + (self.t_comm.sum() + dsum) / self.n_saa)
        return values, (gammas, cand_idx, rows, t_new)

    def move_to(self, changes, i: int) -> None:
        """Commit candidate ``i`` of a `candidate_values` call."""
        gammas, cand_idx, rows, t_new = changes
        sel = cand_idx == i
        r = rows[sel]
        self.t_comm[r] = t_new[sel]
        self.rejected[r] = gammas[i][None, :] > self.levels[r]
        self.flip_valid[r] = False
        self.gamma = gammas[i].copy()
