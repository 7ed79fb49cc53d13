"""The per-device verification rule (standard or coupled), chosen jointly with the draft lengths.

A coupled device (docs/system-model.md, the coupled model) gains E[N_k] at its coupled acceptance
α_c ≤ α and drafts with the token ids only, but never joins a rejected set, so it adds no
correction airtime. Whether that pays depends on the whole round (T_comm is a max over the
rejected set), so the choice is a search over (c, γ) with c ∈ {0, 1}^K the coupled mask:

- starts: all standard with the draft-length policy's γ, and all coupled with the exact
  free-communication optimum (an all-coupled round has no T_comm, so max G_max is its optimum);
- moves: one device's rule kept or switched with its γ_k line-searched over 0..γ_max, all
  2·K·(γ_max + 1) moves weighed per step at once, the best improving one taken. The T_comm of
  (c, γ) is the all-standard T_comm at the *communicating* draft lengths where(c, 0, γ) (a
  standard device at γ = 0 is never rejected either), so one `IncrementalSAA` state on the
  all-standard objective prices every move with one batch of flipped sets
  (`IncrementalSAA.comm_table`, the closed-form flips of the fast search where they apply);
- for the report policies (not ``fast``, the per-round one), the draft-length policy then
  polishes γ once on the final mask (warm-started), and the moves resume where that helped;
  ``fast`` climbs on a quarter of the samples instead and keeps the end where it beats the start
  on all of them (planning time: benchmarks/bench_coupled_planning.py).

Every move raises the SAA goodput and both single-rule plans are starts, so the result is never
below all-standard or all-coupled on its samples. Everything is evaluated on one all-standard
`SAAObjective` (its samples, mode policy, split and caches): the T_comm of (c, γ) is the T_comm
of the rejected set ``outcomes(γ) & ~c``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from multispin.errors import ConfigError
from multispin.optimize.draft_lengths import max_g_max
from multispin.optimize.goodput import Goodput, SAAObjective
from multispin.optimize.incremental import IncrementalSAA, head, t_comm_of
from multispin.system.instance import Instance
from multispin.vocabulary import COUPLED, STANDARD, VERIFY_CHOICES

_REL_IMPROVEMENT = 1e-12
_SUBSAMPLE_MIN = 100  # samples of the first climb (a quarter of N_SAA, at least this many)


def check_verify(name: str) -> str:
    if name not in VERIFY_CHOICES:
        raise ConfigError(f"verify: unknown value {name!r} (allowed: {', '.join(VERIFY_CHOICES)})")
    return name


def as_standard(inst: Instance) -> Instance:
    """The instance with every device on standard verification (unchanged if none is coupled)."""
    return inst if not inst.coupled_mask.any() else inst.with_coupled(np.zeros(inst.num_devices, dtype=bool))


def all_coupled(inst: Instance) -> Instance:
    if not inst.coupled_available:
        raise ConfigError("verify: 'coupled' needs a coupled acceptance (alpha_coupled); this instance has none")
    return inst.with_coupled(np.ones(inst.num_devices, dtype=bool))


class CoupledSAA:
    """G(c, γ) on the samples of an all-standard objective, c the (K,) coupled mask."""

    def __init__(self, obj: SAAObjective, coupled: Instance | None = None):
        std = obj.inst
        if std.coupled_mask.any():
            raise ConfigError("obj: CoupledSAA needs the all-standard objective")
        cpl = all_coupled(std) if coupled is None else coupled
        self.obj = obj
        self.coupled = cpl  # the all-coupled instance
        self.k = std.num_devices
        self.surv = std.survival
        self.e = np.stack([std.expected_tokens, cpl.expected_tokens])  # (2, K, G+1): [standard, coupled]
        self.t = np.stack([std.token_latency_s, cpl.token_latency_s])  # (2, K)
        c = std.compute
        self.t_fixed = c.t_ver0_s + self.k * c.t_ver1_s
        self.t_tok = c.t_ver_tok_s
        self.rows = np.arange(self.k)

    def head(self, m: int) -> CoupledSAA:
        """The same on the first ``m`` samples (`multispin.optimize.incremental.head`)."""
        return CoupledSAA(head(self.obj, m), self.coupled)

    def rejected(self, c: np.ndarray, g: np.ndarray, uniforms: np.ndarray | None = None) -> np.ndarray:
        u = self.obj.uniforms if uniforms is None else uniforms
        return (u > self.surv[self.rows, g][None, :]) & ~c[None, :]

    def tokens(self, c: np.ndarray, g: np.ndarray) -> np.ndarray:
        return self.e[c.astype(int), self.rows, g]

    def t_comp(self, c: np.ndarray, g: np.ndarray) -> float:
        lat = self.t[c.astype(int), self.rows]
        return float(np.max(g * lat) + self.t_fixed + self.t_tok * np.sum(g + 1))

    def t_comm(self, c: np.ndarray, g: np.ndarray) -> np.ndarray:
        """The samples' T_comm at (c, γ): the objective's values (`t_comm_of`: bit for bit)."""
        return self.t_comm_rows(c, g, 0)

    def t_comm_rows(self, c: np.ndarray, g: np.ndarray, start: int) -> np.ndarray:
        """`t_comm` of the samples from ``start`` on (a row's T_comm depends on its set and its own
        sample only)."""
        rows = np.arange(start, self.obj.n_saa)
        return t_comm_of(self.obj, self.rejected(c, g, self.obj.uniforms[start:]), rows)

    def goodput(self, c: np.ndarray, g: np.ndarray, t_comm: np.ndarray) -> Goodput:
        """G(c, γ) from the samples' T_comm at (c, γ)."""
        num = float(np.sum(self.tokens(c, g)))
        tc = self.t_comp(c, g)
        ec = float(np.mean(t_comm))
        return Goodput(num / (tc + ec), num, tc, ec, num / tc)

    def evaluate(self, c: np.ndarray, g: np.ndarray) -> Goodput:
        return self.goodput(c, g, self.t_comm(c, g))

    def move_table(self, c: np.ndarray, g: np.ndarray, inc: IncrementalSAA) -> np.ndarray:
        """G after each single-device move, shape (2, K, γ_max + 1): [rule, device, γ_k'] with the
        others fixed (rule 0 standard, 1 coupled). ``inc``: the all-standard state at the
        communicating draft lengths where(c, 0, γ) (a coupled device is never rejected, as a
        standard one at γ = 0), whose `comm_table` gives E[T_comm] of every move at once."""
        comm = inc.comm_table()  # (K, G+1): device k standard at γ_k'; column 0: k never rejected
        grid = np.arange(self.surv.shape[1])
        lat = self.t[c.astype(int), self.rows] * g
        top = np.argsort(-lat, kind="stable")[:2]
        others = np.full(self.k, lat[top[0]])
        others[top[0]] = lat[top[1]] if self.k > 1 else 0.0
        e_cur = self.tokens(c, g)
        n_cur = float(np.sum(e_cur))
        # both rules at once, [rule, device, γ_k']: each entry by the same operations as one at a time
        draft = np.maximum(others[None, :, None], grid[None, None, :] * self.t[:, :, None])
        tc = draft + self.t_fixed + self.t_tok * (np.sum(g + 1) - g[:, None] + grid[None, :])
        num = n_cur - e_cur[:, None] + self.e
        e_comm = np.empty_like(num)
        e_comm[0] = comm
        e_comm[1] = comm[:, :1]  # a coupled device is never rejected, whatever its γ_k'
        return num / (tc + e_comm)


