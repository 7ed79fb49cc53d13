"""Proactive draft lengths (SYSTEM_MODEL.md §5.2, §5.3): greedy, best uniform, computation-only, oracle.

All policies maximise (or, for computation-only, ignore communication in) the SAA goodput of one
:class:`~multispin.optimize.goodput.SAAObjective`, so they are compared on the same samples.

- :func:`two_phase_greedy`, ``start="zero"``: the paper's procedure. From γ = 0, phase 1 raises
  every device by one while G improves; phase 2 repeatedly raises the single device whose +1
  improves G most, until none does.
- :func:`two_phase_greedy`, ``start="multi"`` (**the shipped default**): a local search with
  single-device ±1 moves (best move first, while G improves) run from three starts (the paper's
  phase-1 point, the exhaustive best uniform γ, the computation-only γ); the best result is kept.
  Every move must raise G, so the result is never below the best uniform γ, computation-only
  control or the paper's greedy on its samples. Why not the paper's greedy alone: its phase 1
  raises every device together and its phase 2 never lowers a γ_k, so a device whose rejections
  are expensive (a deep fade: seconds of transfer against a ~0.4 s round) drags everyone down
  (measured: 2.4× lower goodput in such a case, and up to 33% below the exhaustive optimum on
  small instances); it also ends below computation-only control in some drops (K = 200), and
  can in principle end below the best uniform γ when G over uniform γ is not unimodal (not
  observed). A warm start (an array of K draft lengths) runs the ±1 search from a given plan.
- :func:`best_uniform`: one γ for everybody, exhaustive over 0..γ_max.
- :func:`computation_only`: the γ that maximises G_max (communication treated as free), found
  exactly, then evaluated with the real communication.
- :func:`exhaustive_oracle`: every γ vector in {0..γ_max}^K (small K): the optimum of the SAA
  objective, against which the greedy's gap is measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from multispin.errors import ConfigError
from multispin.optimize.goodput import Goodput, SAAObjective, pattern_table
from multispin.system.instance import Instance

_REL_IMPROVEMENT = 1e-12  # a move must raise G by more than this (relative) to be taken


@dataclass(frozen=True)
class DraftPlan:
    """Draft lengths chosen by a policy, with the goodput they reach on the SAA samples."""

    draft_len: np.ndarray
    goodput: Goodput
    policy: str
    evaluations: int = 0
    trace: list = field(default_factory=list, repr=False)

    @property
    def goodput_tokens_per_s(self) -> float:
        return self.goodput.goodput_tokens_per_s


def best_uniform(obj: SAAObjective) -> DraftPlan:
    """The best single γ for all devices, exhaustive over 0..γ_max (first maximum on ties)."""
    inst = obj.inst
    best_g, best = 0, None
    for g in range(inst.gamma_max + 1):
        res = obj.evaluate(g)
        if best is None or res.goodput_tokens_per_s > best.goodput_tokens_per_s:
            best_g, best = g, res
    return DraftPlan(np.full(inst.num_devices, best_g, dtype=np.int64), best, "best_uniform", inst.gamma_max + 1)


def _phase2(obj: SAAObjective, gamma: np.ndarray, current: Goodput, evaluations: int, trace: list,
            moves: tuple[int, ...] = (1,)):
    """Repeatedly take the best single-device move in ``moves`` (+1, and −1 if listed) while G improves."""
    g = gamma.copy()
    t_cur = obj.t_comm_samples(g)
    cur = current.goodput_tokens_per_s
    while True:
        best_val, best = -np.inf, None
        for delta in moves:
            values, changes = obj.step_values(g, t_cur, delta)
            evaluations += int(np.sum(np.isfinite(values)))
            k = int(np.argmax(values))
            if values[k] > best_val:
                best_val, best = float(values[k]), (delta, k, changes)
        if best is None or not best_val > cur * (1 + _REL_IMPROVEMENT):
            break
        delta, k, (cand, rows, t_new) = best
        g[k] += delta
        sel = cand == k
        t_cur[rows[sel]] = t_new[sel]
        cur = best_val
        trace.append(("move", k, delta, cur))
    return g, evaluations


def _paper_phase1(obj: SAAObjective, trace: list):
    inst = obj.inst
    g = np.zeros(inst.num_devices, dtype=np.int64)
    cur = obj.evaluate(g)
    evaluations = 1
    while np.any(g < inst.gamma_max):
        nxt = np.minimum(g + 1, inst.gamma_max)
        res = obj.evaluate(nxt)
        evaluations += 1
        if not res.goodput_tokens_per_s > cur.goodput_tokens_per_s * (1 + _REL_IMPROVEMENT):
            break
        g, cur = nxt, res
        trace.append(("phase1", int(g.max()), cur.goodput_tokens_per_s))
    return g, cur, evaluations


GREEDY_STARTS = ("multi", "zero", "best_uniform", "computation_only")


def two_phase_greedy(obj: SAAObjective, start="multi", moves: str | None = None) -> DraftPlan:
    """Two-phase greedy on G(γ): a start point, then single-device moves while G improves.

    ``start``:

    - ``"zero"``: the paper's procedure (phase 1 = uniform +1 steps from γ = 0 while G improves;
      phase 2 = best single-device +1 while G improves);
    - ``"best_uniform"``: the exhaustive best uniform γ, then phase 2;
    - ``"computation_only"``: the γ maximising G_max, then phase 2;
    - ``"multi"`` (default, the shipped policy): phase 2 with ±1 moves from each of the three
      starts above, best result kept;
    - an array of K draft lengths: a warm start (±1 moves unless ``moves="plus"``), e.g. last
      round's plan when re-planning every round, or the equal-split plan when switching objective.

    ``moves``: ``"plus"`` (the paper's phase 2: +1 only) or ``"both"`` (+1 and −1: a device whose
    channel makes its rejections expensive can be lowered again). Defaults: ``"plus"`` for a single
    start, ``"both"`` for ``"multi"``.

    The shipped policy is never below the best uniform γ, computation-only control or the paper's
    greedy on its own samples (every move must raise G). The paper's greedy alone can end below
    computation-only control (seen at K = 200) and far below the optimum when one device's
    rejections are expensive, because +1 moves never lower a γ_k; see the module doc. The tests
    and benchmarks measure how often.
    """
    if not isinstance(start, str):  # warm start from a given γ (e.g. last round's plan)
        g0 = np.asarray(start)
        inst = obj.inst
        if g0.shape != (inst.num_devices,) or np.any(g0 < 0) or np.any(g0 > inst.gamma_max):
            raise ConfigError(f"start: a warm start needs {inst.num_devices} draft lengths in [0, {inst.gamma_max}]")
        g0 = g0.astype(np.int64)
        trace: list = [("warm", None, None)]
        g, evaluations = _phase2(obj, g0, obj.evaluate(g0), 1, trace, (1,) if moves == "plus" else (1, -1))
        return DraftPlan(g, obj.evaluate(g), "greedy_warm", evaluations, trace)
    if start not in GREEDY_STARTS:
        raise ConfigError(f"start: unknown value {start!r} (allowed: {', '.join(GREEDY_STARTS)})")
    if moves is None:
        moves = "both" if start == "multi" else "plus"
    if moves not in ("plus", "both"):
        raise ConfigError(f"moves: unknown value {moves!r} (allowed: plus, both)")
    if start == "multi":
        plans = [two_phase_greedy(obj, s, moves) for s in GREEDY_STARTS[1:]]
        best = max(plans, key=lambda p: p.goodput_tokens_per_s)
        return DraftPlan(best.draft_len, best.goodput, "greedy", sum(p.evaluations for p in plans),
                         [(p.policy, p.goodput_tokens_per_s) for p in plans] + best.trace)
    deltas = (1,) if moves == "plus" else (1, -1)
    trace: list = []
    if start == "zero":
        g, cur, evaluations = _paper_phase1(obj, trace)
        policy = "greedy_paper" if moves == "plus" else "greedy_from_zero"
    elif start == "best_uniform":
        bu = best_uniform(obj)
        g, cur, evaluations = bu.draft_len.copy(), bu.goodput, bu.evaluations
        trace.append(("uniform", int(g[0]), cur.goodput_tokens_per_s))
        policy = "greedy_from_uniform"
    else:
        co = computation_only(obj)
        g, cur, evaluations = co.draft_len.copy(), co.goodput, co.evaluations
        trace.append(("computation_only", None, cur.goodput_tokens_per_s))
        policy = "greedy_from_computation_only"
    g, evaluations = _phase2(obj, g, cur, evaluations, trace, deltas)
    return DraftPlan(g, obj.evaluate(g), policy, evaluations, trace)


def paper_greedy(obj: SAAObjective) -> DraftPlan:
    """The paper's two-phase greedy exactly (from γ = 0, +1 moves only)."""
    return two_phase_greedy(obj, start="zero", moves="plus")


