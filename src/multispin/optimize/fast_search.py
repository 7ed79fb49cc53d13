"""The per-round planner: draft lengths within a fraction of the round they plan (policy ``fast``).

`local_search` (the ``greedy`` policy) climbs from nine starts, mostly one device at a time, and
takes 0.3–0.5 s at K = 20 and seconds at K = 50 on one core: longer than the round it plans. This
search reaches the same plans (tests: within 0.5% of it on ≥ 99% of drops, never below a baseline)
with far fewer T_comm solves and far fewer Python-level steps:

- **Coarse climbs on a subsample** (common random numbers: the first rows of the same uniforms),
  each step vectorised over every device and every length at once (`IncrementalSAA.line_table`:
  one bincount gives G for all K·(γ_max + 1) single-device moves). A step takes the best
  single-device move, or all improving devices' best lengths at once when that is better; where no
  single move helps, joint ±1 shifts of the drafting devices or idle devices switched on together.
  A climb that reaches a point an earlier one passed through stops.
- **Few starts**: the two best uniform γ's on the subsample, computation-only, computation-only
  with the weakest 25/50/75% of the drafting devices off, the best two of "the m devices with the
  cheapest rejections at one length" (m on a geometric grid), any ``extra_starts``; only the best
  ``climbs`` (3) of them on the subsample are climbed.
- **A second climb on a larger subsample** (about 5,000 / K samples) from the best point on all
  samples, then a **polish on all samples**: the best single-device ±1 move while one raises
  G, then joint ±1/±2 shifts of the drafting devices; each move re-solves only the samples whose
  outcome changes.
- **Flipped outcomes in closed form** (`multispin.optimize.flips`, where it covers the objective):
  the climbs' line tables and the polish's ±1 moves are ranked by them (O(log K) per flip instead
  of a K-wide solve); every move taken is re-solved by the solver, so each G compared or reported
  is the solver's.
- **Whole sets solved without the entry point's overhead** (`multispin.optimize.flips.FlipSolver.solve`
  via `multispin.optimize.incremental.t_comm_of`: the solver's values bit for bit); subsample
  states take T_comm* and sample levels from the full-sample state's first rows.
- **Warm start** (``warm_start``, last round's plan): polished on all samples and taken only where
  it ends strictly higher than the search, so on an unchanged round the plan is the cold start's.
- **Anytime**: with ``deadline_s`` every phase stops at the first check past it and the best plan
  evaluated on all samples so far is returned (computation-only, evaluated first, at the least).

Sizes are in rows: a climb step on n samples re-solves up to n·K flipped outcomes, so the
subsamples shrink as 1/K (1,250/K and 5,000/K samples, at least 62). The paper's greedy is not run
(its +1 climb alone costs about as much as this whole search) and the best uniform γ is found among
the subsample's two best: the tests check on 200 drops that the plan is never below either.
"""

from __future__ import annotations

import time

import numpy as np

from multispin.optimize.draft_lengths import (
    _GROUP_FRACTIONS,
    _REL_IMPROVEMENT,
    DraftPlan,
    _check_gamma,
    _switched_off,
    _switched_on,
    _weakness_orders,
    max_g_max,
)
from multispin.optimize.flips import closed_form_applies, solver_for
from multispin.optimize.goodput import SAAObjective, _goodput, t_comp_s
from multispin.optimize.incremental import IncrementalSAA, head, sample_levels, t_comm_of, t_comp_unchecked

# Subsample sizes: a climb step re-solves up to (samples × K) flipped outcomes, so the sizes scale
# as 1/K (each clipped to [_MIN_SAMPLES, N_SAA]): the coarse climbs from every start, then the
# best point climbed again on a larger subsample.
_COARSE_ROWS = 1250
_MID_ROWS = 5000
_MIN_SAMPLES = 62
_CLIMBS = 3
_POLISH_SHIFTS = (1, -1, 2, -2)
_UNIFORM_CANDIDATES = 2  # uniform γ's (best on the subsample) judged on all samples


class _Deadline:
    """``passed()`` once ``limit_s`` CPU seconds have gone since construction (never with None)."""

    def __init__(self, limit_s: float | None, clock=time.process_time):
        self.clock, self.limit = clock, limit_s
        self.start = clock()

    def passed(self) -> bool:
        return self.limit is not None and self.clock() - self.start >= self.limit


