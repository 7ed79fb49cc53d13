"""Extension (docs/system-model.md §5.4): bandwidth split optimised jointly with the DL powers.

The paper splits B equally among the rejected devices. Here, for one rejected set, bandwidths
b_k (Σ b_k ≤ B) and DL powers (Σ_{DL} p_k ≤ P^dl) are chosen together to minimise the largest
latency, UL devices still transmitting at P^ul.

**Fixed modes (exact).** Rate ``b·log2(1 + p·h/(N0·b))`` is jointly concave in (b, p), so for fixed
modes the problem is convex; at the optimum every device finishes at the same T and both budgets
are spent. Writing ``z_k = S_k·ln2/(b_k·T)`` (nats per Hz), the KKT conditions of the DL devices
say that ``ν = −∂p_k/∂b_k = (N0/h_k)·((z_k − 1)e^{z_k} + 1)`` is common to all of them. For a
given ν every z_k follows (a 1-D Newton solve), and both b_k and p_k scale as 1/T, so the power
budget gives T in closed form, ``T(ν) = Σ_k N0·S_k·ln2·(e^{z_k} − 1)/(h_k·z_k) / P^dl``, and the
bandwidth used, ``Σ_{UL} b_k^ul(T(ν)) + Σ_{DL} S_k ln2/(z_k T(ν))``, is strictly decreasing in ν: one
bisection on ν finds the optimum. A UL device needs ``b^ul(T)``, the root of
``b·log2(1 + P^ul·h/(N0·b)) = S/T`` (also a 1-D Newton solve; infinite below the wide-band limit
``T < S·N0·ln2/(P^ul·h)``). With no DL device, one bisection on T fills B.

**Modes.** The UL set is searched over the prefixes of the UL-latency order (the equal-split
argument for the prefix structure does not carry over as a proof here, because a UL device now
costs bandwidth): by descent from the equal-split optimum (T(n) was unimodal in every instance
we tried) or by a full scan, then, without reciprocity, refined by single-device flips.
The tests compare both with an oracle that tries all 2^|R| mode sets (tests/oracles.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from multispin.errors import ConfigError
from multispin.optimize.modes import optimal_modes_batch
from multispin.system.instance import Instance
from multispin.system.radio import LN2

_Z_LO, _Z_HI = 1e-4, 40.0


def _g(z):
    """(z − 1)e^z + 1, accurate for small z."""
    small = z < 1e-3
    zs = np.where(small, z, 0.0)
    series = zs * zs * (0.5 + zs * (1 / 3 + zs * (1 / 8 + zs / 30)))
    with np.errstate(over="ignore"):
        direct = z * np.exp(z) - np.expm1(z)
    return np.where(small, series, direct)


def _lambertw0_approx(x):
    """Lambert W_0 to a few percent (Winitzki; branch-point series near −1/e): a Newton start."""
    x = np.asarray(x, dtype=float)
    pos = np.maximum(x, 0.0)
    l1 = np.log1p(pos)
    w_pos = l1 * (1.0 - np.log1p(l1) / (2.0 + l1))
    p = np.sqrt(np.maximum(2.0 * (np.e * np.minimum(x, 0.0) + 1.0), 0.0))
    w_neg = -1.0 + p - p * p / 3.0 + 11.0 / 72.0 * p**3
    return np.where(x >= 0, w_pos, np.maximum(w_neg, -1.0))


def solve_z(c, z0=None):
    """z > 0 with (z − 1)e^z + 1 = c (c > 0), i.e. z = 1 + W_0((c − 1)/e), by Newton's method.

    The function is convex and increasing for z > 0, and the start is clamped to upper bounds of
    the root (2 + ln(1 + c) and √(2c)), so the iterates decrease monotonically to the root.
    Iterates only on the entries not yet converged.
    """
    c = np.asarray(c, dtype=float)
    if z0 is None:
        z0 = 1.0 + _lambertw0_approx((c - 1.0) / np.e)
    upper = np.minimum(2.0 + np.log1p(c), np.sqrt(2.0 * c))
    z = np.maximum(np.minimum(z0, upper), 1e-300).ravel().copy()
    cf, uf = np.broadcast_to(c, z.shape if c.ndim == 0 else c.shape).ravel(), upper.ravel()
    idx = np.arange(z.size)
    for _ in range(100):
        zi, ci = z[idx], cf[idx]
        with np.errstate(over="ignore", invalid="ignore"):
            step = (_g(zi) - ci) / (zi * np.exp(zi))
        step = np.where(np.isfinite(step), step, 0.0)
        z[idx] = np.minimum(np.maximum(zi - step, zi * 1e-3), uf[idx])
        idx = idx[np.abs(step) > 1e-12 * z[idx]]
        if idx.size == 0:
            break
    return z.reshape(np.shape(upper))


def solve_x_ul(a):
    """x > 0 with ln(1 + x) = a·x for a ∈ (0, 1) (returns 0 where a ≥ 1).

    Newton's method from an upper bound of the root, min((2/a)·ln(2/a), 1/a² − 1); the function
    is concave, so the iterates decrease monotonically to the root.
    """
    a = np.asarray(a, dtype=float)
    ok = (a > 0) & (a < 1)
    aa = np.where(ok, np.maximum(a, 1e-200), 0.5).ravel()
    with np.errstate(over="ignore", divide="ignore"):
        x = np.minimum(2.0 / aa * np.log(2.0 / aa), 1.0 / (aa * aa) - 1.0)
    idx = np.flatnonzero(ok.ravel())
    for _ in range(200):
        xi, ai = x[idx], aa[idx]
        phi = np.log1p(xi) - ai * xi
        d = 1.0 / (1.0 + xi) - ai
        step = np.where(d < 0, phi / d, 0.0)
        x_new = xi - step
        x[idx] = np.where(x_new > 0, x_new, xi * 0.5)
        idx = idx[np.abs(step) > 1e-12 * x[idx]]
        if idx.size == 0:
            break
    return np.where(ok, x.reshape(a.shape), 0.0)


def ul_bandwidth_for_latency_hz(bits, latency_s, p_ul_w, gain, noise_psd_w_per_hz):
    """Least bandwidth with which a UL device at ``p_ul_w`` moves ``bits`` in ``latency_s``.

    Infinite when ``latency_s`` is at or below the wide-band limit ``bits·N0·ln2/(P·h)``.
    """
    c = np.asarray(p_ul_w, dtype=float) * np.asarray(gain, dtype=float) / noise_psd_w_per_hz  # Hz
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a = np.asarray(bits, dtype=float) * LN2 / (np.asarray(latency_s, dtype=float) * c)
        x = solve_x_ul(a)
        return np.where(a < 1, c / x, np.inf)


@dataclass(frozen=True)
class SplitDecision:
    """Jointly optimised bandwidths and powers for outcome rows (M, K)."""

    latency_s: np.ndarray  # (M,)
    is_ul: np.ndarray  # (M, K)
    bandwidth_hz: np.ndarray | None = None  # (M, K)
    power_w: np.ndarray | None = None  # (M, K)
    device_latency_s: np.ndarray | None = None  # (M, K)


def _illinois(func, lo, hi, f_lo, f_hi, ftol: float = 1e-11, xtol: float = 1e-13, wide: float = 2.0):
    """Per-row root of a decreasing function (f(lo) > 0 ≥ f(hi)) by bisection while the bracket is
    wider than ``wide``, then regula falsi with the Anderson–Björck correction. ``func(x, rows)`` evaluates rows ``rows``.
    Returns the final ``hi`` (the f ≤ 0 side, or a point with |f| ≤ ftol)."""
    lo, hi = lo.copy(), hi.copy()
    f_lo, f_hi = np.minimum(f_lo, 1e3), f_hi.copy()
    side = np.zeros(lo.size, dtype=np.int8)
    act = np.flatnonzero((hi - lo > xtol) & (f_hi < -ftol))
    for _ in range(300):
        if act.size == 0:
            break
        a_lo, a_hi, fl, fh = lo[act], hi[act], f_lo[act], f_hi[act]
        with np.errstate(divide="ignore", invalid="ignore"):
            x = a_hi - fh * (a_hi - a_lo) / (fh - fl)
        inside = (a_hi - a_lo < wide) & (x > a_lo) & (x < a_hi) & np.isfinite(x)
        x = np.where(inside, x, 0.5 * (a_lo + a_hi))
        fx = np.minimum(func(x, act), 1e3)
        over = fx > 0
        sa = side[act]
        # Anderson–Björck: when the same end is replaced twice running, shrink the other end's f
        with np.errstate(divide="ignore", invalid="ignore"):
            m_lo = 1.0 - fx / fl  # new point replaces lo again
            m_hi = 1.0 - fx / fh
        m_lo = np.where((m_lo > 0) & np.isfinite(m_lo), m_lo, 0.5)
        m_hi = np.where((m_hi > 0) & np.isfinite(m_hi), m_hi, 0.5)
        lo[act] = np.where(over, x, a_lo)
        f_lo[act] = np.where(over, fx, np.where(sa == -1, m_hi * fl, fl))
        hi[act] = np.where(over, a_hi, x)
        f_hi[act] = np.where(over, np.where(sa == 1, m_lo * fh, fh), fx)
        side[act] = np.where(over, 1, -1)
        hit = np.abs(fx) <= ftol
        hi[act] = np.where(hit, x, hi[act])
        done = hit | (hi[act] - lo[act] <= xtol * np.maximum(1.0, np.abs(hi[act])))
        act = act[~done]
    return hi


def _fixed_modes(ul: np.ndarray, dl: np.ndarray, inst: Instance, rtol: float = 1e-10):
    """Min–max latency for fixed UL/DL masks (rows = problems). Returns T (M,), z (M, K) for DL.

    Works on the active columns only (rejected devices gathered to the left).
    """
    n0 = inst.radio.noise_psd_w_per_hz
    p_dl = inst.radio.p_dl_w
    m, k = ul.shape
    act = ul | dl
    t_out = np.zeros(m)
    z_out = np.zeros((m, k))
    width = int(act.sum(axis=1).max()) if m else 0
    if width == 0:
        return t_out, z_out
    order = np.argsort(~act, axis=1, kind="stable")[:, :width]
    valid = np.take_along_axis(act, order, axis=1)
    u_all = np.take_along_axis(ul, order, axis=1) & valid
    d_all = np.take_along_axis(dl, order, axis=1) & valid
    s_all = inst.payload_bits[order]  # S^ul: what a UL device moves
    sd_all = inst.payload_bits_dl[order]  # S^dl: what a DL device moves
    hu_all = inst.gain_ul[order]
    hd_all = inst.gain_dl[order]
    pu_all = inst.p_ul_w[order]
    has_dl = d_all.any(axis=1)
    has_ul = u_all.any(axis=1)

    def ul_bw(t, rows):
        """Σ_{UL} b^ul_k(t) per row (computed on the UL entries only)."""
        u = u_all[rows]
        r_i, c_i = np.nonzero(u)
        rr = rows[r_i]
        b = ul_bandwidth_for_latency_hz(s_all[rr, c_i], t[r_i], pu_all[rr, c_i], hu_all[rr, c_i], n0)
        return np.bincount(r_i, weights=b, minlength=rows.size)

    # --- only UL devices: Σ b^ul(T) = B, solved in y = log(T − T_min) where log Σ b^ul is ~linear
    r_ul = np.flatnonzero(has_ul & ~has_dl)
    if r_ul.size:
        t_out[r_ul] = _ul_only_latency(u_all[r_ul], s_all[r_ul], hu_all[r_ul], pu_all[r_ul], r_ul, ul_bw, inst)

    # --- some DL devices: root in log ν of log(bandwidth used / B) (regula falsi)
    r_dl = np.flatnonzero(has_dl)
    if r_dl.size and p_dl == 0:
        t_out[r_dl] = np.inf
    elif r_dl.size:
        d_ = d_all[r_dl]
        t, z = _dl_latency(d_, sd_all[r_dl], hd_all[r_dl], has_ul[r_dl], r_dl, ul_bw, inst)
        t_out[r_dl] = t
        zc = np.zeros((r_dl.size, width))
        zc[d_] = z[d_]
        z_full = np.zeros((r_dl.size, k))
        np.put_along_axis(z_full, order[r_dl], np.where(d_, zc, 0.0), axis=1)
        z_out[r_dl] = z_full
    return t_out, z_out


def _ul_only_latency(u, ss, hu, pu, r_ul, ul_bw, inst: Instance) -> np.ndarray:
    """`_fixed_modes`'s rows with UL devices only: the T at which their UL bandwidths fill B."""
    n0 = inst.radio.noise_psd_w_per_hz
    big_b = inst.radio.bandwidth_hz
    t_min = np.where(u, ss * n0 * LN2 / (pu * hu), 0.0).max(axis=1)
    b_eq = (big_b / u.sum(axis=1))[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        t_eq = np.where(u, ss * LN2 / (b_eq * np.log1p(pu * hu / (n0 * b_eq))), 0.0).max(axis=1)

    def f_ul(y, rows):
        with np.errstate(divide="ignore"):
            return np.log(ul_bw(t_min[rows] + np.exp(y), r_ul[rows]) / big_b)

    every = np.arange(r_ul.size)
    hi = np.log(np.maximum(t_eq - t_min, 1e-300))
    lo = hi - 40.0
    f_hi, f_lo = f_ul(hi, every), f_ul(lo, every)
    for _ in range(10):
        bad = np.flatnonzero(f_lo <= 0)
        if bad.size == 0:
            break
        lo[bad] -= 40.0
        f_lo[bad] = f_ul(lo[bad], bad)
    y = _illinois(f_ul, lo, hi, f_lo, f_hi)
    return t_min + np.exp(y)


def _dl_latency(d_, ss_, hd_, has_ul_dl, r_dl, ul_bw, inst: Instance) -> tuple[np.ndarray, np.ndarray]:
    """`_fixed_modes`'s rows with DL devices: T and the DL devices' z (in the rows' gathered
    columns) at the DL power level ν where the bandwidth used fills B."""
    n0 = inst.radio.noise_psd_w_per_hz
    p_dl = inst.radio.p_dl_w
    big_b = inst.radio.bandwidth_hz
    z_cache = np.zeros(d_.shape)

    def at(log_nu, rows, warm=False):
        """(T, z, log(used/B)) at log ν for local rows ``rows`` of r_dl."""
        d, ss, hd = d_[rows], ss_[rows], hd_[rows]
        nu = np.exp(log_nu)[:, None]
        z = solve_z(np.where(d, nu * hd / n0, 1.0), z_cache[rows] if warm else None)
        z_cache[rows] = z
        with np.errstate(over="ignore"):
            phi = np.where(d, n0 * ss * LN2 * np.expm1(z) / (hd * z), 0.0).sum(axis=1)
        psi = np.where(d, ss * LN2 / z, 0.0).sum(axis=1)
        t = phi / p_dl
        used = psi / t
        if has_ul_dl[rows].any():
            used = used + ul_bw(t, r_dl[rows])
        with np.errstate(divide="ignore", invalid="ignore"):
            f = np.log(used / big_b)
        return t, z, np.where(np.isnan(f), np.inf, f)

    with np.errstate(divide="ignore"):
        g_lo, g_hi = _g(np.full(d_.shape, _Z_LO)), _g(np.full(d_.shape, _Z_HI))
        lo = np.nanmin(np.log(np.where(d_, n0 / hd_ * g_lo, np.nan)), axis=1)
        hi = np.nanmax(np.log(np.where(d_, n0 / hd_ * g_hi, np.nan)), axis=1)
    every = np.arange(r_dl.size)
    f_lo = at(lo, every)[2]
    f_hi = at(hi, every)[2]
    for _ in range(30):  # widen until bracketing (rarely needed)
        bad_lo, bad_hi = f_lo <= 0, f_hi > 0
        if not (bad_lo.any() or bad_hi.any()):
            break
        for bad, x, fx, shift in ((bad_lo, lo, f_lo, -5.0), (bad_hi, hi, f_hi, 5.0)):
            rows = np.flatnonzero(bad)
            if rows.size:
                x[rows] += shift
                fx[rows] = at(x[rows], rows)[2]
    # (rows whose UL part sits near its wide-band pole converge slowly; they are rare)
    hi = _illinois(lambda x, rows: at(x, rows, warm=True)[2], lo, hi, f_lo, f_hi)
    t, z, _ = at(hi, every)  # hi side: bandwidth within budget
    return t, z


def _allocation(ul, dl, t, z, inst: Instance):
    """Bandwidths, powers and latencies of a fixed-mode solution."""
    n0 = inst.radio.noise_psd_w_per_hz
    tt = t[:, None]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        b_ul = ul_bandwidth_for_latency_hz(
            inst.payload_bits[None, :], tt, inst.p_ul_w[None, :], inst.gain_ul[None, :], n0
        )
        b_dl = inst.payload_bits_dl[None, :] * LN2 / (z * tt)
        p_dl = n0 * b_dl * np.expm1(z) / inst.gain_dl[None, :]
    bw = np.where(ul, b_ul, np.where(dl, b_dl, 0.0))
    pw = np.where(ul, inst.p_ul_w[None, :], np.where(dl, p_dl, 0.0))
    lat = np.where(ul | dl, tt, 0.0)
    return bw, pw, lat


def _ul_rank(mask: np.ndarray, inst: Instance) -> np.ndarray:
    """Rank of each rejected device in the UL-latency order (rejected first)."""
    b = inst.radio.bandwidth_hz / np.maximum(mask.sum(axis=1), 1)
    with np.errstate(divide="ignore"):
        key = inst.payload_bits[None, :] / (
            b[:, None] * np.log2(1 + inst.p_ul_w * inst.gain_ul / (inst.radio.noise_psd_w_per_hz * b[:, None]))
        )
    key = np.where(mask, key, np.inf)
    order = np.argsort(key, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(mask.shape[1]), mask.shape).copy(), axis=1)
    return rank


