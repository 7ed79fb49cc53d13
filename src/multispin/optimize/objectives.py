"""Objectives beyond the paper's sum goodput (docs/service.md): what the proactive draft lengths and,
for the energy objective, the reactive modes maximise.

Every objective scores the per-device goodputs of one round's plan γ on the SAA samples,
G_k = E[N_k] / E[T] with E[T] = T_comp(γ) + E[T_comm] (so Σ_k G_k is the paper's G):

- ``sum``: Σ_k G_k (the paper's; `optimize.plan` searches it, this module only scores it);
- ``proportional-fair``: Σ_k log G_k;
- ``max-min``: min_k G_k;
- ``energy``: (Σ_k E[N_k] − w·Σ_k E[J_k]) / E[T], the sum goodput less w (tokens per joule) times
  the devices' mean power (`system.energy`'s model: transmit / η_PA, receive, drafting, idle).

Structure. The reactive choice comes after verification, when every N_k is known: sum,
proportional-fair and max-min all increase as T_comm falls (each G_k shares the denominator), so
the T_comm-minimal modes (the paper's UL-prefix structure, `optimize.modes`) stay optimal for all
three. The energy objective also weighs the device joules of each mode: a UL correction costs the
device P^ul/η_PA over its airtime, a DL one only reception, so the UL prefix is no longer optimal
in general; its modes are searched exactly (all 2^|R| splits of each rejected set, |R| ≤
`EXACT_MAX_REJECTED`), by single flips from the T_comm-optimal modes above that. The ratio is
maximised by Dinkelbach's iteration: for a value λ, each sample's modes minimise
w·J(m) + λ·T(m), and λ is updated to the value until it is stable.

The draft lengths: every γ in the grid when it has at most `EXACT_MAX_PLANS` points (exact on the
samples), else a local search (γ_k ± 1 and γ_k = 0 moves, first improvement) from the given starts
(the sum optimum, all zeros).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from multispin.errors import ConfigError
from multispin.optimize.goodput import (
    Goodput,
    _row_keys,
    expected_tokens,
    outcomes,
    rejection_prob,
    t_comp_s,
)
from multispin.optimize.modes import dl_latency_s, equal_share_hz, optimal_modes_batch, ul_latency_s
from multispin.optimize.plan import Plan
from multispin.optimize.reactive import fixed_modes_latency_s, policy_ul_mask, t_comm_batch
from multispin.optimize.verification import all_coupled, as_standard, check_verify, choose_objective
from multispin.system.instance import Instance
from multispin.vocabulary import OBJECTIVES, ModeRule

EXACT_MAX_PLANS = 4096
EXACT_MAX_REJECTED = 10
_DINKELBACH_ITERATIONS = 20
_ONE_KEY_MAX_COLUMNS = 62  # `_row_keys` gives a row one int64 up to this many columns


def _distinct_rows(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(mask, axis=0, return_inverse=True)`` of a boolean matrix: the distinct rows in
    its order and each row's index among them, by one int key per row where the row fits one (its
    bits, first column highest, so the order is the same) at a fraction of sorting the rows."""
    if mask.shape[1] > _ONE_KEY_MAX_COLUMNS:
        rows, inverse = np.unique(mask, axis=0, return_inverse=True)
        return rows, inverse.reshape(-1)
    _, first, inverse = np.unique(_row_keys(mask[:, ::-1]), return_index=True, return_inverse=True)
    return mask[first], inverse.reshape(-1)


def check_objective(name: str) -> str:
    if name not in OBJECTIVES:
        raise ConfigError(f"objective: unknown value {name!r} (allowed: {', '.join(OBJECTIVES)})")
    return name


@dataclass(frozen=True)
class EnergyModel:
    """The devices' energy model and the objective's weight w (tokens per joule)."""

    pa_efficiency: float = 0.25
    rx_power_w: float = 1.0
    draft_power_w: float = 4.0
    idle_power_w: float = 0.2
    weight_tokens_per_j: float = 1.0

    @classmethod
    def of(cls, scenario) -> EnergyModel:
        e = scenario.energy
        return cls(
            e.pa_efficiency,
            e.rx_power_w,
            e.draft_power_w,
            e.idle_power_w,
            scenario.optimizer.energy_weight_tokens_per_j,
        )


def score(objective: str, device_goodput: np.ndarray) -> float:
    """The objective of per-device goodputs (not the energy objective, which needs joules)."""
    g = np.asarray(device_goodput, dtype=float)
    if objective == "sum":
        return float(g.sum())
    if objective == "proportional-fair":
        return float(np.sum(np.log(g))) if np.all(g > 0) else float("-inf")
    if objective == "max-min":
        return float(g.min())
    raise ConfigError(f"objective: {objective!r} is not scored from goodputs alone")


