"""Goodput of docs/system-model.md §3: expected tokens, T_comp, E[T_comm] by SAA, G(γ) and G_max(γ).

``G(γ) = Σ_k E[N_k] / (T_comp(γ) + E_o[T_comm*(o)])``, the expectation over rejection outcomes o
estimated by sample-average approximation with **common random numbers**: uniforms u (N_SAA, K)
are drawn once and ``o_{s,k} = 1[u_{s,k} > P(first γ_k tokens accepted)]``, so every candidate γ
is compared on the same samples and raising one γ_k only adds device k to some outcomes.

Acceptance: ``inst.alpha`` of shape (K,) is the paper's i.i.d. model, ``E[N_k] =
(1 − α^{γ+1})/(1 − α)`` and rejection probability ``1 − α^γ``; a (K, γ_max) array gives the
conditional acceptance rate of each position (measured profiles), handled by the same tables.

`SAAObjective` evaluates G for many γ's on one set of uniforms (incrementally for the ±1
moves of the paper's greedy; the shipped search uses `multispin.optimize.incremental`);
`exact_goodput` enumerates all 2^K outcomes (small K); `expected_comm_s` is E[T_comm] at any
per-device rejection probabilities (a running round's, given its drafts).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from multispin.errors import ConfigError
from multispin.optimize.reactive import MODE_POLICIES, SPLITS, t_comm_batch
from multispin.system.instance import Instance
from multispin.vocabulary import COIN_UL_BELOW, ModeRule


def _gamma(inst: Instance, gamma) -> np.ndarray:
    g = np.asarray(gamma)
    if g.ndim == 0:
        g = np.full(inst.num_devices, int(g))
    if g.shape[-1] != inst.num_devices:
        raise ConfigError(f"gamma: needs {inst.num_devices} draft lengths (got shape {g.shape})")
    if np.any(g < 0) or np.any(g > inst.gamma_max) or not np.all(g == np.round(g)):
        raise ConfigError(f"gamma: draft lengths must be integers in [0, {inst.gamma_max}] (got {g.tolist()})")
    return g.astype(np.int64)


def expected_tokens(inst: Instance, gamma) -> np.ndarray:
    """E[N_k] per device (tokens gained in the round, bonus/correction included); (..., K)."""
    g = _gamma(inst, gamma)
    return inst.expected_tokens[np.arange(inst.num_devices), g]


def acceptance_prob(inst: Instance, gamma) -> np.ndarray:
    """P(all γ_k draft tokens accepted) per device; the rejection probability is 1 minus this."""
    g = _gamma(inst, gamma)
    return inst.survival[np.arange(inst.num_devices), g]


def rejection_prob(inst: Instance, gamma) -> np.ndarray:
    """P(device k is rejected) = 1 − P(all γ_k accepted); 0 when γ_k = 0."""
    return 1.0 - acceptance_prob(inst, gamma)


def t_comp_s(inst: Instance, gamma) -> np.ndarray:
    """``max_k γ_k·T_k^dft + T_ver^0 + K·T_ver^1 + T_ver^tok·Σ_k(γ_k + 1)`` (per row of gamma).

    T_k^dft includes the drafting upload when signalling bits are counted
    (``inst.token_latency_s``).
    """
    g = _gamma(inst, gamma)
    c = inst.compute
    k = inst.num_devices
    draft = np.max(g * inst.token_latency_s, axis=-1)
    return draft + c.t_ver0_s + k * c.t_ver1_s + c.t_ver_tok_s * np.sum(g + 1, axis=-1)


def g_max(inst: Instance, gamma) -> float:
    """Free-communication bound ``Σ E[N_k] / T_comp(γ)``."""
    return float(np.sum(expected_tokens(inst, gamma)) / t_comp_s(inst, gamma))


def outcomes(inst: Instance, gamma, uniforms: np.ndarray) -> np.ndarray:
    """Rejection outcomes (N, K) from common uniforms: ``u > P(all γ_k accepted)``."""
    return np.asarray(uniforms) > acceptance_prob(inst, gamma)[None, :]


@dataclass(frozen=True)
class Goodput:
    """G(γ) and its parts (all per round): tokens, T_comp, E[T_comm], and the bound G_max."""

    goodput_tokens_per_s: float
    expected_tokens: float
    t_comp_s: float
    e_t_comm_s: float
    g_max_tokens_per_s: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _goodput(num: float, tc: float, ecomm: float) -> Goodput:
    return Goodput(num / (tc + ecomm), num, tc, ecomm, num / tc)


def _row_keys(bits: np.ndarray) -> np.ndarray:
    """One exact, sortable key per boolean row: an int64 code up to 62 columns, else the packed bytes."""
    if bits.shape[1] <= 62:
        return bits @ (np.int64(1) << np.arange(bits.shape[1], dtype=np.int64))
    packed = np.ascontiguousarray(np.packbits(bits, axis=1))
    return packed.view(np.dtype((np.void, packed.shape[1]))).ravel()


class SAAObjective:
    """G(γ) by SAA on fixed uniforms (common random numbers), for one mode policy and split.

    ``uniforms`` (N, K): the outcome uniforms; ``mode_uniforms`` (N, K): the random-mode
    baseline's coin per sample and device (UL where < 1/2). With ``split="optimized"`` the
    T_comm of every distinct outcome is cached (the joint solve is ~1000× the equal split's cost).

    ``channel_gains``: optional ``(gain_ul, gain_dl)``, each (N, K): sample s's T_comm is solved
    on its own channel draw instead of the instance's (robust planning under imperfect channel
    knowledge, `multispin.system.channel_process`: the draws come from the posterior of the
    channel given its estimate). T_comp stays the instance's. Rows are then never deduplicated.
    """

    def __init__(
        self,
        inst: Instance,
        uniforms: np.ndarray,
        modes: ModeRule = "optimal",
        split: str = "equal",
        mode_uniforms: np.ndarray | None = None,
        channel_gains=None,
    ):
        if modes not in MODE_POLICIES:
            raise ConfigError(f"modes: unknown value {modes!r} (allowed: {', '.join(MODE_POLICIES)})")
        if split not in SPLITS:
            raise ConfigError(f"split: unknown value {split!r} (allowed: {', '.join(SPLITS)})")
        u = np.asarray(uniforms, dtype=float)
        if u.ndim != 2 or u.shape[1] != inst.num_devices or u.shape[0] < 1:
            raise ConfigError(f"uniforms: needs shape (N_SAA, {inst.num_devices}) (got {u.shape})")
        if modes == "random":
            if mode_uniforms is None or np.shape(mode_uniforms) != u.shape:
                raise ConfigError(f"mode_uniforms: the random mode policy needs shape {u.shape}")
        self.inst = inst
        self.uniforms = u
        self.modes = modes
        self.split = split
        self.mode_uniforms = None if mode_uniforms is None else np.asarray(mode_uniforms, dtype=float)
        self.channel_gains = None
        if channel_gains is not None:
            gu, gd = (np.asarray(g, dtype=float) for g in channel_gains)
            if gu.shape != u.shape or gd.shape != u.shape:
                raise ConfigError(f"channel_gains: needs two arrays of shape {u.shape} (got {gu.shape}, {gd.shape})")
            if not (np.all(np.isfinite(gu)) and np.all(gu > 0) and np.all(np.isfinite(gd)) and np.all(gd > 0)):
                raise ConfigError("channel_gains: must be in (0, inf)")
            self.channel_gains = (gu, gd)
        self._cache: dict[bytes | int, float] = {}
        self.num_solves = 0

    def head(self, m: int) -> SAAObjective:
        """The same objective on its first ``m`` samples (uniforms, mode coins and channel draws)."""
        cut = None if self.channel_gains is None else (self.channel_gains[0][:m], self.channel_gains[1][:m])
        return SAAObjective(
            self.inst,
            self.uniforms[:m],
            self.modes,
            self.split,
            None if self.mode_uniforms is None else self.mode_uniforms[:m],
            cut,
        )

    @property
    def n_saa(self) -> int:
        return self.uniforms.shape[0]

    def t_comm_rows(self, mask: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """T_comm of outcome rows ``mask`` (which are SAA samples ``rows``, for the mode coins).

        Rows with the same rejected set (and, for random modes, the same coins among it) are
        solved once: at small γ or with few drafting devices most rows repeat.
        """
        if rows is None:
            rows = np.arange(mask.shape[0])
        mu = None if self.mode_uniforms is None else self.mode_uniforms[rows]
        if mask.shape[0] == 0:
            return np.zeros(0)
        if self.channel_gains is not None:  # every row on its own channel draw: nothing repeats
            self.num_solves += mask.shape[0]
            gains = (self.channel_gains[0][rows], self.channel_gains[1][rows])
            return t_comm_batch(mask, self.inst, self.modes, self.split, mu, gains=gains)
        if self.split == "equal" and mask.shape[0] < 64:  # too few rows for deduplication to pay
            self.num_solves += mask.shape[0]
            return t_comm_batch(mask, self.inst, self.modes, self.split, mu)
        key_src = mask
        if self.modes == "random":  # the coin's side is part of the outcome
            assert mu is not None, "the random mode rule needs its coin's uniforms"
            key_src = np.concatenate([mask, mask & (mu < COIN_UL_BELOW)], axis=1)
        keys = _row_keys(key_src)
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        if self.split == "equal":
            self.num_solves += first.size
            vals = t_comm_batch(mask[first], self.inst, self.modes, self.split, None if mu is None else mu[first])
            return vals[inverse.ravel()]
        # optimized split (~1000× the equal split's cost): cache every solved key across calls
        vals = np.empty(first.size)
        todo = []
        for i, key in enumerate(keys[first]):
            v = self._cache.get(bytes(key) if key_src.shape[1] > 62 else int(key))
            if v is None:
                todo.append(i)
            else:
                vals[i] = v
        if todo:
            idx = first[np.asarray(todo)]
            solved = t_comm_batch(mask[idx], self.inst, self.modes, self.split, None if mu is None else mu[idx])
            self.num_solves += idx.size
            for i, v in zip(todo, solved):
                key = keys[first[i]]
                self._cache[bytes(key) if key_src.shape[1] > 62 else int(key)] = float(v)
                vals[i] = v
        return vals[inverse.ravel()]

    def t_comm_samples(self, gamma) -> np.ndarray:
        """T_comm*(o_s) for every SAA sample s at draft lengths γ."""
        return self.t_comm_rows(outcomes(self.inst, gamma, self.uniforms))

    def evaluate(self, gamma) -> Goodput:
        """G(γ) with its parts."""
        g = _gamma(self.inst, gamma)
        num = float(np.sum(expected_tokens(self.inst, g)))
        return _goodput(num, float(t_comp_s(self.inst, g)), float(np.mean(self.t_comm_samples(g))))

    def value(self, gamma) -> float:
        return self.evaluate(gamma).goodput_tokens_per_s

    def step_values(self, gamma, t_cur: np.ndarray, delta: int = 1, candidates=None):
        """G(γ + δ·e_k) (δ = ±1) for every candidate device k, reusing the per-sample T_comm ``t_cur``.

        Only samples with u_{s,k} between P(γ_k accepted) and P(γ_k + δ accepted) change (device k
        joins R there for δ = +1, leaves it for δ = −1). Returns ``(values, changes)``: values (K,)
        with −inf for non-candidates, and ``changes = (cand, rows, t_new)``, the new T_comm of
        every changed (candidate, sample) pair, to commit the chosen move
        (``t_cur[rows[cand == k]] = t_new[cand == k]``).
        """
        if delta not in (1, -1):
            raise ConfigError(f"delta: must be +1 or -1 (got {delta})")
        inst = self.inst
        g = _gamma(inst, gamma)
        k = inst.num_devices
        movable = (g < inst.gamma_max) if delta == 1 else (g > 0)
        if candidates is None:
            candidates = np.flatnonzero(movable)
        candidates = np.unique(np.asarray(candidates, dtype=np.int64))
        if candidates.size and (candidates[0] < 0 or candidates[-1] >= k or not np.all(movable[candidates])):
            raise ConfigError(
                f"candidates: devices in [0, {k - 1}] that can move by {delta} (got {candidates.tolist()})"
            )
        values = np.full(k, -np.inf)
        empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
        if candidates.size == 0:
            return values, empty
        surv = inst.survival
        u = self.uniforms[:, candidates]
        lo = surv[candidates, np.maximum(g[candidates], g[candidates] + delta)][None, :]
        hi = surv[candidates, np.minimum(g[candidates], g[candidates] + delta)][None, :]
        changed = (u > lo) & (u <= hi)
        pos, all_rows = np.nonzero(changed.T)  # grouped by candidate
        all_cand = candidates[pos]
        if all_rows.size:
            masks = outcomes(inst, g, self.uniforms[all_rows])
            masks[np.arange(all_rows.size), all_cand] = delta == 1
            t_new = self.t_comm_rows(masks, all_rows)
        else:
            t_new = np.zeros(0)
        dsum = np.bincount(pos, weights=t_new - t_cur[all_rows], minlength=candidates.size)
        num = float(np.sum(inst.expected_tokens[np.arange(k), g]))
        gg = np.broadcast_to(g, (candidates.size, k)).copy()
        gg[np.arange(candidates.size), candidates] += delta
        tc = t_comp_s(inst, gg)
        dnum = inst.expected_tokens[candidates, g[candidates] + delta] - inst.expected_tokens[candidates, g[candidates]]
        ecomm = (float(np.sum(t_cur)) + dsum) / self.n_saa
        values[candidates] = (num + dnum) / (tc + ecomm)
        return values, (all_cand, all_rows, t_new)


def goodput(
    inst: Instance,
    gamma,
    uniforms: np.ndarray,
    modes: ModeRule = "optimal",
    split: str = "equal",
    mode_uniforms: np.ndarray | None = None,
) -> Goodput:
    """G(γ) by SAA on the given uniforms (see `SAAObjective`)."""
    return SAAObjective(inst, uniforms, modes, split, mode_uniforms).evaluate(gamma)


def pattern_table(
    inst: Instance, modes: ModeRule = "optimal", split: str = "equal", max_devices: int = 16
) -> np.ndarray:
    """T_comm* of every outcome pattern, indexed by ``Σ_k o_k·2^k`` (small K only)."""
    k = inst.num_devices
    if k > max_devices:
        raise ConfigError(f"devices: exact enumeration is limited to {max_devices} devices (got {k})")
    if modes == "random":
        raise ConfigError("modes: exact enumeration does not cover the random mode policy")
    codes = np.arange(2**k, dtype=np.int64)
    masks = ((codes[:, None] >> np.arange(k)[None, :]) & 1).astype(bool)
    return t_comm_batch(masks, inst, modes, split)


def exact_goodput(
    inst: Instance, gamma, modes: ModeRule = "optimal", split: str = "equal", table: np.ndarray | None = None
) -> Goodput:
    """G(γ) with E[T_comm] summed exactly over all 2^K outcomes (small K only)."""
    g = _gamma(inst, gamma)
    k = inst.num_devices
    if table is None:
        table = pattern_table(inst, modes, split)
    q = rejection_prob(inst, g)
    codes = np.arange(2**k, dtype=np.int64)
    bits = ((codes[:, None] >> np.arange(k)[None, :]) & 1).astype(bool)
    prob = np.prod(np.where(bits, q[None, :], 1.0 - q[None, :]), axis=1)
    num = float(np.sum(expected_tokens(inst, g)))
    return _goodput(num, float(t_comp_s(inst, g)), float(prob @ table))


# rejected sets `expected_comm_s` enumerates at most (2^12 rows of one batched T_comm solve)
MAX_EXACT_UNCERTAIN = 12


def expected_comm_s(
    inst: Instance,
    reject_prob,
    modes: ModeRule = "optimal",
    split: str = "equal",
    mode_uniforms: np.ndarray | None = None,
    rng: np.random.Generator | None = None,
    samples: int = 4096,
) -> float:
    """E[T_comm] when each device k is rejected independently with probability ``reject_prob[k]``
    (any probabilities: a running round's, given its drafts, not only the model's 1 − α^γ).

    Exact, summed over the rejected sets of the devices whose fate is uncertain (0 < p < 1), where
    there are at most `MAX_EXACT_UNCERTAIN` of them; otherwise the mean over ``samples`` sets drawn
    with ``rng``. ``mode_uniforms``: the random mode policy's coins of the round, one per device."""
    q = np.asarray(reject_prob, dtype=float)
    if q.shape != (inst.num_devices,) or np.any((q < 0) | (q > 1)):
        raise ConfigError(f"reject_prob: one probability in [0, 1] per device expected (got {q.tolist()})")
    uncertain = np.flatnonzero((q > 0) & (q < 1))
    if uncertain.size <= MAX_EXACT_UNCERTAIN:
        codes = np.arange(2**uncertain.size, dtype=np.int64)
        bits = ((codes[:, None] >> np.arange(uncertain.size)[None, :]) & 1).astype(bool)
        masks = np.tile(q >= 1, (codes.size, 1))
        masks[:, uncertain] = bits
        prob = np.prod(np.where(bits, q[uncertain], 1.0 - q[uncertain]), axis=1)
    else:
        if rng is None:
            raise ConfigError(f"rng: {uncertain.size} uncertain devices are too many to enumerate; give a generator")
        masks = rng.random((samples, q.size)) < q
        prob = np.full(samples, 1.0 / samples)
    mu = None if mode_uniforms is None else np.broadcast_to(np.asarray(mode_uniforms, dtype=float), masks.shape)
    return float(prob @ t_comm_batch(masks, inst, modes, split, mu))