def _solve_prefixes(mask, rank, rows, ns, inst):
    """T and z of "UL = the ns[i] fastest of row rows[i]" for each i."""
    sub = mask[rows]
    ul = sub & (rank[rows] < ns[:, None])
    t, z = _fixed_modes(ul, sub & ~ul, inst)
    return t, z, ul


def optimized_split_batch(
    rejected: np.ndarray,
    inst: Instance,
    is_ul: np.ndarray | None = None,
    return_allocation: bool = False,
    search: str = "descent",
    refine: bool | None = None,
) -> SplitDecision:
    """Min–max T_comm with jointly optimised bandwidths and DL powers, for every outcome row.

    ``is_ul``: fixed modes (rows like ``rejected``); ``None`` searches the UL prefixes:
    ``search="descent"`` starts from the equal-split optimum n* and steps n down or up while T
    falls (exact when T(n) is unimodal, which held in every instance we tried, see the tests);
    ``search="scan"`` tries every n = 0..|R|.

    ``refine``: after the prefix search, flip single devices between UL and DL while T falls. The
    prefix search matched brute force over all mode sets in every reciprocal instance we tried,
    but not always without reciprocity (a device with a good DL and a poor UL is cheaper in DL
    whatever its UL rank, and likewise a device whose DL payload is much smaller than its UL one);
    the default refines exactly when ``gain_ul != gain_dl`` or S^ul ≠ S^dl. Refinement is
    a local search, not a proof: the tests report its remaining gap to brute force.
    """
    mask = np.atleast_2d(np.asarray(rejected, dtype=bool))
    if mask.shape[1] != inst.num_devices:
        raise ConfigError(f"rejected: mask must have {inst.num_devices} columns (got {mask.shape})")
    if search not in ("descent", "scan"):
        raise ConfigError(f"search: unknown value {search!r} (allowed: descent, scan)")
    m_rows, k = mask.shape
    cnt = mask.sum(axis=1)
    if is_ul is not None:
        ul = mask & np.broadcast_to(np.asarray(is_ul, dtype=bool), mask.shape)
        t, z = _fixed_modes(ul, mask & ~ul, inst)
        best_ul, best_t, best_z = ul, np.where(cnt > 0, t, 0.0), z
    else:
        best_t, best_ul, best_z = _best_prefixes(mask, inst, cnt, search, refine)
    if not return_allocation:
        return SplitDecision(best_t, best_ul)
    bw, pw, lat = _allocation(best_ul, mask & ~best_ul, best_t, best_z, inst)
    return SplitDecision(best_t, best_ul, bw, pw, lat)