def _unique_rows(a: np.ndarray) -> np.ndarray:
    """``np.unique(a, axis=0)`` (the distinct rows, in lexicographic order) at a fraction of its
    cost on a few short rows."""
    s = a[np.lexsort(a.T[::-1])]
    keep = np.ones(s.shape[0], dtype=bool)
    keep[1:] = np.any(s[1:] != s[:-1], axis=1)
    return s[keep]


def _climb(state: IncrementalSAA, deadline: _Deadline, visited: set | None = None, orders=None) -> float | None:
    """Steepest ascent over single-device moves (all evaluated at once), joint moves of every
    improving device, and joint ±1 shifts of the drafting devices; until none raises G or the
    deadline passes. ``visited``: points earlier climbs passed through; a climb that reaches one
    stops there and returns None (that climb went on from it, only upwards). ``orders``: the
    instance's `_weakness_orders`, where the caller has them."""
    inst = state.inst
    gmax = inst.gamma_max
    cur = state.value()
    visited = set() if visited is None else visited
    orders = _weakness_orders(inst) if orders is None else orders
    while not deadline.passed():
        key = state.gamma.tobytes()
        if key in visited:
            return None
        visited.add(key)
        table = state.line_table()  # (K, γ_max + 1)
        best = np.argmax(table, axis=1)
        gains = table[np.arange(inst.num_devices), best]
        improving = (gains > cur * (1 + _REL_IMPROVEMENT)) & (best != state.gamma)
        if np.count_nonzero(improving) > 1:
            joint = np.where(improving, best, state.gamma)
            vals, changes = state.candidate_values(joint[None, :])
            if vals[0] > gains.max():
                state.move_to(changes, 0)
                cur = state.value()
                continue
        if improving.any():
            k = int(np.argmax(np.where(improving, gains, -np.inf)))
            state.set_device(k, int(best[k]))
            cur = state.value()
            continue
        drafting = state.gamma > 0
        shifted = [np.where(drafting, np.clip(state.gamma + d, 0, gmax), state.gamma) for d in (1, -1)]
        # escapes: joint ±1 shifts, and idle devices switched on at the drafting devices' mean length
        # (one switched on alone raises T_comp; several with everyone one longer can pay)
        switched = [g for order in orders for g in _switched_on(state.gamma, order)]
        cands = _unique_rows(np.asarray(shifted + switched + [np.clip(state.gamma + d, 0, gmax) for d in (1, -1)]))
        cands = cands[np.any(cands != state.gamma[None, :], axis=1)]
        if cands.shape[0] == 0:
            break
        vals, changes = state.candidate_values(cands)
        i = int(np.argmax(vals))
        if not vals[i] > cur * (1 + _REL_IMPROVEMENT):
            break
        state.move_to(changes, i)
        cur = state.value()
    return cur


