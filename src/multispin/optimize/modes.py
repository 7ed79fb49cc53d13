"""The optimal UL/DL modes and DL powers of a rejected set on the equal bandwidth split
(docs/system-model.md §5.1), for one outcome or many (rows of a boolean mask); what
`multispin.optimize.reactive` decides with ``split="equal"``, and the warm start of the joint
bandwidth split (`multispin.optimize.bandwidth`). Both import it: it imports neither.

Structure used (and checked against the oracles of `multispin.optimize.reactive`):

- **DL power equalisation.** For a fixed DL set D on bandwidths B_k the optimal powers finish
  together at the root τ^dl(D) of ``Σ_{k∈D} p_k(τ) = P^dl`` with
  ``p_k(τ) = (N0·B_k/h_k)(2^{S_k/(B_k τ)} − 1)``. `dl_power_equalisation` finds it by
  Brent's method; `dl_latency_s` does it for many sets at once (vectorised bisection). When
  every device moves the same S^dl bits on the same bandwidth b (the equal split with one DL
  codec), the root has a closed form: D behaves like one device with gain ``1/Σ_{k∈D} 1/h_k``:
  ``τ^dl = S^dl / (b·log2(1 + P^dl / (N0·b·Σ 1/h_k)))``.
- **Prefix structure.** For any target latency T, every device with τ_k^ul ≤ T may go UL at no
  cost to the others, and removing a device from D only lowers τ^dl(D); so some optimal
  assignment puts the n devices with the smallest UL latency in UL and the rest in DL.
  τ^ul(n) is non-decreasing and τ^dl(n) non-increasing in n, so the best n is at the crossing:
  the first n̄ with τ^dl(n̄) ≤ τ^ul(n̄) (found by bisection), then the better of n̄−1 and n̄.
  The argument never compares a device's UL and DL payloads, so it holds as well when
  S_k^ul ≠ S_k^dl (per device, or per link): the order is that of τ_k^ul, which carries S_k^ul.
  Checked against brute force over all 2^|R| splits (tests/optimize/test_reactive.py).
Methods of `optimal_modes_batch` (``t_comm_batch`` with ``modes="optimal"``):

- ``"fast"`` (uniform payloads on each link only): closed-form τ^dl for every n at once through
  suffix sums of 1/h: O(|R|) per outcome after one global sort, no root finding. This is the
  inner loop of the draft-length optimiser.
- ``"bisection"``: the paper's procedure (bisection over n, a DL root solve per probe); works for
  any payload sizes.
- ``"scan"``: linear scan over all n (oracle). ``reactive.brute_force_oracle`` tries all 2^|R| splits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from multispin.errors import ConfigError
from multispin.system.instance import Instance
from multispin.system.radio import LN2, latency_s, power_for_latency_w
from multispin.vocabulary import MODE_RULES

MODE_POLICIES = MODE_RULES  # the optimiser's `modes=` values: the mode rules
SPLITS = ("equal", "optimized")
METHODS = ("auto", "fast", "bisection", "scan")


def _as_mask(rejected, num_devices: int) -> np.ndarray:
    """Rows of a boolean mask (M, K) from a mask, a list of masks, or a list of device indices."""
    arr = np.asarray(rejected)
    if arr.dtype == bool:
        mask = np.atleast_2d(arr)
    else:
        mask = np.zeros((1, num_devices), dtype=bool)
        if arr.size:
            idx = arr.astype(int).ravel()
            if idx.min() < 0 or idx.max() >= num_devices:
                raise ConfigError(f"rejected: device indices must be in [0, {num_devices - 1}] (got {idx.tolist()})")
            mask[0, idx] = True
    if mask.shape[-1] != num_devices:
        raise ConfigError(f"rejected: mask must have {num_devices} columns (got shape {mask.shape})")
    return mask


def _check_choice(value: str, allowed: tuple[str, ...], name: str) -> None:
    if value not in allowed:
        raise ConfigError(f"{name}: unknown value {value!r} (allowed: {', '.join(allowed)})")


# --------------------------------------------------------------------------- latencies


def ul_latency_s(inst: Instance, bandwidth_hz) -> np.ndarray:
    """UL-mode latency τ_k^ul at maximum power P^ul on ``bandwidth_hz`` (broadcast to (..., K))."""
    b = np.asarray(bandwidth_hz, dtype=float)
    return latency_s(inst.payload_bits, b, inst.p_ul_w, inst.gain_ul, inst.radio.noise_psd_w_per_hz)


def dl_latency_closed_form_s(inv_gain_sum, bits: float, bandwidth_hz, p_dl_w: float, noise_psd_w_per_hz: float):
    """τ^dl of a DL set whose devices share ``bits`` and ``bandwidth_hz``: ``W = Σ_{k∈D} 1/h_k``.

    ``τ = S / (b·log2(1 + P^dl/(N0·b·W)))``; 0 for the empty set (W = 0), inf when P^dl = 0.
    """
    w = np.asarray(inv_gain_sum, dtype=float)
    b = np.asarray(bandwidth_hz, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        snr = p_dl_w / (noise_psd_w_per_hz * b * w)
        tau = bits * LN2 / (b * np.log1p(snr))
    return np.where(w > 0, tau, 0.0)


@dataclass(frozen=True)
class DLPowerSplit:
    """Equalised DL powers of one DL set: every device finishes at ``latency_s``."""

    latency_s: float
    power_w: np.ndarray  # one per device of the set, Σ ≤ P^dl (= up to the tolerance)


def dl_power_equalisation(
    gain_dl,
    bits,
    bandwidth_hz,
    p_dl_w: float,
    noise_psd_w_per_hz: float,
    rtol: float = 1e-12,
) -> DLPowerSplit:
    """Optimal DL powers for one DL set: the root τ of ``Σ_k p_k(τ) = P^dl`` by Brent's method.

    ``gain_dl``, ``bits`` and ``bandwidth_hz`` broadcast to one value per device. The bracket is
    [max_k τ_k(P^dl), max_k τ_k(P^dl/|D|)]: the first needs at least the whole budget, the second at
    most. Returns the latency at the feasible end of the final bracket (Σ p ≤ P^dl, relative
    gap ≤ ``rtol`` in τ) and the powers.
    """
    h = np.atleast_1d(np.asarray(gain_dl, dtype=float))
    s = np.broadcast_to(np.asarray(bits, dtype=float), h.shape)
    b = np.broadcast_to(np.asarray(bandwidth_hz, dtype=float), h.shape)
    if p_dl_w < 0:
        raise ConfigError(f"p_dl_w: must be in [0, inf) W (got {p_dl_w})")
    if h.size == 0:
        return DLPowerSplit(0.0, np.zeros(0))
    if p_dl_w == 0:
        return DLPowerSplit(float("inf"), np.zeros(h.shape))
    lo = float(np.max(latency_s(s, b, p_dl_w, h, noise_psd_w_per_hz)))
    hi = float(np.max(latency_s(s, b, p_dl_w / h.size, h, noise_psd_w_per_hz)))

    def excess(tau: float) -> float:
        return float(np.sum(power_for_latency_w(s, tau, b, h, noise_psd_w_per_hz))) / p_dl_w - 1.0

    if hi <= lo * (1 + rtol):
        tau = hi
    else:
        tau = brentq(excess, lo, hi, xtol=1e-300, rtol=max(rtol, 4 * np.finfo(float).eps), maxiter=500)
        # step to the feasible side of the root
        while excess(tau) > 1e-13 and tau < hi:
            tau = min(hi, tau * (1 + rtol))
    return DLPowerSplit(float(tau), power_for_latency_w(s, tau, b, h, noise_psd_w_per_hz))


def _dl_latency_bisection(dl_mask, inst: Instance, bandwidth_hz, rtol: float = 1e-12) -> np.ndarray:
    """Vectorised root of Σ_{k∈D} p_k(τ) = P^dl for every row (any payload sizes)."""
    m, k = dl_mask.shape
    b = np.asarray(bandwidth_hz, dtype=float)
    b = np.broadcast_to(b.reshape(-1, 1) if b.ndim <= 1 else b, (m, k))
    p, n0 = inst.radio.p_dl_w, inst.radio.noise_psd_w_per_hz
    out = np.zeros(m)
    nonempty = dl_mask.any(axis=1)
    if not nonempty.any():
        return out
    if p == 0:
        out[nonempty] = np.inf
        return out
    rows = np.flatnonzero(nonempty)
    d = dl_mask[rows]
    bb = b[rows]
    cnt = d.sum(axis=1)
    h, s = inst.gain_dl, inst.payload_bits_dl
    with np.errstate(divide="ignore", invalid="ignore"):
        lo = np.where(d, latency_s(s, bb, p, h, n0), 0.0).max(axis=1)
        hi = np.where(d, latency_s(s, bb, p / cnt[:, None], h, n0), 0.0).max(axis=1)
    for _ in range(200):
        if np.all(hi <= lo * (1 + rtol)):
            break
        mid = np.sqrt(lo * hi)
        need = np.where(d, power_for_latency_w(s, mid[:, None], bb, h, n0), 0.0).sum(axis=1)
        ok = need <= p
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
    out[rows] = hi
    return out


def dl_latency_s(dl_mask, inst: Instance, bandwidth_hz, rtol: float = 1e-12) -> np.ndarray:
    """τ^dl(D) for every row of ``dl_mask`` (M, K) on per-row bandwidth ``bandwidth_hz`` (M,).

    Closed form when all payloads are equal, vectorised bisection otherwise.
    """
    dl_mask = np.atleast_2d(np.asarray(dl_mask, dtype=bool))
    b = np.broadcast_to(np.asarray(bandwidth_hz, dtype=float), (dl_mask.shape[0],))
    if inst.uniform_payload:
        w = np.where(dl_mask, 1.0 / inst.gain_dl, 0.0).sum(axis=1)
        return dl_latency_closed_form_s(w, inst.payload_bits_dl[0], b, inst.radio.p_dl_w, inst.radio.noise_psd_w_per_hz)
    return _dl_latency_bisection(dl_mask, inst, b, rtol)


def equal_share_hz(mask: np.ndarray, bandwidth_hz: float) -> np.ndarray:
    """B/|R| per row (B where R is empty, which never matters)."""
    m = mask.sum(axis=1)
    return bandwidth_hz / np.maximum(m, 1)


# --------------------------------------------------------------------------- optimal modes


@dataclass(frozen=True)
class BatchDecision:
    """Optimal communication latency of many outcomes, and (optionally) who is served in UL."""

    latency_s: np.ndarray  # (M,)
    is_ul: np.ndarray | None = None  # (M, K) bool, subset of the rejected mask


def _latency_from_x_s(x, bits: float, bandwidth_hz, noise_psd_w_per_hz: float):
    """``S / (b·log2(1 + x/(N0·b)))``: latency of a link whose "power × gain" is x (inf where x = 0)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        tau = bits * LN2 / (bandwidth_hz * np.log1p(x / (noise_psd_w_per_hz * bandwidth_hz)))
    return np.where(x > 0, tau, np.inf)