def _best_prefixes(mask: np.ndarray, inst: Instance, cnt: np.ndarray, search: str, refine: bool | None):
    """`optimized_split_batch` with modes to choose: per row the best number n of UL devices in UL
    order (``search``), then single flips where ``refine`` says; (T, UL modes, z) per row."""
    m_rows, k = mask.shape
    rank = _ul_rank(mask, inst)
    best_t = np.full(m_rows, np.inf)
    best_z = np.zeros((m_rows, k))
    best_ul = np.zeros_like(mask)

    def consider(rows, ns):
        t, z, ul = _solve_prefixes(mask, rank, rows, ns, inst)
        # rows may repeat (scan): keep the first minimum in the given order
        better = np.zeros(rows.size, dtype=bool)
        order = np.lexsort((ns, t, rows))  # by row, then T, then n
        first = np.ones(order.size, dtype=bool)
        first[1:] = rows[order][1:] != rows[order][:-1]
        pick = order[first]
        better[pick] = t[pick] < best_t[rows[pick]]
        r = rows[better]
        best_t[r] = t[better]
        best_z[r] = z[better]
        best_ul[r] = ul[better]
        return t

    if search == "scan":
        rows = np.concatenate([np.flatnonzero(n <= cnt) for n in range(k + 1)])
        ns = np.concatenate([np.full(int((n <= cnt).sum()), n) for n in range(k + 1)])
        consider(rows, ns)
    else:
        _descend(mask, inst, cnt, consider)
    best_t = np.where(cnt > 0, best_t, 0.0)
    if refine is None:
        refine = not np.array_equal(inst.gain_ul, inst.gain_dl) or not inst.same_payload_both_links
    if refine:
        best_t, best_ul, best_z = _flip_refine(mask, inst, best_t, best_ul, best_z)
    return best_t, best_ul, best_z


