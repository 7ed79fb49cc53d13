"""A communication-aware upper bound on max_γ of the SAA goodput (the certificate of a plan).

The free-communication bound max_γ G_max(γ) ignores T_comm, the paper's subject. This module
bounds the *same* SAA objective, G(γ) = N(γ) / (T_comp(γ) + (1/N_SAA)·Σ_s T*(o_s(γ))), from above
with a lower bound on every sample's T* that is **modular** (a sum over devices), so the relaxed
ratio can be maximised exactly over all (γ_max + 1)^K draft-length vectors.

Per sample s, any weights w_s ∈ R^K and offset h_s with ``T*(R) ≥ w_s(R) − h_s`` for *every*
rejected set R (w(R) = Σ_{k∈R} w_k) give ``Ē(γ) ≥ Σ_k A_k(γ_k) − H`` with
``A_k(g) = (1/N)·Σ_s w_{s,k}·1[g > L_{s,k}]`` (L the sample levels of
`multispin.optimize.incremental`: device k is rejected in sample s iff γ_k > L_{s,k}) and
``H = mean_s h_s``. Two families of (w_s, h_s), each valid by its own argument (docs/optimiser.md):

- the single-device weights (`max_chain_weights`, `max_ascending_weights`; any mode policy, any
  split, any K): ``T*(R) ≥ max_{k∈R} ℓ_k``,
  ℓ_k the latency of device k alone with the whole band B and the whole power of its better
  mode; ``max`` of weights is submodular, so its greedy vector along an order that puts R_s first
  is below it on every R and equal to it on R_s (h_s = 0).
- the exact table (`t_comm_table`, `conjugate_offsets`; deterministic mode policies, K ≤ `TABLE_MAX_DEVICES`): T* of
  every one of the 2^K rejected sets (the objective's own solver), a dictionary of weight vectors,
  and for each its exact offset ``h = max_R (w(R) − T*(R))`` over all 2^K sets; each sample takes
  the entry that is largest at its own rejected set.

`maximise_ratio` maximises ``Σ_k E_k(γ_k) / (max_k γ_k T_k + c + Σ_k a_k(γ_k))`` exactly
(every cap on the drafting time, Dinkelbach's iteration per cap with every γ_k chosen on its own)
and returns a value that is above the maximum even after rounding (the last Dinkelbach residual is
added). `communication_bound` puts it together: the least of the free-communication bound
and every surrogate's bound, each of them valid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from multispin.optimize.draft_lengths import goodput_upper_bound
from multispin.optimize.goodput import SAAObjective, pattern_table
from multispin.optimize.incremental import sample_levels
from multispin.optimize.modes import _latency_from_x_s
from multispin.optimize.reactive import t_comm_batch
from multispin.system.instance import Instance
from multispin.system.radio import latency_s

TABLE_MAX_DEVICES = 20  # 2^20 rejected sets solve in about a second; each device more doubles it
_TABLE_CHUNK = 1 << 16
_SAFETY = 1e-12  # relative slack added to every bound: rounding of the sums it is made of


@dataclass(frozen=True)
class Surrogate:
    """A separable lower bound on the SAA mean of T*: ``Ē(γ) ≥ Σ_k a[k, γ_k] − offset``."""

    a: np.ndarray  # (K, γ_max + 1), non-decreasing in γ
    offset: float
    name: str


@dataclass(frozen=True)
class BoundResult:
    """An upper bound on max_γ G(γ) on the objective's samples, and the γ that attains it."""

    value: float
    draft_len: np.ndarray
    name: str


# --------------------------------------------------------------------------- exact ratio maximisation


