"""T* of a rejected set with one device added or removed, for many (set, device) pairs at once.

The incremental search (`multispin.optimize.incremental`) needs, per sample and device, T* of the
sample's rejected set with that device's bit flipped: N·K sets, each a K-wide solve, so a table of
flips costs O(N·K²). In the paper's case (optimal modes, equal split, one payload size S on both
links) the solver's structure (`multispin.optimize.modes._optimal_fast`) gives a flip from a few
per-set arrays in O(log K):

With the devices ordered by x_k = P^ul·h_k^ul (largest first), S_j = Σ of 1/h^dl over the members
of R after j, ``T*(R) = τ(max(Y(R), P^dl/S(R)), B/|R|)``, ``Y(R) = max_{j∈R} f_j``,
``f_j = min(x_j, P^dl/S_j)``. Adding (g = +1/h_k^dl) or removing (g = −1/h_k^dl) device k at
position p leaves f_j of the members after p unchanged (a suffix maximum), adds f_k when adding,
and turns f_j of the members before p into ``min(x_j, P^dl/(S_j + g))``: x_j falls and
P^dl/(S_j + g) rises along the order, so that maximum sits where they cross, the first member with
``g ≤ D_j = P^dl/x_j − S_j`` (D rises along the order): one bisection per pair.

Values equal the solver's up to the order of the sums (≈ 1e-16 relative; tests compare to 1e-12).

`FlipSolver.solve` is T* of whole sets with the solver's own operations in the solver's order, so
its values are the solver's bit for bit; it skips what the solver's entry point spends on small
batches (validation, deduplication, the sort of the devices) and the devices no set of the batch
holds (their zero terms leave every sum unchanged), and its sums run down the batch's columns.
"""

from __future__ import annotations

import numpy as np

from multispin.optimize.goodput import _row_keys
from multispin.optimize.modes import _latency_from_x_s, _optimal_fast
from multispin.system.instance import Instance


def closed_form_applies(obj) -> bool:
    """Whether `FlipSolver` covers this objective's T* (else the caller solves the flipped sets)."""
    inst = obj.inst
    return (
        obj.modes == "optimal"
        and obj.split == "equal"
        and obj.channel_gains is None
        and inst.uniform_payload
        and inst.payload_bits[0] == inst.payload_bits_dl[0]
    )


def solver_for(obj) -> FlipSolver | None:
    """The objective's `FlipSolver` where the closed form covers it (else None), built once per
    objective and kept on it: a search asks for it at every state it builds."""
    cached = getattr(obj, "_flip_solver", None)
    if cached is not None and cached[0] is obj.inst:
        return cached[1]
    solver = FlipSolver(obj.inst) if closed_form_applies(obj) else None
    obj._flip_solver = (obj.inst, solver)  # a cache riding on the objective, as sample_levels'
    return solver