@dataclass(frozen=True)
class RoundScore:
    """One plan γ scored: the objective, the per-device goodputs and the round's parts."""

    value: float
    draft_len: np.ndarray
    device_goodput: np.ndarray  # (K,) G_k
    expected_tokens: np.ndarray  # (K,) E[N_k]
    t_comp_s: float
    e_t_comm_s: float
    e_energy_j: float  # Σ_k E[J_k] (energy objective; nan otherwise)

    @property
    def goodput(self) -> Goodput:
        n = float(self.expected_tokens.sum())
        return Goodput(
            n / (self.t_comp_s + self.e_t_comm_s),
            n,
            self.t_comp_s,
            self.e_t_comm_s,
            n / self.t_comp_s if self.t_comp_s > 0 else float("inf"),
        )


class ObjectiveSearch:
    """An objective on one round's instance and fixed SAA samples (common random numbers)."""

    def __init__(
        self,
        inst: Instance,
        uniforms: np.ndarray,
        objective: str,
        energy: EnergyModel | None = None,
        modes: ModeRule = "optimal",
        split: str = "equal",
        mode_uniforms: np.ndarray | None = None,
    ):
        self.inst, self.objective = inst, check_objective(objective)
        if objective == "energy" and split != "equal":
            raise ConfigError("split: the energy objective charges airtimes on the equal split only (got 'optimized')")
        self.u = np.asarray(uniforms, dtype=float)
        self.energy = energy or EnergyModel()
        self.modes, self.split, self.mode_u = modes, split, mode_uniforms
        self._mode_tables: dict[bytes, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._t_comm_of_set: dict[tuple[ModeRule, int], float] = {}  # (rule, `_row_keys` code) -> T_comm
        self.evaluations = 0

    def t_comm(self, rejected: np.ndarray, modes: ModeRule | None = None) -> np.ndarray:
        """T_comm of every outcome row (`t_comm_batch` under ``modes``, the search's by default).

        Under a deterministic mode rule a row's T_comm depends on its rejected set alone, and the
        samples of one γ and of its neighbours in the search repeat few sets: each set is solved
        once per search and looked up after, keyed as `SAAObjective.t_comm_rows` keys its sets
        (which remembers them across calls on the optimized split only). The random rule draws
        per sample, so it is solved afresh."""
        modes = self.modes if modes is None else modes
        if modes == "random" or self.inst.num_devices > _ONE_KEY_MAX_COLUMNS:
            return t_comm_batch(rejected, self.inst, modes, self.split, self.mode_u)
        mask = np.asarray(rejected, dtype=bool)
        codes, first, inverse = np.unique(_row_keys(mask), return_index=True, return_inverse=True)
        known = self._t_comm_of_set
        new = [i for i, c in enumerate(codes) if (modes, int(c)) not in known]
        if new:
            solved = t_comm_batch(mask[first[new]], self.inst, modes, self.split, self.mode_u)
            for i, t in zip(new, solved, strict=True):
                known[(modes, int(codes[i]))] = float(t)
        return np.array([known[(modes, int(c))] for c in codes])[inverse.reshape(-1)]

    # -- energy ---------------------------------------------------------------------------

    def fixed_energy_j(self, gamma: np.ndarray) -> float:
        """Σ_k of the joules that do not depend on the outcome: drafting and drafting uploads,
        less the idle power over those times (the idle term over the whole round is added apart)."""
        e, inst = self.energy, self.inst
        t_dft = gamma * inst.draft_latency_s
        t_up = gamma * (inst.token_latency_s - inst.draft_latency_s)
        return float(
            np.sum(e.draft_power_w * t_dft + inst.p_ul_w * t_up / e.pa_efficiency - e.idle_power_w * (t_dft + t_up))
        )

    def mode_table(self, row: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For one rejected set: candidate UL masks (C, K), each one's T_comm and outcome joules
        (the corrections' transmit or receive energy less idle power over their airtime)."""
        key = row.tobytes()
        if key in self._mode_tables:
            return self._mode_tables[key]
        inst = self.inst
        idx = np.flatnonzero(row)
        m = idx.size
        if m <= EXACT_MAX_REJECTED:
            codes = np.arange(2**m, dtype=np.int64)
            ul = np.zeros((codes.size, inst.num_devices), dtype=bool)
            ul[:, idx] = ((codes[:, None] >> np.arange(m)[None, :]) & 1).astype(bool)
        else:  # the T_comm-optimal modes and every single flip of them
            is_ul = optimal_modes_batch(row[None, :], inst, return_modes=True).is_ul
            assert is_ul is not None  # asked for with return_modes
            best = is_ul[0]
            ul = np.repeat(best[None, :], m + 1, axis=0)
            ul[np.arange(1, m + 1), idx] ^= True
        t, j = self._outcome(row, ul)
        self._mode_tables[key] = (ul, t, j)
        return ul, t, j

    def _outcome(self, row: np.ndarray, ul: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """T_comm and outcome joules of each candidate UL mask (C, K) for one rejected set (equal split)."""
        inst, e = self.inst, self.energy
        if not row.any():
            return np.zeros(ul.shape[0]), np.zeros(ul.shape[0])
        rows = np.broadcast_to(row, ul.shape)
        t = fixed_modes_latency_s(rows, ul, inst)
        bw = float(equal_share_hz(row[None, :], inst.radio.bandwidth_hz)[0])
        tau_ul = ul_latency_s(inst, bw)
        dl = rows & ~ul
        tau_dl = np.where(dl.any(axis=1), dl_latency_s(dl, inst, np.full(ul.shape[0], bw)), 0.0)
        j = (
            np.sum(np.where(ul & rows, (inst.p_ul_w / e.pa_efficiency - e.idle_power_w) * tau_ul, 0.0), axis=1)
            + dl.sum(axis=1) * (e.rx_power_w - e.idle_power_w) * tau_dl
        )
        return t, j

    def energy_modes(self, row: np.ndarray, lam: float) -> tuple[np.ndarray, float, float]:
        """The UL mask of one rejected set that minimises w·J + (λ + w·K·P_idle)·T_comm, with its
        T_comm and outcome joules."""
        ul, t, j = self.mode_table(row)
        e = self.energy
        w = e.weight_tokens_per_j
        i = int(np.argmin(w * j + (lam + w * self.inst.num_devices * e.idle_power_w) * t))
        return ul[i], float(t[i]), float(j[i])

    # -- scoring --------------------------------------------------------------------------

    def evaluate(self, gamma) -> RoundScore:
        gamma = np.asarray(gamma, dtype=np.int64)
        self.evaluations += 1
        inst = self.inst
        n_k = expected_tokens(inst, gamma)
        tc = float(t_comp_s(inst, gamma))
        rej = outcomes(inst, gamma, self.u)
        if self.objective != "energy" or self.modes != "optimal" or self.split != "equal":
            tcomm = self.t_comm(rej)
            et = float(np.mean(tcomm))
            g = n_k / (tc + et)
            if self.objective != "energy":
                return RoundScore(score(self.objective, g), gamma, g, n_k, tc, et, float("nan"))
            return self._policy_modes_energy(gamma, n_k, tc, rej, tcomm)
        keys, inverse = _distinct_rows(rej)
        weights = np.bincount(inverse, minlength=keys.shape[0]) / rej.shape[0]
        lam = float(np.sum(n_k)) / (tc + float(np.mean(self.t_comm(rej, "optimal"))))  # the sum goodput
        best = None
        for _ in range(_DINKELBACH_ITERATIONS):
            picks = [self.energy_modes(k, lam) for k in keys]
            t = np.array([p[1] for p in picks])
            j = np.array([p[2] for p in picks])
            s = self._energy_score(gamma, n_k, tc, t, j, weights)
            best = s if best is None or s.value > best.value else best
            if abs(s.value - lam) <= 1e-12 * max(1.0, abs(lam)):
                break
            lam = s.value
        assert best is not None  # at least one iteration ran
        return best

    def _policy_modes_energy(self, gamma, n_k, tc, rej, tcomm) -> RoundScore:
        """The energy objective at γ with the modes the policy picks (the T_comm-optimal ones for
        "optimal"), and their joules."""

        inst = self.inst
        ul = (
            optimal_modes_batch(rej, inst, return_modes=True).is_ul
            if self.modes == "optimal"
            else policy_ul_mask(rej, self.modes, self.mode_u)
        )
        assert ul is not None  # asked for with return_modes
        # the joules of each distinct (rejected set, modes) once: samples repeat few of them, and
        # each sample's value is the same computation, so the score is unchanged
        keys, inverse = _distinct_rows(np.concatenate([rej, ul], axis=1))
        k = inst.num_devices
        per_key = np.array([self._outcome(key[:k], key[None, k:])[1][0] for key in keys])
        j = per_key[inverse]
        return self._energy_score(gamma, n_k, tc, tcomm, j)

    def policy_modes_score(self, gamma) -> RoundScore:
        """γ scored with the policy's own modes (T_comm-optimal for "optimal", never the energy
        objective's mode search) and their joules (``e_energy_j``): what a plan of the sum,
        proportional-fair or max-min objective costs the devices (`experiments.sweep`)."""
        gamma = np.asarray(gamma, dtype=np.int64)
        inst = self.inst
        rej = outcomes(inst, gamma, self.u)
        tcomm = self.t_comm(rej)
        return self._policy_modes_energy(gamma, expected_tokens(inst, gamma), float(t_comp_s(inst, gamma)), rej, tcomm)

    def _energy_score(self, gamma, n_k, tc, t, j, weights=None) -> RoundScore:
        e = self.energy
        w = np.full(len(t), 1.0 / len(t)) if weights is None else weights
        et = float(np.dot(w, t))
        ej = self.fixed_energy_j(gamma) + float(np.dot(w, j)) + self.inst.num_devices * e.idle_power_w * (tc + et)
        value = (float(np.sum(n_k)) - e.weight_tokens_per_j * ej) / (tc + et)
        return RoundScore(value, gamma, n_k / (tc + et), n_k, tc, et, ej)

    # -- search ---------------------------------------------------------------------------

    def caps(self) -> np.ndarray:
        inst = self.inst
        g = inst.gamma_max
        return np.full(inst.num_devices, g) if inst.gamma_cap is None else np.asarray(inst.gamma_cap)

    def search(self, starts=(), exact: bool | None = None) -> tuple[RoundScore, bool]:
        """The best γ: exhaustive over the grid when it is small enough (or ``exact``), else a
        local search from ``starts`` and all zeros. Returns (its score, whether it was exhaustive)."""
        caps = self.caps()
        size = float(np.prod(caps.astype(float) + 1))
        if exact is None:
            exact = size <= EXACT_MAX_PLANS
        if exact:
            best = None
            for gamma in itertools.product(*(range(int(c) + 1) for c in caps)):
                s = self.evaluate(np.array(gamma))
                if best is None or s.value > best.value:
                    best = s
            assert best is not None  # the grid holds γ = 0
            return best, True
        best = None
        for start in [np.zeros(len(caps), dtype=np.int64), *[np.minimum(np.asarray(s), caps) for s in starts]]:
            s = self._local(np.asarray(start, dtype=np.int64), caps)
            if best is None or s.value > best.value:
                best = s
        assert best is not None  # all zeros is always a start
        return best, False

    def _local(self, gamma: np.ndarray, caps: np.ndarray) -> RoundScore:
        cur = self.evaluate(gamma)
        improved = True
        while improved:
            improved = False
            for k in range(len(gamma)):
                for v in {cur.draft_len[k] - 1, cur.draft_len[k] + 1, 0}:
                    if v < 0 or v > caps[k] or v == cur.draft_len[k]:
                        continue
                    g = cur.draft_len.copy()
                    g[k] = v
                    s = self.evaluate(g)
                    if s.value > cur.value + 1e-12 * max(1.0, abs(cur.value)):
                        cur, improved = s, True
        return cur


def plan_objective(
    inst: Instance,
    objective: str,
    *,
    uniforms: np.ndarray,
    energy: EnergyModel | None = None,
    modes: ModeRule = "optimal",
    split: str = "equal",
    mode_uniforms=None,
    starts=(),
    exact: bool | None = None,
    verify: str = "standard",
):
    """(an `optimize.plan.Plan` whose γ maximises ``objective`` on the samples, its `RoundScore`, the
    `ObjectiveSearch`, which picks the energy objective's modes after verification). The plan's
    ``goodput`` is the sum goodput at that γ; its ``policy`` names the objective and the search.
    ``verify``: as `optimize.plan.plan`'s (``choose``: `optimize.verification.choose_objective`)."""

    check_verify(verify)
    if verify == "choose" and inst.coupled_available:
        template = ObjectiveSearch(as_standard(inst), uniforms, objective, energy, modes, split, mode_uniforms)
        mask, best, _ = choose_objective(inst, template, starts, exact)
        inst = inst.with_coupled(mask)
        search = ObjectiveSearch(inst, uniforms, objective, energy, modes, split, mode_uniforms)
        search._mode_tables = template._mode_tables
        was_exact, how = False, "choose"
    else:
        inst = all_coupled(inst) if verify == "coupled" else as_standard(inst)
        search = ObjectiveSearch(inst, uniforms, objective, energy, modes, split, mode_uniforms)
        best, was_exact = search.search(starts, exact)
        how = "exact" if was_exact else "local"
    draft_len = inst.capped(best.draft_len)
    if not np.array_equal(draft_len, best.draft_len):
        best = search.evaluate(draft_len)
    plan = Plan(
        draft_len,
        best.goodput,
        f"{objective}:{how}",
        modes,
        split,
        expected_tokens(inst, draft_len),
        rejection_prob(inst, draft_len),
        coupled=inst.coupled_mask.copy(),
    )
    return plan, best, search