@dataclass(frozen=True)
class VerifyChoice:
    """A (coupled mask, γ) pair and its goodput; ``starts`` the single-rule plans' goodputs."""

    coupled: np.ndarray
    draft_len: np.ndarray
    goodput: Goodput
    starts: dict
    moves: int


def _local_search(cs: CoupledSAA, c: np.ndarray, g: np.ndarray, t_comm: np.ndarray | None, closed_form: bool):
    """Best-improvement single-device moves (rule switched or not, γ_k line-searched) until none
    raises G; returns (c, γ, the samples' T_comm there, moves taken). ``t_comm``: the samples'
    T_comm at the start where the caller has it. With ``closed_form`` the flipped sets that rank the
    moves come from `multispin.optimize.flips` (ranking only: every move taken is checked on the
    solver's values, as the fast search does)."""
    # the climb's samples share a few rejected sets where most devices verify coupled
    inc = IncrementalSAA(cs.obj, np.where(c, 0, g), t_comm=t_comm, closed_form=closed_form, repeated_sets=True)
    cur = cs.goodput(c, g, inc.t_comm).goodput_tokens_per_s
    moves = 0
    while True:
        table = cs.move_table(c, g, inc)
        rule, k, gk = np.unravel_index(int(np.argmax(table)), table.shape)
        if not table[rule, k, gk] > cur * (1 + _REL_IMPROVEMENT):
            return c, g, inc.t_comm, moves
        c2, g2 = c.copy(), g.copy()
        c2[k], g2[k] = bool(rule), gk
        inc.set_device(int(k), 0 if rule else int(gk))
        value = float(np.sum(cs.tokens(c2, g2))) / (cs.t_comp(c2, g2) + float(np.mean(inc.t_comm)))
        if not value > cur * (1 + _REL_IMPROVEMENT):  # ranked on rounded flips, not better on the solver's
            inc.set_device(int(k), 0 if c[k] else int(g[k]))  # back to the point before the move
            return c, g, inc.t_comm, moves
        c, g, cur, moves = c2, g2, value, moves + 1