class FlipSolver:
    """T* of ``rejected[row]`` with device ``col``'s bit flipped, for arrays of (row, col) pairs."""

    def __init__(self, inst: Instance):
        x = inst.p_ul_w * inst.gain_ul
        self.perm = np.argsort(-x, kind="stable")  # the solver's order: largest x first
        self.pos = np.empty(inst.num_devices, dtype=np.int64)
        self.pos[self.perm] = np.arange(inst.num_devices)
        self.x = x[self.perm]
        self.g = 1.0 / inst.gain_dl[self.perm]
        self.p_dl = inst.radio.p_dl_w
        self.bw = inst.radio.bandwidth_hz
        self.n0 = inst.radio.noise_psd_w_per_hz
        self.bits = float(inst.payload_bits[0])
        self.k = inst.num_devices
        self.inst = inst
        self._rev = self.perm[::-1].copy()  # the solver's sums run from its last device to its first

    def solve(self, rejected: np.ndarray) -> np.ndarray:
        """T* of every row of ``rejected`` (M, K), equal to `optimal_modes_batch` bit for bit."""
        if not self.p_dl > 0:  # P^dl/S is then 0/0 on empty suffixes: the solver's own guards
            return _optimal_fast(rejected, self.inst, False).latency_s
        m = rejected.shape[0]
        held = np.asarray(rejected.any(axis=0))
        order = self._rev[held[self._rev]]  # held by some row, last device first
        if order.size == 0:
            return np.zeros(m)
        o = np.ascontiguousarray(rejected[:, order].T)  # (K', M): the sums run down the columns
        cnt = o.sum(axis=0)
        s = np.cumsum(np.where(o, self.g[self.pos[order]][:, None], 0.0), axis=0)  # S incl., per member
        f = np.empty_like(s)
        f[0] = 0.0
        f[1:] = s[:-1]  # S of the members after each position
        with np.errstate(divide="ignore"):
            np.divide(self.p_dl, f, out=f)  # P^dl/0 = inf: no member after it
            s_all = s[-1]
            x_all = np.where(s_all > 0, self.p_dl / s_all, np.inf)
        np.minimum(self.x[self.pos[order]][:, None], f, out=f)
        f[~o] = -np.inf
        best = f.max(axis=0)  # Y(R): the best UL prefix's bottleneck
        t = _latency_from_x_s(np.where(best > x_all, best, x_all), self.bits, self.bw / np.maximum(cnt, 1), self.n0)
        return np.where(cnt > 0, t, 0.0)

    def __call__(self, rejected: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        if rows.size == 0:
            return np.zeros(0)
        return self._flips(rejected, *_distinct_indices(rows), cols)

    def by_set(self, rejected: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """`__call__`'s values (a pair's flip depends on its row's set only, and each is computed
        by the same operations whatever the batch), with every flip of each distinct set computed
        once where that is fewer pairs: cheaper where the rows repeat a few sets (a search near
        "nobody rejected"); the set keys cost a sort, so callers choose it where sets repeat."""
        if rows.size == 0:
            return np.zeros(0)
        uniq, inv = _distinct_indices(rows)
        if self.k > 62:  # no one-integer key per set
            return self._flips(rejected, uniq, inv, cols)
        _, first, set_of = np.unique(_row_keys(rejected[uniq]), return_index=True, return_inverse=True)
        if first.size * self.k >= rows.size:
            return self._flips(rejected, uniq, inv, cols)
        k = self.k
        table = self._flips(
            rejected, uniq[first], np.repeat(np.arange(first.size), k), np.tile(np.arange(k), first.size)
        )
        return table.reshape(first.size, k)[set_of.ravel()[inv], cols]

    def _flips(self, rejected: np.ndarray, uniq: np.ndarray, inv: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """The flips of the pairs (``uniq[inv[i]]``, ``cols[i]``), ``uniq`` distinct rows."""
        k, p_dl = self.k, self.p_dl
        o = rejected[uniq[:, None], self.perm[None, :]]  # (U, K), in the solver's order
        w = np.where(o, self.g[None, :], 0.0)
        s_incl = np.cumsum(w[:, ::-1], axis=1)[:, ::-1]
        s_excl = np.zeros_like(w)
        s_excl[:, :-1] = s_incl[:, 1:]
        with np.errstate(divide="ignore"):
            f = np.where(o, np.minimum(self.x[None, :], p_dl / s_excl), -np.inf)
        # after[:, i]: max of f over the members after position i
        after = np.full_like(f, -np.inf)
        after[:, :-1] = np.maximum.accumulate(f[:, ::-1], axis=1)[:, ::-1][:, 1:]
        cnt = o.sum(axis=1)
        # the members of every set, set after set, in order: rank r of set u is entry start[u] + r;
        # one entry more (never a member's) so that every index below is in range
        start = np.cumsum(cnt) - cnt
        total = int(start[-1] + cnt[-1])
        x_m, s_m = np.empty(total + 1), np.empty(total + 1)
        x_m[:total], x_m[total] = np.broadcast_to(self.x, o.shape)[o], 1.0
        s_m[:total], s_m[total] = s_excl[o], 0.0
        d_m = p_dl / x_m - s_m

        # a pair's entries of the (U, K) arrays, by one flat index
        p = self.pos[cols]
        at = inv * k + p
        was = o.ravel().take(at)
        adding = ~was
        g = np.where(adding, self.g[p], -self.g[p])
        m = np.cumsum(o, axis=1).ravel().take(at) - was  # members before p: ranks 0..m−1
        base = start[inv]
        cnt_p = cnt[inv]
        # c: the members before p with D < g, counted by bisection (D rises along the order); the
        # first of them with g ≤ D, or m
        c = np.zeros_like(m)
        top = int(m.max()) if m.size else 0
        step = 1 << max(top.bit_length() - 1, 0)
        while top and step:
            nxt = c + step
            ok = (nxt <= m) & (d_m[base + np.minimum(nxt, m) - 1] < g)
            c = np.where(ok, nxt, c)
            step >>= 1
        at_c = np.where(c < m, x_m[base + c], -np.inf)
        prev = np.maximum(c - 1, 0)
        # S of the member at rank c−1 after the flip: exactly 0 when k was the only member after it
        s_prev = s_m[base + prev] + g
        s_prev = np.where(was & (cnt_p - prev - 2 == 0), 0.0, s_prev)
        with np.errstate(divide="ignore"):
            below_c = np.where(c > 0, np.minimum(x_m[base + prev], p_dl / s_prev), -np.inf)
            own = np.where(adding, np.minimum(self.x[p], p_dl / s_excl.ravel().take(at)), -np.inf)
        y = np.maximum(np.maximum(at_c, below_c), np.maximum(own, after.ravel().take(at)))
        n_new = cnt_p + np.where(adding, 1, -1)
        s_new = np.where(n_new == 0, 0.0, s_incl[:, 0][inv] + g)
        with np.errstate(divide="ignore"):
            q = np.where(s_new > 0, p_dl / s_new, np.inf)
        b = self.bw / np.maximum(n_new, 1)
        t = _latency_from_x_s(np.maximum(y, q), self.bits, b, self.n0)
        return np.where(n_new > 0, t, 0.0)


def _distinct_indices(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(uniq, inv): the distinct values of ``rows`` and each entry's index into them."""
    if np.all(rows[1:] >= rows[:-1]):  # sorted (the callers' np.nonzero order): no sort needed
        new = np.empty(rows.size, dtype=bool)
        new[0] = True
        np.not_equal(rows[1:], rows[:-1], out=new[1:])
        return rows[new], np.cumsum(new) - 1
    uniq, inv = np.unique(rows, return_inverse=True)
    return uniq, inv.ravel()