def _descend(mask: np.ndarray, inst: Instance, cnt: np.ndarray, consider) -> None:
    """``search="descent"``: from the equal-split optimum n* per row, step n down or up while T
    falls; ``consider(rows, ns)`` scores each step (and keeps the best) and returns its T."""
    m_rows = mask.shape[0]
    is_ul = optimal_modes_batch(mask, inst, return_modes=True).is_ul
    assert is_ul is not None  # asked for (return_modes)
    n0 = is_ul.sum(axis=1)
    live = np.flatnonzero(cnt > 0)
    t0 = consider(live, n0[live])
    cur_t = np.full(m_rows, np.inf)
    cur_t[live] = t0
    cur_n = n0.copy()
    step = np.zeros(m_rows, dtype=int)
    # first probe both neighbours
    for direction in (-1, 1):
        cand = n0[live] + direction
        ok = (cand >= 0) & (cand <= cnt[live])
        rows = live[ok]
        if rows.size:
            t_c = consider(rows, cand[ok])
            improved = t_c < cur_t[rows] * (1 - 1e-12)
            r = rows[improved]
            step[r] = np.where(step[r] == 0, direction, step[r])
            take = improved & (t_c < cur_t[rows])
            cur_t[rows[take]] = t_c[take]
            cur_n[rows[take]] = cand[ok][take]
    active = np.flatnonzero(step != 0)
    while active.size:
        cand = cur_n[active] + step[active]
        ok = (cand >= 0) & (cand <= cnt[active])
        rows, cand = active[ok], cand[ok]
        if rows.size == 0:
            break
        t_c = consider(rows, cand)
        improved = t_c < cur_t[rows] * (1 - 1e-12)
        cur_t[rows[improved]] = t_c[improved]
        cur_n[rows[improved]] = cand[improved]
        active = rows[improved]


def _flip_refine(mask, inst, best_t, best_ul, best_z, max_rounds: int | None = None):
    """Single-device UL↔DL flips, best first, while the min–max latency falls (rows in parallel)."""
    best_t, best_ul, best_z = best_t.copy(), best_ul.copy(), best_z.copy()
    active = np.flatnonzero(mask.sum(axis=1) > 1)
    for _ in range(max_rounds or mask.shape[1] * 2):
        if active.size == 0:
            break
        r_i, c_i = np.nonzero(mask[active])
        rows = active[r_i]
        ul = best_ul[rows].copy()
        ul[np.arange(rows.size), c_i] ^= True
        t, z = _fixed_modes(ul, mask[rows] & ~ul, inst)
        order = np.lexsort((t, rows))
        first = np.ones(order.size, dtype=bool)
        first[1:] = rows[order][1:] != rows[order][:-1]
        pick = order[first]
        better = t[pick] < best_t[rows[pick]] * (1 - 1e-10)
        pick = pick[better]
        r = rows[pick]
        best_t[r], best_ul[r], best_z[r] = t[pick], ul[pick], z[pick]
        active = r
    return best_t, best_ul, best_z