class _ClosedFormSteps:
    """G after each single-device ±1 move, from `multispin.optimize.flips` (only the samples whose
    outcome changes: level = γ_k for +1, γ_k − 1 for −1), to rank the moves. Flipped values are
    kept per (sample, device) and recomputed only where a move changed the sample's outcome."""

    def __init__(self, obj: SAAObjective):
        self.obj, self.inst = obj, obj.inst
        flipper = solver_for(obj)
        assert flipper is not None, "the closed form must cover the objective (closed_form_applies)"
        self.flipper = flipper
        self.levels = sample_levels(obj)
        self.flip = np.zeros(self.levels.shape)
        self.valid = np.zeros(self.levels.shape, dtype=bool)
        self.rejected: np.ndarray | None = None
        # the samples at each (device, level), ascending, one run per pair: a step's samples are
        # read off in O(changed) instead of comparing every (sample, device)
        n, k = self.levels.shape
        keys = (np.arange(k)[:, None] * (self.inst.gamma_max + 1) + self.levels.T).ravel()
        small = keys.astype(np.int16) if k * (self.inst.gamma_max + 1) <= np.iinfo(np.int16).max else keys
        self._by_level = np.argsort(small, kind="stable") % n  # 16-bit keys: numpy's radix sort
        self._run_end = np.cumsum(np.bincount(keys, minlength=k * (self.inst.gamma_max + 1)))

    def _samples_at(self, devices: np.ndarray, levels: np.ndarray):
        """(rows, cols): the samples whose level of device ``devices[i]`` is ``levels[i]``, device
        by device in the order given, each device's samples ascending."""
        key = devices * (self.inst.gamma_max + 1) + levels
        end = self._run_end[key]
        size = end - np.where(key > 0, self._run_end[key - 1], 0)
        offset = np.repeat(end - size - np.cumsum(size) + size, size)
        return self._by_level[offset + np.arange(offset.size)], np.repeat(devices, size)

    def moved(self, g: np.ndarray, rows: np.ndarray) -> None:
        """The samples ``rows`` changed outcome (γ is now ``g``): their flipped values are stale."""
        self.valid[rows] = False
        self.rejected = g[None, :] > self.levels

    def values(self, g: np.ndarray, t_cur: np.ndarray) -> np.ndarray:
        """(2, K): G after +1 (row 0) and −1 (row 1) of each device; −inf where it cannot move."""
        inst, k = self.inst, g.size
        if self.rejected is None:
            self.rejected = g[None, :] > self.levels
        movable = [g < inst.gamma_max, g > 0]
        need = [self._samples_at(np.flatnonzero(mv), g[mv] + min(d, 0)) for d, mv in zip((1, -1), movable)]
        rows, cols = (np.concatenate([need[0][i], need[1][i]]) for i in (0, 1))
        stale = ~self.valid[rows, cols]
        rows, cols = rows[stale], cols[stale]
        self.flip[rows, cols] = self.flipper(self.rejected, rows, cols)
        self.valid[rows, cols] = True
        num = float(inst.expected_tokens[np.arange(k), g].sum())
        e = inst.expected_tokens
        out = np.full((2, k), -np.inf)
        for i, delta in enumerate((1, -1)):
            r, c = need[i]  # per device, its samples ascending: the sums run in the order they ran
            dsum = np.bincount(c, weights=self.flip[r, c] - t_cur[r], minlength=k)
            gg = np.broadcast_to(g, (k, k)).copy()
            gg[np.arange(k), np.arange(k)] += delta
            gg = np.clip(gg, 0, inst.gamma_max)
            dnum = e[np.arange(k), np.clip(g + delta, 0, inst.gamma_max)] - e[np.arange(k), g]
            vals = (num + dnum) / (t_comp_unchecked(inst, gg) + (t_cur.sum() + dsum) / t_cur.size)
            out[i] = np.where(movable[i], vals, -np.inf)
        return out


def _polish(obj: SAAObjective, gamma: np.ndarray, t_cur: np.ndarray, deadline: _Deadline):
    """On every sample: the best single-device ±1 move while one raises G, then a joint shift of
    every drafting device by ±1 or ±2 (T_comp is set by the slowest drafter, so a lone +1 often
    cannot pay), and again, until neither raises G or the deadline passes. Each move re-solves only
    the samples whose outcome changes. ``t_cur``: the samples' T_comm* at ``gamma``. Returns
    (γ, G, T_comm* per sample).

    Where `multispin.optimize.flips` covers the objective, the ±1 moves are ranked by its values
    and the chosen one re-solved by the solver (taken only if that raises G): G and T_comm* stay
    the solver's."""
    inst = obj.inst
    g, t_cur = gamma.copy(), t_cur.copy()
    cur = inst.expected_tokens[np.arange(g.size), g].sum() / (float(t_comp_unchecked(inst, g)) + t_cur.mean())
    steps = _ClosedFormSteps(obj) if closed_form_applies(obj) else None
    while not deadline.passed():
        moved = _closed_form_move(obj, steps, g, t_cur, cur) if steps is not None else _solver_move(obj, g, t_cur, cur)
        if moved is None:
            moved = _joint_shift(obj, steps, g, t_cur, cur, deadline)
        if moved is None:
            break
        g, t_cur, cur = moved
    return g, float(cur), t_cur


# a polish move: the new γ, its samples' T_comm* and its G (None: no move raises G)
_Move = tuple[np.ndarray, np.ndarray, float] | None