def maximise_ratio(
    inst: Instance,
    a: np.ndarray | None = None,
    offset: float = 0.0,
    lo: np.ndarray | None = None,
    hi: np.ndarray | None = None,
    const: float = 0.0,
    coupled: tuple[np.ndarray, np.ndarray] | None = None,
) -> BoundResult:
    """Exact ``max over lo ≤ γ ≤ hi`` of ``Σ E_k(γ_k) / (T_comp(γ) + const + Σ_k a[k, γ_k] − offset)``.

    For every cap τ on the drafting time (each value γ·T_k^dft), device k may draft up to
    ⌊τ/T_k⌋ tokens, and ``max_k γ_k T_k`` is replaced by τ (≥ it, and equal at the maximiser's
    own cap): the ratio is then separable per device and Dinkelbach's iteration (λ ← N/D,
    γ_k ← argmax E_k − λ·(a_k + T_ver^tok·γ_k)) reaches its maximum in finitely many steps. The
    returned value adds the last residual max_γ (N − λD) / min D, so it is an upper bound even where
    the iteration stopped on rounding. Infinite when some denominator could be ≤ 0.

    ``coupled`` (the coupled rule's expected-token table (K, γ_max + 1) and per-token drafting
    time (K,)): each device may also take the coupled rule, whose γ adds no surrogate airtime
    (a coupled device is never rejected, as a standard one at γ = 0): the maximum is then over
    every (coupled mask, γ). The returned ``draft_len`` is the communicating one (0 where coupled).
    """
    k, gmax = inst.num_devices, inst.gamma_max
    c = inst.compute
    grid = np.arange(gmax + 1)
    lo = np.zeros(k, dtype=np.int64) if lo is None else np.asarray(lo, dtype=np.int64)
    hi = np.full(k, gmax, dtype=np.int64) if hi is None else np.asarray(hi, dtype=np.int64)
    e, t, costs = _rule_options(inst, a, coupled)
    base = c.t_ver0_s + k * c.t_ver1_s + c.t_ver_tok_s * k + const - offset
    in_box = (grid[None, :] >= lo[:, None]) & (grid[None, :] <= hi[:, None])
    d_min = base + float(np.min(np.where(in_box[None], costs, np.inf), axis=(0, 2)).sum())
    if not d_min > 0:
        return BoundResult(float("inf"), lo.copy(), "unbounded")
    caps = np.unique(np.concatenate([(grid[None, :] * tk[:, None])[in_box] for tk in t]))
    caps = caps[caps >= np.min(np.max(lo[None, :] * t, axis=1))]  # a cap below some lower end leaves nothing
    # allowed[cap, option, device, γ]; the option axis and γ are then one axis of choices per device
    allowed = in_box[None, None] & (
        grid[None, None, None, :] * t[None, :, :, None] <= caps[:, None, None, None] * (1 + 1e-12)
    )
    n_opt = e.shape[0]
    e_flat = np.moveaxis(e, 0, 1).reshape(k, n_opt * (gmax + 1))
    cost_flat = np.moveaxis(costs, 0, 1).reshape(k, n_opt * (gmax + 1))
    allowed = np.moveaxis(allowed, 1, 2).reshape(caps.size, k, n_opt * (gmax + 1))
    lam = _dinkelbach(allowed, e_flat, cost_flat, caps + base)
    # residual at the final λ: max_γ (N − λ D) over the cap's feasible set, ≥ 0 up to rounding
    score = np.where(allowed, e_flat[None] - lam[:, None, None] * cost_flat[None], -np.inf)
    resid = score.max(axis=2).sum(axis=1) - lam * (caps + base)
    upper = lam + np.maximum(resid, 0.0) / d_min
    i = int(np.argmax(upper))
    choice = np.argmax(np.where(allowed[i], e_flat - lam[i] * cost_flat, -np.inf), axis=1)
    g_best = np.where(choice // (gmax + 1) == 0, choice % (gmax + 1), 0)
    return BoundResult(float(upper[i]) * (1 + _SAFETY), g_best.astype(np.int64), "ratio")


def _rule_options(
    inst: Instance, a: np.ndarray | None, coupled: tuple[np.ndarray, np.ndarray] | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each device's verification rules stacked on a leading axis (the standard one, and the
    coupled one where given): expected tokens (rules, K, γ_max + 1), drafting time per token
    (rules, K), and the denominator's cost of each γ (rules, K, γ_max + 1): its verification
    tokens, plus the surrogate airtime ``a`` under the standard rule."""
    k, gmax = inst.num_devices, inst.gamma_max
    verify = inst.compute.t_ver_tok_s * np.arange(gmax + 1)[None, :]
    cost = verify + (np.zeros((k, gmax + 1)) if a is None else np.asarray(a, dtype=float))
    if coupled is None:
        return inst.expected_tokens[None], inst.token_latency_s[None], cost[None]
    e = np.stack([inst.expected_tokens, np.asarray(coupled[0], dtype=float)])
    t = np.stack([inst.token_latency_s, np.asarray(coupled[1], dtype=float)])
    return e, t, np.stack([cost, np.broadcast_to(verify, cost.shape)])


def _dinkelbach(allowed: np.ndarray, e_flat: np.ndarray, cost_flat: np.ndarray, den0: np.ndarray) -> np.ndarray:
    """Dinkelbach's iteration per drafting-time cap, all caps at once: λ ← N/D with each device's
    choice argmax E − λ·cost among those ``allowed`` (caps, K, choices) and D = ``den0`` (per cap)
    + Σ cost, until no λ rises. Returns the final λ per cap."""
    rows = np.arange(e_flat.shape[0])[None, :]
    lam = np.zeros(den0.size)
    for _ in range(200):
        score = np.where(allowed, e_flat[None] - lam[:, None, None] * cost_flat[None], -np.inf)
        g = np.argmax(score, axis=2)
        num = e_flat[rows, g].sum(axis=1)
        den = den0 + cost_flat[rows, g].sum(axis=1)
        new = num / den
        if np.all(new <= lam * (1 + 1e-15)):
            break
        lam = np.maximum(lam, new)
    return lam


# --------------------------------------------------------------------------- surrogates


def surrogate_from_weights(
    obj: SAAObjective, weights: np.ndarray, offsets: np.ndarray, name: str, levels: np.ndarray | None = None
) -> Surrogate:
    """``a[k, g] = (1/N) Σ_s w_{s,k} 1[g > L_{s,k}]`` and offset ``mean_s h_s`` (see the module doc)."""
    inst = obj.inst
    k, gmax = inst.num_devices, inst.gamma_max
    lv = sample_levels(obj) if levels is None else levels
    n = lv.shape[0]
    binned = np.zeros((k, gmax + 1))
    cols = np.broadcast_to(np.arange(k), lv.shape)
    np.add.at(binned, (cols.ravel(), lv.ravel()), np.asarray(weights, dtype=float).ravel())
    # rejected at g iff the level is < g: a[k, g] = Σ_{l < g} binned[k, l]
    a = np.zeros((k, gmax + 1))
    a[:, 1:] = np.cumsum(binned, axis=1)[:, :-1] / n
    return Surrogate(a, float(np.mean(offsets)), name)


def single_device_latency_s(inst: Instance, p_dl_w: float | None = None) -> np.ndarray:
    """ℓ_k: device k alone, the whole band B, at P^ul in UL mode or the whole P^dl in DL mode,
    whichever is faster (a lower bound on its latency in any rejected set, any split).

    ``p_dl_w`` replaces the DL budget (the tests' negative control passes a share of it, which
    is no lower bound)."""
    r, n0 = inst.radio, inst.radio.noise_psd_w_per_hz
    ul = latency_s(inst.payload_bits, r.bandwidth_hz, inst.p_ul_w, inst.gain_ul, n0)
    dl = latency_s(inst.payload_bits_dl, r.bandwidth_hz, r.p_dl_w if p_dl_w is None else p_dl_w, inst.gain_dl, n0)
    return np.minimum(ul, dl)


def _max_game_shares(values: np.ndarray, members: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """Shapley shares of f(A) = max(floor, max_{k∈A} values_k) − floor among ``members`` (per row).

    f = Σ_l (v_l − v_{l+1})·1[A meets the top-l members], v sorted descending and v_{r+1} = floor;
    each term is shared equally by its l members, so the t-th largest gets Σ_{l≥t} (v_l − v_{l+1})/l.
    """
    n, k = members.shape
    v = np.where(members, np.maximum(values[None, :], floor[:, None]), -np.inf)
    order = np.argsort(-v, axis=1, kind="stable")
    vs = np.take_along_axis(v, order, axis=1)
    vs = np.where(np.isfinite(vs), vs, floor[:, None])
    nxt = np.concatenate([vs[:, 1:], floor[:, None]], axis=1)
    rank = np.arange(1, k + 1)[None, :]
    terms = (vs - nxt) / rank
    shares_sorted = np.cumsum(terms[:, ::-1], axis=1)[:, ::-1]
    out = np.zeros((n, k))
    np.put_along_axis(out, order, shares_sorted, axis=1)
    return np.where(members, out, 0.0)


def max_chain_weights(values: np.ndarray, rejected: np.ndarray) -> np.ndarray:
    """Weights w_s with w_s(R) ≤ f(R) = max_{k∈R} values_k for every R and w_s(R_s) = f(R_s), one
    per row R_s of ``rejected``.

    f is submodular (the gain of adding k, max(0, v_k − f(A)), falls as A grows), so the greedy
    vector of any order is below f on every set and equal to it on the order's prefixes. Here: the
    mean over every order that puts R_s first (R_s, then the others, each part in random order),
    i.e. the Shapley shares of f on R_s and of f(R_s ∪ ·) − f(R_s) on the others: every device that
    would raise the max gets a share of what it would add, not only the worst one.
    """
    n, _ = rejected.shape
    inside = _max_game_shares(values, rejected, np.zeros(n))
    top = np.where(rejected, values[None, :], 0.0).max(axis=1)
    return inside + _max_game_shares(values, ~rejected, top)


def max_ascending_weights(values: np.ndarray, rejected: np.ndarray) -> np.ndarray:
    """Like `max_chain_weights`, but R_s in ascending order of value: each member gets its
    excess over the next smaller one, so dropping the largest members of R_s saves exactly what it
    saves f (the sets R_s minus its top members are prefixes of the order)."""
    n, k = rejected.shape
    v = np.where(rejected, values[None, :], -np.inf)
    order = np.argsort(v, axis=1, kind="stable")  # ascending, non-members (−inf) first
    vs = np.take_along_axis(v, order, axis=1)
    prev = np.concatenate([np.full((n, 1), -np.inf), vs[:, :-1]], axis=1)
    inc = np.where(np.isfinite(vs), vs - np.where(np.isfinite(prev), prev, 0.0), 0.0)
    inside = np.zeros((n, k))
    np.put_along_axis(inside, order, inc, axis=1)
    top = np.where(rejected, values[None, :], 0.0).max(axis=1)
    return inside + _max_game_shares(values, ~rejected, top)


# --------------------------------------------------------------------------- the exact table (small K)


def subset_bits(start: int, stop: int, k: int) -> np.ndarray:
    """Rows start..stop−1 of the 2^K rejected sets, as boolean masks (bit k of the index = device k)."""
    codes = np.arange(start, stop, dtype=np.int64)
    return ((codes[:, None] >> np.arange(k)[None, :]) & 1).astype(bool)


def _optimal_table_by_doubling(inst: Instance) -> np.ndarray:
    """T* of every rejected set (optimal modes, equal split, one payload size on both links), built
    set by set from a smaller one: one pass of a few additions per set instead of a K-wide solve.

    Order the devices by x_k = P^ul·h_k^ul. The optimal modes serve a prefix of R (largest x first)
    in UL and the rest in DL, so (`multispin.optimize.modes._optimal_fast`, payload ratio 1)
    ``T*(R) = τ(max(Y(R), P^dl/S(R)), B/|R|)`` with S(R) = Σ_{k∈R} 1/h_k^dl and
    ``Y(R) = max_{j∈R} min(x_j, P^dl/S(devices of R after j))``. Removing the device j0 of R with the
    largest x gives ``Y(R) = max(min(x_j0, P^dl/S(R∖j0)), Y(R∖j0))``: with bit d given to the device of
    d-th smallest x, the sets [2^d, 2^(d+1)) are those of [0, 2^d) with device d added, which is
    then their largest x. Equal to the solver up to the order of the sums (≈ 1e-16 relative)."""
    k = inst.num_devices
    x = inst.p_ul_w * inst.gain_ul
    order = np.argsort(x, kind="stable")  # bit d ↔ device order[d], ascending x
    inv_g = 1.0 / inst.gain_dl[order]
    x = x[order]
    p_dl, n0, bits = inst.radio.p_dl_w, inst.radio.noise_psd_w_per_hz, float(inst.payload_bits[0])
    size = 1 << k
    s = np.zeros(size)
    q = np.full(size, np.inf)  # P^dl / S
    y = np.zeros(size)
    cnt = np.zeros(size)
    code = np.zeros(size, dtype=np.int64)  # the set's index in the original device order
    for d in range(k):
        lo, hi = slice(0, 1 << d), slice(1 << d, 2 << d)
        np.add(s[lo], inv_g[d], out=s[hi])
        np.maximum(np.minimum(q[lo], x[d]), y[lo], out=y[hi])
        np.divide(p_dl, s[hi], out=q[hi])
        np.add(cnt[lo], 1.0, out=cnt[hi])
        np.add(code[lo], np.int64(1) << np.int64(order[d]), out=code[hi])
    b = inst.radio.bandwidth_hz / np.maximum(cnt, 1.0)
    t = _latency_from_x_s(np.maximum(y, q), bits, b, n0)
    t[0] = 0.0
    out = np.empty(size)
    out[code] = t
    return out


def t_comm_table(obj: SAAObjective) -> np.ndarray:
    """T* of every rejected set, indexed by ``Σ_k o_k 2^k``, by the objective's own solver (chunked;
    by `_optimal_table_by_doubling` where the modes are optimal, the split equal and every payload
    the same size on both links)."""
    k = obj.inst.num_devices
    if obj.modes == "random":
        raise ValueError("the random mode policy has no per-set T* (its coins are per sample)")
    inst = obj.inst
    if (
        obj.modes == "optimal"
        and obj.split == "equal"
        and inst.uniform_payload
        and inst.payload_bits[0] == inst.payload_bits_dl[0]
    ):
        return _optimal_table_by_doubling(inst)
    if obj.modes == "optimal" and obj.split == "equal" and k <= 16:
        return pattern_table(obj.inst, obj.modes, obj.split)
    out = np.empty(1 << k)
    for start in range(0, 1 << k, _TABLE_CHUNK):
        stop = min(1 << k, start + _TABLE_CHUNK)
        out[start:stop] = t_comm_batch(subset_bits(start, stop, k), obj.inst, obj.modes, obj.split)
    return out


def _subset_sums(w: np.ndarray, k: int) -> np.ndarray:
    """``w_j(R)`` of every set R of the first k devices (rows of ``w``), by doubling: the sets with
    bit d are those without it plus w_jd, one addition per set."""
    out = np.zeros((w.shape[0], 1 << k))
    for d in range(k):
        np.add(out[:, : 1 << d], w[:, d : d + 1], out=out[:, 1 << d : 2 << d])
    return out


def conjugate_offsets(table: np.ndarray, weights: np.ndarray, block: int = 16, chunk: int = 16) -> np.ndarray:
    """``h_j = max_R (w_j(R) − T*(R))`` over all 2^K sets, for every row w_j of ``weights``.

    With h_j, ``T*(R) ≥ w_j(R) − h_j`` holds for every R by definition (R = ∅ makes h_j ≥ 0).
    A set is R = H ∪ L (H its high devices, L its ⌊K/2⌋ low ones): ``w_j(R) = w_j(H) + w_j(L)``, so
    ``h_j = max_H (w_j(H) + max_L (w_j(L) − T*(H ∪ L)))``, the inner maximum taken for ``block`` rows
    and ``chunk`` H's at a time: every set is visited once per row, as before, but in pieces that
    stay in the processor's cache (the sums of every set, for a few rows at once, do not).
    """
    k = int(np.log2(table.size))
    w = np.atleast_2d(np.asarray(weights, dtype=float))
    m = k // 2
    t = table.reshape(-1, 1 << m)  # (H, L); the low m bits index L
    n_h = t.shape[0]
    h = np.zeros(w.shape[0])
    buf = np.empty((min(block, w.shape[0]), min(chunk, n_h), 1 << m))
    inner = np.empty((min(block, w.shape[0]), n_h))
    for j0 in range(0, w.shape[0], block):
        wb = w[j0 : j0 + block]
        n_j = wb.shape[0]
        w_low = _subset_sums(wb[:, :m], m)[:, None, :]  # (J, 1, 2^m)
        for c0 in range(0, n_h, chunk):
            b = buf[:n_j, : min(chunk, n_h - c0)]
            np.subtract(w_low, t[None, c0 : c0 + chunk], out=b)
            b.max(axis=2, out=inner[:n_j, c0 : c0 + b.shape[1]])
        h[j0 : j0 + n_j] = np.maximum(0.0, (_subset_sums(wb[:, m:], k - m) + inner[:n_j]).max(axis=1))
    # each sum rounds (K terms of size ≤ |w|, then the difference): widen by a bound on that error
    return h + 4 * k * np.finfo(float).eps * (np.abs(w).sum(axis=1) + np.abs(table).max())


def _codes(rejected: np.ndarray) -> np.ndarray:
    return rejected.astype(np.int64) @ (np.int64(1) << np.arange(rejected.shape[1], dtype=np.int64))


def marginal_weights(table: np.ndarray, rejected: np.ndarray) -> np.ndarray:
    """Per row R_s: the change of T* when device k leaves R_s (k ∈ R_s) or joins it (k ∉ R_s):
    a modular approximation of T* around R_s (exact where T* is modular)."""
    k = rejected.shape[1]
    code = _codes(rejected)
    bit = np.int64(1) << np.arange(k, dtype=np.int64)
    other = code[:, None] ^ bit[None, :]
    here = table[code][:, None]
    there = table[other]
    return np.maximum(np.where(rejected, here - there, there - here), 0.0)


def table_dictionary(table: np.ndarray, rejected: np.ndarray) -> np.ndarray:
    """Candidate weight vectors: the mean marginal vector of the samples with |R_s| = m, per m,
    each also scaled by 0.5 and 0.75 (a flatter vector needs a smaller offset)."""
    marg = marginal_weights(table, rejected)
    sizes = rejected.sum(axis=1)
    means = [marg[sizes == m].mean(axis=0) for m in np.unique(sizes) if m > 0]
    if not means:
        return np.zeros((1, rejected.shape[1]))
    base = np.asarray(means)
    return np.concatenate([base, 0.75 * base, 0.5 * base])


# --------------------------------------------------------------------------- the bound


_ITERATIONS = 6  # rounds of re-choosing every sample's weights (the bound is the least of them)
_DICTIONARY_SAMPLES = 48  # samples whose own marginal vectors join the table dictionary


@dataclass(frozen=True)
class CommunicationBound:
    """max_γ G(γ) ≤ ``value`` on the objective's samples: the least of the free-communication bound
    and every surrogate's exact relaxed maximum. ``draft_len`` attains the least relaxed maximum."""

    value: float
    free_communication: float
    draft_len: np.ndarray
    method: str  # which surrogates took part: "single_device" or "single_device+table"
    values: tuple = ()  # every bound computed, in order (each one valid)