def _ul_equivalent_x(x_dl, rho: float, noise_hz):
    """The UL "power × gain" whose S^ul-bit latency equals the S^dl-bit latency at ``x_dl``.

    ``S^ul/log(1 + x'/c) = S^dl/log(1 + x/c)`` with ``c = N0·b`` gives
    ``x' = c·expm1(ρ·log1p(x/c))``, ρ = S^ul/S^dl: increasing in x, so comparisons of DL and UL
    latencies become comparisons of x. Identity when ρ = 1.
    """
    if rho == 1.0:
        return x_dl
    with np.errstate(over="ignore", invalid="ignore"):
        out = noise_hz * np.expm1(rho * np.log1p(x_dl / noise_hz))
    return np.where(np.isinf(x_dl), np.inf, out)


def _optimal_fast(mask: np.ndarray, inst: Instance, return_modes: bool, gains=None) -> BatchDecision:
    """Closed-form linear scan over n (uniform payloads per link): O(K) per row after one sort.

    With one S and one b per row, every latency is the same decreasing function of an effective
    "power × gain" x: x = P^ul·h_k in UL, x = P^dl / Σ_{k∈D} 1/h_k for a DL set D. So
    ``T(n) = τ(min(x_ul(n), x_dl(n)))`` and the best split maximises that minimum: a max/min over
    suffix sums, with a single logarithm per outcome. When S^dl ≠ S^ul, each DL x is first mapped
    to the UL x of equal latency (`_ul_equivalent_x`), one more log/exp per entry.

    ``gains``: optional per-row channels ``(gain_ul, gain_dl)`` of shape (M, K) that replace the
    instance's (robust planning: every SAA sample on its own channel draw); each row is then
    sorted on its own channel.
    """
    m_rows, k = mask.shape
    s = inst.payload_bits[0]
    rho = float(s / inst.payload_bits_dl[0])
    n0, p_dl = inst.radio.noise_psd_w_per_hz, inst.radio.p_dl_w
    gain_ul, gain_dl = (inst.gain_ul, inst.gain_dl) if gains is None else gains
    x_ul_dev = inst.p_ul_w * gain_ul
    # UL order of the rejected devices is the order of P^ul·h^ul whatever the bandwidth share.
    if x_ul_dev.ndim == 1:  # one channel for every row: one global sort
        perm = np.argsort(-x_ul_dev, kind="stable")
        o = mask[:, perm]
        x_sorted = x_ul_dev[perm][None, :]
        inv_gd_sorted = 1.0 / gain_dl[perm]
    else:
        perm = np.argsort(-x_ul_dev, axis=1, kind="stable")
        o = np.take_along_axis(mask, perm, axis=1)
        x_sorted = np.take_along_axis(x_ul_dev, perm, axis=1)
        inv_gd_sorted = 1.0 / np.take_along_axis(gain_dl, perm, axis=1)
    cnt = o.sum(axis=1)
    b = inst.radio.bandwidth_hz / np.maximum(cnt, 1)
    w = np.where(o, inv_gd_sorted, 0.0)
    suffix_incl = np.cumsum(w[:, ::-1], axis=1)[:, ::-1]
    suffix_excl = np.zeros_like(w)
    suffix_excl[:, :-1] = suffix_incl[:, 1:]
    with np.errstate(divide="ignore", invalid="ignore"):
        x_dl_after = np.where(suffix_excl > 0, p_dl / suffix_excl, np.inf)
        x_dl_all = np.where(suffix_incl[:, 0] > 0, p_dl / suffix_incl[:, 0], np.inf)
    x_after_eq = _ul_equivalent_x(x_dl_after, rho, (n0 * b)[:, None])
    x_all_eq = _ul_equivalent_x(x_dl_all, rho, n0 * b)
    cand = np.where(o, np.minimum(x_sorted, x_after_eq), -np.inf)
    j = np.argmax(cand, axis=1)
    rows = np.arange(m_rows)
    best_ul = cand[rows, j]
    use_ul = best_ul > x_all_eq
    if rho == 1.0:
        t = _latency_from_x_s(np.where(use_ul, best_ul, x_dl_all), s, b, n0)
    else:  # the latencies themselves, from the untransformed x of each link and its own payload
        s_dl = inst.payload_bits_dl[0]
        x_j = np.broadcast_to(x_sorted, o.shape)[rows, j]
        t_split = np.maximum(_latency_from_x_s(x_j, s, b, n0), _latency_from_x_s(x_dl_after[rows, j], s_dl, b, n0))
        t = np.where(use_ul, t_split, _latency_from_x_s(x_dl_all, s_dl, b, n0))
    t = np.where(cnt > 0, t, 0.0)
    return BatchDecision(t, _ul_modes(mask, perm, o, use_ul, j) if return_modes else None)