def _closed_form_move(
    obj: SAAObjective, steps: _ClosedFormSteps, g: np.ndarray, t_cur: np.ndarray, cur: float
) -> _Move:
    """The best single-device ±1 move by the closed-form values, re-solved by the solver on the
    samples whose outcome it changes; taken where that raises G."""
    inst = obj.inst
    table = steps.values(g, t_cur)
    i, k = (int(x) for x in np.unravel_index(int(np.argmax(table)), table.shape))
    if not table[i, k] > cur * (1 + _REL_IMPROVEMENT):
        return None
    delta = 1 if i == 0 else -1
    rows = np.flatnonzero(steps.levels[:, k] == g[k] + min(delta, 0))
    new_g = g.copy()
    new_g[k] += delta
    t_new = t_cur.copy()
    t_new[rows] = t_comm_of(obj, new_g[None, :] > steps.levels[rows], rows)
    val = float(
        inst.expected_tokens[np.arange(g.size), new_g].sum() / (float(t_comp_unchecked(inst, new_g)) + t_new.mean())
    )
    if not val > cur * (1 + _REL_IMPROVEMENT):
        return None
    steps.moved(new_g, rows)
    return new_g, t_new, val


def _solver_move(obj: SAAObjective, g: np.ndarray, t_cur: np.ndarray, cur: float) -> _Move:
    """The best single-device ±1 move by the solver's values (`SAAObjective.step_values`), taken
    where it raises G (``g`` and ``t_cur`` are updated in place)."""
    best_val, best = -np.inf, None
    for delta in (1, -1):
        values, changes = obj.step_values(g, t_cur, delta)
        k = int(np.argmax(values))
        if values[k] > best_val:
            best_val, best = float(values[k]), (delta, k, changes)
    if best is None or not best_val > cur * (1 + _REL_IMPROVEMENT):
        return None
    delta, k, (cand, rows, t_new) = best
    g[k] += delta
    sel = cand == k
    t_cur[rows[sel]] = t_new[sel]
    return g, t_cur, best_val


def _joint_shift(
    obj: SAAObjective, steps: _ClosedFormSteps | None, g: np.ndarray, t_cur: np.ndarray, cur: float, deadline: _Deadline
) -> _Move:
    """Every drafting device shifted together by one of `_POLISH_SHIFTS`, the best shift taken
    where it raises G."""
    drafting = g > 0
    shifts = [np.where(drafting, np.clip(g + d, 0, obj.inst.gamma_max), g) for d in _POLISH_SHIFTS]
    shifts = [c for c in shifts if not np.array_equal(c, g)]
    if not shifts or deadline.passed():
        return None
    state = IncrementalSAA(obj, g, t_comm=t_cur)
    vals, changes = state.candidate_values(np.asarray(shifts))
    i = int(np.argmax(vals))
    if not vals[i] > cur * (1 + _REL_IMPROVEMENT):
        return None
    state.move_to(changes, i)
    if steps is not None:
        steps.moved(state.gamma, changes[2][changes[1] == i])
    return state.gamma.copy(), state.t_comm, float(vals[i])


def _group_starts(obj: SAAObjective, orders, count: int = 2) -> dict[str, np.ndarray]:
    """The best ``count`` points of "the m devices with the cheapest rejections all at length L, the
    others off" (`draft_lengths.group_level_starts`) over m on a geometric grid and every L: where
    no device gains from drafting alone (all off is a trap for every single move) a few devices
    drafting together can."""
    inst = obj.inst
    k, gmax = inst.num_devices, inst.gamma_max
    if gmax == 0:
        return {}
    best_first = orders[0][::-1]
    sizes = np.unique(np.round(np.geomspace(1, k, num=min(k, 10))).astype(int))
    cands = np.zeros((sizes.size * gmax, k), dtype=np.int64)
    for j, m in enumerate(sizes):
        cands[j * gmax : (j + 1) * gmax, best_first[:m]] = np.arange(1, gmax + 1)[:, None]
    state = IncrementalSAA(obj, np.zeros(k, dtype=np.int64), t_comm=np.zeros(obj.n_saa))  # nothing rejected
    if k <= 62:  # one batch: its many repeated sets are solved once (`incremental.t_comm_of`)
        vals, _ = state.candidate_values(cands)
    else:  # a batch per size: the solver then skips the devices off in all of its candidates
        vals = np.concatenate([state.candidate_values(cands[j * gmax : (j + 1) * gmax])[0] for j in range(sizes.size)])
    top = np.argsort(-vals, kind="stable")[:count]
    return {f"group_{sizes[i // gmax]}_at_{i % gmax + 1}": cands[i] for i in top}