def max_g_max(inst: Instance, chunk: int = 256) -> np.ndarray:
    """The γ that maximises G_max = Σ E[N_k] / T_comp exactly.

    For every cap τ on the drafting time (all values γ·T_k^dft), each device may draft up to
    ⌊τ/T_k⌋ tokens. With T_ver^tok = 0 it drafts exactly that many (E[N_k] grows with γ_k);
    otherwise max Σ E_k(γ_k) / (τ + c + T_ver^tok·Σ(γ_k + 1)) is a fractional program separable
    per device, solved by Dinkelbach's iteration. The best cap wins.
    """
    k, gmax = inst.num_devices, inst.gamma_max
    t = inst.token_latency_s
    c = inst.compute
    base = c.t_ver0_s + k * c.t_ver1_s + c.t_ver_tok_s * k
    grid = np.arange(gmax + 1)
    e = inst.expected_tokens  # (K, gmax+1)
    rows = np.arange(k)[None, :]
    caps = np.unique((grid[None, :] * t[:, None]).ravel())
    best_val, best_g = -np.inf, np.zeros(k, dtype=np.int64)
    for start in range(0, caps.size, chunk):
        tau = caps[start:start + chunk, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            limit = np.where(t[None, :] > 0, np.floor(tau / t[None, :] * (1 + 1e-12)), gmax)
        limit = np.minimum(limit, gmax).astype(np.int64)  # (C, K)
        g = limit
        if c.t_ver_tok_s > 0:
            allowed = grid[None, None, :] <= limit[:, :, None]
            lam = np.zeros(limit.shape[0])
            for _ in range(100):
                score = np.where(allowed, e[None] - lam[:, None, None] * c.t_ver_tok_s * grid, -np.inf)
                g = np.argmax(score, axis=2)
                new = e[rows, g].sum(axis=1) / (np.max(g * t, axis=1) + base + c.t_ver_tok_s * g.sum(axis=1))
                if np.all(np.abs(new - lam) <= 1e-15 * np.maximum(new, 1.0)):
                    break
                lam = new
        val = e[rows, g].sum(axis=1) / (np.max(g * t, axis=1) + base + c.t_ver_tok_s * g.sum(axis=1))
        i = int(np.argmax(val))
        if val[i] > best_val * (1 + _REL_IMPROVEMENT):
            best_val, best_g = float(val[i]), g[i].astype(np.int64)
    return best_g


def computation_only(obj: SAAObjective) -> DraftPlan:
    """γ chosen as if communication were free (max G_max), evaluated with the real T_comm."""
    g = max_g_max(obj.inst)
    return DraftPlan(g, obj.evaluate(g), "computation_only", 1)


def exhaustive_oracle(obj: SAAObjective, max_vectors: int = 2_000_000, chunk: int = 512) -> DraftPlan:
    """The SAA optimum over every γ vector in {0..γ_max}^K (small K; mode policy must be
    deterministic: optimal, all_ul or all_dl)."""
    inst = obj.inst
    k, gmax = inst.num_devices, inst.gamma_max
    total = (gmax + 1) ** k
    if total > max_vectors:
        raise ConfigError(f"devices: (γ_max+1)^K = {total} vectors exceed the oracle's limit {max_vectors}")
    table = pattern_table(inst, obj.modes, obj.split)
    u = obj.uniforms
    weights = (1 << np.arange(k)).astype(np.int64)
    from multispin.optimize.goodput import t_comp_s

    best_val, best_g = -np.inf, None
    idx = np.arange(total, dtype=np.int64)
    for start in range(0, total, chunk):
        ids = idx[start:start + chunk]
        gs = (ids[:, None] // ((gmax + 1) ** np.arange(k))[None, :]) % (gmax + 1)  # (C, K)
        thr = inst.survival[np.arange(k)[None, :], gs]  # (C, K)
        codes = ((u[None, :, :] > thr[:, None, :]) * weights).sum(axis=2)  # (C, N)
        ecomm = table[codes].mean(axis=1)
        num = inst.expected_tokens[np.arange(k)[None, :], gs].sum(axis=1)
        vals = num / (t_comp_s(inst, gs) + ecomm)
        i = int(np.argmax(vals))
        if vals[i] > best_val:
            best_val, best_g = float(vals[i]), gs[i].copy()
    return DraftPlan(best_g, obj.evaluate(best_g), "exhaustive_oracle", total)