def _ul_modes(mask: np.ndarray, perm: np.ndarray, o: np.ndarray, use_ul: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Which rejected devices `_optimal_fast`'s split serves in UL, in the devices' own order: in
    the UL order ``perm``, those up to the best split ``j`` of the rows that split at all."""
    k = mask.shape[1]
    ul_sorted = o & use_ul[:, None] & (np.arange(k)[None, :] <= j[:, None])
    is_ul = np.zeros_like(mask)
    if perm.ndim == 1:
        is_ul[:, perm] = ul_sorted
    else:
        np.put_along_axis(is_ul, perm, ul_sorted, axis=1)
    return is_ul


def _ul_order(mask: np.ndarray, inst: Instance):
    """Per row: devices sorted by UL latency on the equal share (rejected first), and those latencies."""
    b = equal_share_hz(mask, inst.radio.bandwidth_hz)
    tau_ul = np.where(mask, ul_latency_s(inst, b[:, None]), np.inf)
    order = np.argsort(tau_ul, axis=1, kind="stable")
    sorted_tau = np.take_along_axis(tau_ul, order, axis=1)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(mask.shape[1])[None, :].repeat(mask.shape[0], 0), axis=1)
    return b, tau_ul, sorted_tau, rank


def _t_of_n(n, mask, inst, b, sorted_tau, rank, rtol):
    """T(n) = max(τ^ul(n), τ^dl(n)) and its two parts, for per-row n (UL = the n fastest in UL)."""
    rows = np.arange(mask.shape[0])
    tul = np.where(n > 0, sorted_tau[rows, np.maximum(n - 1, 0)], 0.0)
    dl = mask & (rank >= n[:, None])
    tdl = dl_latency_s(dl, inst, b, rtol)
    return np.maximum(tul, tdl), tul, tdl


def _optimal_bisection(mask: np.ndarray, inst: Instance, return_modes: bool, rtol: float) -> BatchDecision:
    """Bisection over n for the crossing of τ^ul(n) and τ^dl(n) (docs/system-model.md §5.1)."""
    b, _, sorted_tau, rank = _ul_order(mask, inst)
    cnt = mask.sum(axis=1)
    lo = np.zeros_like(cnt)
    hi = cnt.copy()
    while np.any(lo < hi):
        act = np.flatnonzero(lo < hi)
        mid = (lo[act] + hi[act]) // 2
        _, tul, tdl = _t_of_n(mid, mask[act], inst, b[act], sorted_tau[act], rank[act], rtol)
        ok = tdl <= tul
        hi[act] = np.where(ok, mid, hi[act])
        lo[act] = np.where(ok, lo[act], mid + 1)
    nbar = lo
    t_bar, _, _ = _t_of_n(nbar, mask, inst, b, sorted_tau, rank, rtol)
    t_prev, _, _ = _t_of_n(np.maximum(nbar - 1, 0), mask, inst, b, sorted_tau, rank, rtol)
    take_prev = (nbar > 0) & (t_prev < t_bar)
    t = np.where(take_prev, t_prev, t_bar)
    n = np.where(take_prev, nbar - 1, nbar)
    is_ul = (mask & (rank < n[:, None])) if return_modes else None
    return BatchDecision(np.where(cnt > 0, t, 0.0), is_ul)


def _optimal_scan(mask: np.ndarray, inst: Instance, return_modes: bool, rtol: float) -> BatchDecision:
    """Oracle: T(n) for every n = 0..|R|, keep the best."""
    b, _, sorted_tau, rank = _ul_order(mask, inst)
    cnt = mask.sum(axis=1)
    best = np.full(mask.shape[0], np.inf)
    best_n = np.zeros_like(cnt)
    for n in range(mask.shape[1] + 1):
        valid = n <= cnt
        t, _, _ = _t_of_n(np.full_like(cnt, n), mask, inst, b, sorted_tau, rank, rtol)
        better = valid & (t < best)
        best = np.where(better, t, best)
        best_n = np.where(better, n, best_n)
    is_ul = (mask & (rank < best_n[:, None])) if return_modes else None
    return BatchDecision(np.where(cnt > 0, best, 0.0), is_ul)


def optimal_modes_batch(
    rejected,
    inst: Instance,
    method: str = "auto",
    return_modes: bool = False,
    rtol: float = 1e-12,
    gains=None,
) -> BatchDecision:
    """Minimum T_comm over UL/DL splits (equal bandwidth split) for every outcome row.

    ``method``: ``"auto"`` (``"fast"`` if payloads are uniform, else ``"bisection"``), ``"fast"``,
    ``"bisection"`` or ``"scan"``. ``gains``: per-row channels ``(gain_ul, gain_dl)`` (M, K) in
    place of the instance's (``"fast"`` only; `multispin.optimize.reactive.t_comm_batch`
    solves the other cases row by row).
    """
    _check_choice(method, METHODS, "method")
    mask = _as_mask(rejected, inst.num_devices)
    if method == "auto":
        method = "fast" if inst.uniform_payload else "bisection"
    if gains is not None and method != "fast":
        raise ConfigError(f"gains: per-row channels need method 'fast' (uniform payloads; got {method!r})")
    if method == "fast":
        if not inst.uniform_payload:
            raise ConfigError("method: 'fast' needs equal payload_bits on every device (use 'bisection')")
        return _optimal_fast(mask, inst, return_modes, gains)
    if method == "bisection":
        return _optimal_bisection(mask, inst, return_modes, rtol)
    return _optimal_scan(mask, inst, return_modes, rtol)