class _Best:
    """The best plan on every sample so far, with its samples' T_comm* (no re-solve to report it)."""

    def __init__(self, state: IncrementalSAA):
        self.state = state  # on all samples, kept at the best γ
        self.gamma, self.value, self.t_comm = state.gamma.copy(), state.value(), state.t_comm.copy()
        self.trace: list = [("computation_only", self.value)]

    def offer(self, names: list[str], gammas: np.ndarray) -> np.ndarray:
        """Judge γ's on every sample (one batch, re-solving only outcomes that differ from the best);
        move to the best of them if it beats the current best. Returns their values."""
        vals, changes = self.state.candidate_values(gammas)
        for n, v in zip(names, vals):
            self.trace.append((n, float(v)))
        i = int(np.argmax(vals))
        if vals[i] > self.value:
            self.state.move_to(changes, i)
            self.gamma, self.value, self.t_comm = self.state.gamma.copy(), float(vals[i]), self.state.t_comm.copy()
        return vals

    def take(self, name: str, gamma: np.ndarray, value: float, t_comm: np.ndarray) -> None:
        """A γ whose samples' T_comm* the caller already has (the polish's)."""
        self.trace.append((name, value))
        if value > self.value:
            self.gamma, self.value, self.t_comm = gamma.copy(), value, t_comm.copy()
            self.state = IncrementalSAA(self.state.obj, gamma, t_comm=t_comm)

    def goodput(self, obj: SAAObjective):
        num = float(np.sum(obj.inst.expected_tokens[np.arange(self.gamma.size), self.gamma]))
        return _goodput(num, float(t_comp_s(obj.inst, self.gamma)), float(np.mean(self.t_comm)))