def _table_candidates(obj: SAAObjective, rejected: np.ndarray):
    """The table dictionary (weights, exact offsets) around the incumbent's rejected sets, or None
    where the table is out of reach (K too large, random modes, optimized split beyond 12 devices)."""
    k = obj.inst.num_devices
    if obj.modes == "random" or k > TABLE_MAX_DEVICES or (obj.split == "optimized" and k > 12):
        return None
    table = t_comm_table(obj)
    marg = marginal_weights(table, rejected)
    pick = np.unique(np.linspace(0, rejected.shape[0] - 1, _DICTIONARY_SAMPLES).astype(int))
    d = np.concatenate([table_dictionary(table, rejected), marg[pick], 0.75 * marg[pick], 0.5 * marg[pick]])
    return d, conjugate_offsets(table, d)


def communication_bound(
    obj: SAAObjective,
    incumbent: np.ndarray,
    iterations: int = _ITERATIONS,
    latency: np.ndarray | None = None,
    table: bool = True,
    coupled: tuple[np.ndarray, np.ndarray] | None = None,
) -> CommunicationBound:
    """An upper bound on max_γ G(γ) of ``obj`` (its own samples, mode policy and split).

    Each sample's weights are chosen among the valid candidates (the single-device greedy vectors
    at every rejected set seen so far, and the table dictionary with its offsets) as the one
    largest summed over those sets; the relaxed ratio is maximised exactly; its maximiser's
    rejected sets join the "seen" sets and the choice is made again. Every round's value is an
    upper bound; the least is returned. ``incumbent``: the plan to be certified (the first sets).
    ``latency`` replaces ℓ (the tests' negative control); ``table=False`` skips the table.
    ``coupled`` (as `maximise_ratio`'s): the bound covers every coupled mask too (``obj`` the
    all-standard objective, ``incumbent`` the communicating draft lengths, 0 where coupled).
    """
    inst = obj.inst
    lv = sample_levels(obj)
    n = lv.shape[0]
    rows = np.arange(n)
    ell = single_device_latency_s(inst) if latency is None else latency
    free = goodput_upper_bound(inst) if coupled is None else maximise_ratio(inst, coupled=coupled).value
    seen = [np.asarray(incumbent)[None, :] > lv]
    tab = _table_candidates(obj, seen[0]) if table else None
    best, best_g, values = free, np.asarray(incumbent, dtype=np.int64).copy(), [free]
    for _ in range(iterations):
        cands = [f(ell, r) for r in seen for f in (max_chain_weights, max_ascending_weights)]
        w_all = np.stack(cands)  # (C, N, K)
        score = np.stack([sum((c * r).sum(axis=1) for r in seen) for c in cands], axis=1)  # (N, C)
        pick = np.argmax(score, axis=1)
        w, h = w_all[pick, rows], np.zeros(n)
        if tab is not None:
            d, off = tab
            t_score = sum(r.astype(float) @ d.T for r in seen) - len(seen) * off[None, :]
            j = np.argmax(t_score, axis=1)
            better = t_score[rows, j] > score[rows, pick]
            w = np.where(better[:, None], d[j], w)
            h = np.where(better, off[j], 0.0)
        sur = surrogate_from_weights(obj, w, h, "surrogate", lv)
        res = maximise_ratio(inst, sur.a, sur.offset, coupled=coupled)
        values.append(res.value)
        if res.value < best:
            best, best_g = res.value, res.draft_len
        nxt = res.draft_len[None, :] > lv
        if any(np.array_equal(nxt, r) for r in seen):
            break
        seen.append(nxt)
    return CommunicationBound(
        best, free, best_g, "single_device" + ("+table" if tab is not None else ""), tuple(values)
    )