def choose_verification(
    obj: SAAObjective, standard: np.ndarray, polish=None, closed_form: bool = True, subsample: bool = False
) -> VerifyChoice:
    """The three-way search of the module doc on the all-standard objective ``obj``.

    ``standard``: the draft-length policy's all-standard γ; ``polish(inst, γ)`` (optional): that
    policy's γ on the instance with a fixed mask, warm-started from γ (never below it), run once
    after the moves stall, the moves resuming where it helped."""
    cs = CoupledSAA(obj)
    k = cs.k
    std_c, cpl_c = np.zeros(k, dtype=bool), np.ones(k, dtype=bool)
    g_cpl = obj.inst.capped(max_g_max(cs.coupled))
    g_std = np.asarray(standard, dtype=np.int64)
    t_std = cs.t_comm(std_c, g_std)
    starts = {
        STANDARD: cs.goodput(std_c, g_std, t_std).goodput_tokens_per_s,
        COUPLED: cs.goodput(cpl_c, g_cpl, np.zeros(obj.n_saa)).goodput_tokens_per_s,  # never rejected
    }
    if starts[STANDARD] >= starts[COUPLED]:
        c, g, t0 = std_c, g_std, t_std
    else:
        c, g, t0 = cpl_c, g_cpl, np.zeros(obj.n_saa)
    if subsample and obj.n_saa >= 4 * _SUBSAMPLE_MIN:
        # the per-round search: the climb runs on a quarter of the samples and its end is taken
        # where it beats the start on all of them (a full-sample climb after it doubled the
        # time and, on paper-qwen K = 20 drops, moved nothing)
        m = max(_SUBSAMPLE_MIN, obj.n_saa // 4)
        # the subsample's rows are the first rows: their T_comm at the start is known
        c_sub, g_sub, t_head, moves = _local_search(cs.head(m), c, g, t0[:m], closed_form)
        if moves:  # else the climb ended where it started
            t_sub = np.concatenate([t_head, cs.t_comm_rows(c_sub, g_sub, m)])
            if cs.goodput(c_sub, g_sub, t_sub).goodput_tokens_per_s > cs.goodput(c, g, t0).goodput_tokens_per_s:
                c, g, t0 = c_sub, g_sub, t_sub
        return VerifyChoice(c, g, cs.goodput(c, g, t0), starts, moves)
    c, g, t_comm, moves = _local_search(cs, c, g, t0, closed_form)
    if polish is not None:
        g_pol = obj.inst.capped(polish(obj.inst.with_coupled(c), g))
        t_pol = cs.t_comm(c, g_pol)
        if cs.goodput(c, g_pol, t_pol).goodput_tokens_per_s > cs.goodput(c, g, t_comm).goodput_tokens_per_s * (
            1 + _REL_IMPROVEMENT
        ):
            c, g, t_comm, more = _local_search(cs, c, g_pol, t_pol, closed_form)
            moves += more
    return VerifyChoice(c, g, cs.goodput(c, g, t_comm), starts, moves)


# --------------------------------------------------------------------------- other objectives


def _objective_search(inst: Instance, mask: np.ndarray, template):
    """An `ObjectiveSearch` on ``inst`` with coupled ``mask``, sharing ``template``'s settings and
    its per-rejected-set mode tables (they depend on the rejected set only, never on the mask).
    Built as ``type(template)``: this module does not import the objectives (they import it)."""
    s = type(template)(
        inst.with_coupled(mask), template.u, template.objective, template.energy, template.modes, template.split
    )
    s.mode_u = template.mode_u
    s._mode_tables = template._mode_tables
    return s


def choose_objective(inst: Instance, template, starts=(), exact: bool | None = None):
    """The three-way choice under any objective of `multispin.optimize.objectives` (``template``:
    an `ObjectiveSearch` on the all-standard instance, whose objective, samples and modes are used).

    The searched all-standard and all-coupled plans start it; then single-device switches, each
    with the device's γ_k ∈ {0, γ_k − 1, γ_k, γ_k + 1} and its γ in either start, first
    improvement, until none improves; then the objective's own γ search on the final mask from the
    point reached. Returns (coupled mask, its `RoundScore`, the starts' values by rule)."""
    std = as_standard(inst)
    k = std.num_devices
    masks = {STANDARD: np.zeros(k, dtype=bool), COUPLED: np.ones(k, dtype=bool)}
    found = {}
    for name, m in masks.items():
        found[name] = _objective_search(std, m, template).search(list(starts), exact)[0]
    name = max(found, key=lambda n: found[n].value)
    c, cur = masks[name].copy(), found[name]
    improved = True
    while improved:
        improved = False
        for dev in range(k):
            c2 = c.copy()
            c2[dev] = not c2[dev]
            search = _objective_search(std, c2, template)
            g0 = int(cur.draft_len[dev])
            options = {0, g0 - 1, g0, g0 + 1, *(int(s.draft_len[dev]) for s in found.values())}
            for v in sorted(x for x in options if 0 <= x <= std.gamma_max):
                g2 = cur.draft_len.copy()
                g2[dev] = v
                s = search.evaluate(g2)
                if s.value > cur.value + 1e-12 * max(1.0, abs(cur.value)):
                    c, cur, improved = c2, s, True
                    break
            if improved:
                break
    final = _objective_search(std, c, template).search([cur.draft_len], exact)[0]
    if final.value > cur.value:
        cur = final
    return c, cur, {n: s.value for n, s in found.items()}