def fast_search(
    obj: SAAObjective,
    warm_start=None,
    extra_starts=None,
    deadline_s: float | None = None,
    climbs: int | None = None,
    clock=time.process_time,
) -> DraftPlan:
    """Draft lengths for one round (see the module doc).

    ``warm_start``: last round's γ (K draft lengths), polished on all samples after the search
    and taken only where it ends strictly higher, so on an unchanged round (the same instance and
    samples) the plan is the cold start's. ``extra_starts``: more γ's (dict name → γ, or a list),
    starts of the climbs. ``deadline_s``: stop at the first check after this many seconds of
    ``clock`` (default: this process's CPU time) and return the best plan evaluated on all samples
    so far (computation-only, evaluated first, at the least). ``climbs``: how many of the best
    starts (on the subsample) are climbed."""
    deadline = _Deadline(deadline_s, clock)
    inst = obj.inst
    k = inst.num_devices
    warm = None if warm_start is None else _check_gamma(obj, warm_start, "warm_start")
    starts = _caller_starts(obj, extra_starts)
    n_coarse, n_mid = (int(np.clip(rows // k, _MIN_SAMPLES, obj.n_saa)) for rows in (_COARSE_ROWS, _MID_ROWS))
    coarse = head(obj, n_coarse) if n_coarse < obj.n_saa else obj
    solves0 = obj.num_solves
    co = max_g_max(inst)
    orders = _weakness_orders(inst)
    best = _Best(IncrementalSAA(obj, co))
    baselines = {"computation_only": best.value}
    ends: dict[str, np.ndarray] = {}
    if not deadline.passed():
        # a subsample's samples are the first rows of all samples: their T_comm* is known
        state = IncrementalSAA(coarse, co, t_comm=best.t_comm[:n_coarse], closed_form=True)
        starts = _coarse_starts(state, co, orders, starts)
        ends = _coarse_climbs(state, starts, orders, _CLIMBS if climbs is None else climbs, deadline)
    _judge_on_all_samples(best, {**starts, **ends}, baselines, deadline)
    mid_solves = _mid_climb(obj, n_mid if n_mid > n_coarse else 0, best, orders, deadline)
    if not deadline.passed():
        g, val, t = _polish(obj, best.gamma, best.t_comm, deadline)
        best.take("polished", g, val, t)
    if warm is not None and not deadline.passed():
        _, changes = best.state.candidate_values(warm[None, :])
        t_warm = best.t_comm.copy()
        t_warm[changes[2]] = changes[3]
        g, val, t = _polish(obj, warm, t_warm, deadline)
        best.take("warm_polished", g, val, t)
    # T_comm* solves on every objective used (subsamples included)
    solves = obj.num_solves - solves0 + coarse.num_solves * (coarse is not obj) + mid_solves
    return DraftPlan(best.gamma, best.goodput(obj), "fast", solves, best.trace, baselines)


def _caller_starts(obj: SAAObjective, extra_starts) -> dict[str, np.ndarray]:
    """The caller's starts (dict name → γ, or a list), each checked, named ``extra_<name>``."""
    if extra_starts is None:
        return {}
    items = extra_starts.items() if isinstance(extra_starts, dict) else enumerate(extra_starts)
    return {f"extra_{name}": _check_gamma(obj, g, "extra_starts") for name, g in items}


def _coarse_starts(
    state: IncrementalSAA, co: np.ndarray, orders, extra: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Every start of the climbs, in the order they are ranked in (ties go to the first): the best
    uniform γ's on the subsample, computation-only, the caller's, computation-only with the weakest
    devices off, and a few devices drafting together (`_group_starts`)."""
    coarse, k = state.obj, co.size
    grid = np.arange(coarse.inst.gamma_max + 1)
    uvals, _ = state.candidate_values(np.repeat(grid[:, None], k, axis=1))
    top = np.argsort(-uvals, kind="stable")[:_UNIFORM_CANDIDATES]
    starts = {
        **{f"uniform_{int(g)}": np.full(k, int(g), dtype=np.int64) for g in top},
        "computation_only": co,
        **extra,
    }
    # computation-only with the weakest devices off: where rejections are expensive the best
    # plans have a subset drafting, which no single-device move reaches from all or none
    for f, g in zip(_GROUP_FRACTIONS, _switched_off(co, orders[0])):
        starts[f"computation_only_off_{int(100 * f)}pct"] = g
    starts.update(_group_starts(head(coarse, min(coarse.n_saa, _MIN_SAMPLES)), orders))
    return starts


def _coarse_climbs(
    state: IncrementalSAA, starts: dict[str, np.ndarray], orders, climbs: int, deadline: _Deadline
) -> dict[str, np.ndarray]:
    """The ends (``coarse_<start>``) of climbs on the subsample from its ``climbs`` best starts."""
    names = list(starts)
    svals, _ = state.candidate_values(np.asarray([starts[n] for n in names]))
    visited: set = set()
    ends = {}
    for i in np.argsort(-svals, kind="stable")[:climbs]:
        if deadline.passed():
            break
        _, changes = state.candidate_values(starts[names[i]][None, :])
        state.move_to(changes, 0)
        if _climb(state, deadline, visited, orders) is not None:
            ends[f"coarse_{names[i]}"] = state.gamma.copy()
    return ends


def _judge_on_all_samples(best: _Best, points: dict[str, np.ndarray], baselines: dict, deadline: _Deadline) -> None:
    """The climbs' ends, the uniform candidates and the caller's starts offered to ``best`` on all
    samples (the other starts were judged on the subsample and count through their ends); the best
    uniform γ's value joins ``baselines``."""
    points = {n: g for n, g in points.items() if n.startswith(("uniform_", "extra_", "coarse_"))}
    if not points or deadline.passed():
        return
    names = list(points)
    vals = best.offer(names, np.asarray([points[n] for n in names]))
    baselines["best_uniform"] = max(float(v) for n, v in zip(names, vals) if n.startswith("uniform_"))


def _mid_climb(obj: SAAObjective, n_mid: int, best: _Best, orders, deadline: _Deadline) -> int:
    """The best point climbed again on the first ``n_mid`` samples (0: no mid stage), offered to
    ``best`` where it moved: the coarse optimum can sit a few lengths off the full one where several
    devices must move together. Returns the solves of the mid subsample (0 when it is ``obj``)."""
    if not n_mid or deadline.passed():
        return 0
    mid = head(obj, n_mid) if n_mid < obj.n_saa else obj
    mstate = IncrementalSAA(mid, best.gamma, t_comm=best.t_comm[:n_mid], closed_form=True)
    _climb(mstate, deadline, orders=orders)
    if not np.array_equal(mstate.gamma, best.gamma):
        best.offer(["mid"], mstate.gamma[None, :])
    return mid.num_solves if mid is not obj else 0
