"""The per-device verification rule (standard or coupled), chosen jointly with the draft lengths.

A coupled device (docs/system-model.md, the coupled model) gains E[N_k] at its coupled acceptance
α_c ≤ α and drafts with the token ids only, but never joins a rejected set, so it adds no
correction airtime. Whether that pays depends on the whole round (T_comm is a max over the
rejected set), so the choice is a search over (c, γ) with c ∈ {0, 1}^K the coupled mask:

- starts: all standard with the draft-length policy's γ, and all coupled with the exact
  free-communication optimum (an all-coupled round has no T_comm, so max G_max is its optimum);
- toggle moves: switch one device's rule and line-search its γ_k over 0..γ_max, all K devices
  weighed per step (each costs one batched T_comm solve of the samples where the device's
  presence changes), the best improving move taken;
- after the toggles stall, the draft-length policy polishes γ once on the fixed mask
  (warm-started from the current γ), and the toggles run again where that helped (one polish:
  a second one is another full search and, on paper-qwen drops, moved nothing).

Every move raises the SAA goodput and both single-rule plans are starts, so the result is never
below all-standard or all-coupled on its samples. Everything is evaluated on one all-standard
`SAAObjective` (its samples, mode policy, split and caches): the T_comm of (c, γ) is the T_comm
of the rejected set ``outcomes(γ) & ~c``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from multispin.errors import ConfigError
from multispin.optimize.goodput import Goodput, SAAObjective
from multispin.system.instance import Instance
from multispin.vocabulary import COUPLED, STANDARD

VERIFY_CHOICES = (STANDARD, COUPLED, "choose")
_REL_IMPROVEMENT = 1e-12


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

    def __init__(self, obj: SAAObjective):
        std = obj.inst
        if std.coupled_mask.any():
            raise ConfigError("obj: CoupledSAA needs the all-standard objective")
        cpl = all_coupled(std)
        self.obj = obj
        self.k = std.num_devices
        self.surv = std.survival
        self.e = np.stack([std.expected_tokens, cpl.expected_tokens])  # (2, K, G+1): [standard, coupled]
        self.t = np.stack([std.token_latency_s, cpl.token_latency_s])  # (2, K)
        c = std.compute
        self.t_fixed = c.t_ver0_s + self.k * c.t_ver1_s
        self.t_tok = c.t_ver_tok_s
        self.rows = np.arange(self.k)

    def rejected(self, c: np.ndarray, g: np.ndarray, uniforms: np.ndarray | None = None) -> np.ndarray:
        u = self.obj.uniforms if uniforms is None else uniforms
        return (u > self.surv[self.rows, g][None, :]) & ~c[None, :]

    def tokens(self, c: np.ndarray, g: np.ndarray) -> np.ndarray:
        return self.e[c.astype(int), self.rows, g]

    def t_comp(self, c: np.ndarray, g: np.ndarray) -> float:
        lat = self.t[c.astype(int), self.rows]
        return float(np.max(g * lat) + self.t_fixed + self.t_tok * np.sum(g + 1))

    def t_comm(self, c: np.ndarray, g: np.ndarray) -> np.ndarray:
        return self.obj.t_comm_rows(self.rejected(c, g))

    def evaluate(self, c: np.ndarray, g: np.ndarray) -> Goodput:
        num = float(np.sum(self.tokens(c, g)))
        tc = self.t_comp(c, g)
        ec = float(np.mean(self.t_comm(c, g)))
        return Goodput(num / (tc + ec), num, tc, ec, num / tc)

    def _toggle_rows(self, c: np.ndarray, g: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The samples where device k's switch can change T_comm, and (γ_max + 1, rows) whether it
        is in their rejected set after the switch at each γ_k (always, when it leaves: coupled)."""
        u = self.obj.uniforms
        grid = np.arange(self.surv.shape[1])
        if not c[k]:  # switching to coupled: it leaves every rejected set it was in, whatever γ_k
            rows = np.flatnonzero(u[:, k] > self.surv[k, g[k]])
            return rows, np.ones((grid.size, rows.size), dtype=bool)
        rows = np.flatnonzero(u[:, k] > self.surv[k, -1])  # survival falls with γ: the widest set
        return rows, u[rows, k][None, :] > self.surv[k, grid][:, None]

    def toggles(self, c: np.ndarray, g: np.ndarray, t_cur: np.ndarray):
        """Every device's rule switched, its γ_k line-searched, all K weighed on one batched T_comm
        solve: per device (best value, its γ_k, the samples and their new T_comm if taken)."""
        u = self.obj.uniforms
        parts = [self._toggle_rows(c, g, k) for k in range(self.k)]
        masks, rows_all = [], []
        for k, (rows, _) in enumerate(parts):
            m = self.rejected(c, g, u[rows])
            m[:, k] = bool(c[k])  # standard after the switch: in the set (the γ's that put it there)
            masks.append(m)
            rows_all.append(rows)
        rows_cat = np.concatenate(rows_all)
        solved = self.obj.t_comm_rows(np.concatenate(masks), rows_cat) if rows_cat.size else np.zeros(0)
        grid = np.arange(self.surv.shape[1])
        n_cur, t_sum = float(np.sum(self.tokens(c, g))), float(t_cur.sum())
        lat_now = self.t[c.astype(int), self.rows]
        out, at = [], 0
        for k, (rows, in_r) in enumerate(parts):
            t_new = solved[at : at + rows.size]
            at += rows.size
            delta = in_r.astype(float) @ (t_new - t_cur[rows])
            flip = 1 - int(c[k])
            others = np.delete(g * lat_now, k)
            t_draft = np.maximum(others.max() if others.size else 0.0, grid * self.t[flip, k])
            tc = t_draft + self.t_fixed + self.t_tok * (np.sum(g + 1) - g[k] + grid)
            num = n_cur - self.e[int(c[k]), k, g[k]] + self.e[flip, k, grid]
            values = num / (tc + (t_sum + delta) / u.shape[0])
            best = int(np.argmax(values))
            sel = in_r[best]
            out.append((float(values[best]), best, rows[sel], t_new[sel]))
        return out


@dataclass(frozen=True)
class VerifyChoice:
    """A (coupled mask, γ) pair and its goodput; ``starts`` the single-rule plans' goodputs."""

    coupled: np.ndarray
    draft_len: np.ndarray
    goodput: Goodput
    starts: dict
    toggles: int


def _toggle_sweeps(cs: CoupledSAA, c: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, int]:
    """Toggle sweeps until none raises G; returns (c, γ, G, moves taken). Each sweep weighs all K
    switches at once and takes the best; the other improving ones are then tried in order of their
    value, each re-evaluated exactly and kept only where it still raises G."""
    t_cur = cs.t_comm(c, g)
    cur = cs.evaluate(c, g).goodput_tokens_per_s
    moves = 0
    while True:
        cand = cs.toggles(c, g, t_cur)
        order = [
            k for k in np.argsort([-v[0] for v in cand], kind="stable") if cand[k][0] > cur * (1 + _REL_IMPROVEMENT)
        ]
        if not order:
            return c, g, cur, moves
        first = order[0]
        value, gk, rows, t_rows = cand[first]
        c, g = c.copy(), g.copy()
        c[first], g[first] = not c[first], gk
        t_cur = t_cur.copy()
        t_cur[rows] = t_rows
        cur, moves = value, moves + 1
        for k in order[1:]:
            c2, g2 = c.copy(), g.copy()
            c2[k], g2[k] = not c2[k], cand[k][1]
            t2 = cs.t_comm(c2, g2)
            v = float(np.sum(cs.tokens(c2, g2))) / (cs.t_comp(c2, g2) + float(t2.mean()))
            if v > cur * (1 + _REL_IMPROVEMENT):
                c, g, t_cur, cur, moves = c2, g2, t2, v, moves + 1


def choose_verification(obj: SAAObjective, standard: np.ndarray, polish) -> VerifyChoice:
    """The three-way search of the module doc on the all-standard objective ``obj``.

    ``standard``: the draft-length policy's all-standard γ; ``polish(inst, γ)``: that policy's
    γ on the instance with a fixed mask, warm-started from γ (never below it)."""
    from multispin.optimize.draft_lengths import max_g_max

    cs = CoupledSAA(obj)
    k = cs.k
    std_c, cpl_c = np.zeros(k, dtype=bool), np.ones(k, dtype=bool)
    g_cpl = obj.inst.capped(max_g_max(all_coupled(obj.inst)))
    g_std = np.asarray(standard, dtype=np.int64)
    starts = {
        STANDARD: cs.evaluate(std_c, g_std).goodput_tokens_per_s,
        COUPLED: cs.evaluate(cpl_c, g_cpl).goodput_tokens_per_s,
    }
    c, g = (std_c, g_std) if starts[STANDARD] >= starts[COUPLED] else (cpl_c, g_cpl)
    cur, toggles = max(starts.values()), 0
    c, g, cur, toggles = _toggle_sweeps(cs, c, g)
    g_pol = obj.inst.capped(polish(obj.inst.with_coupled(c), g))
    v = cs.evaluate(c, g_pol).goodput_tokens_per_s
    if v > cur * (1 + _REL_IMPROVEMENT):  # the polish moved γ: the switches are weighed again
        c, g, cur, more = _toggle_sweeps(cs, c, g_pol)
        toggles += more
    return VerifyChoice(c, g, cs.evaluate(c, g), starts, toggles)


# --------------------------------------------------------------------------- other objectives


def _objective_search(inst: Instance, mask: np.ndarray, template):
    """An `ObjectiveSearch` on ``inst`` with coupled ``mask``, sharing ``template``'s settings and
    its per-rejected-set mode tables (they depend on the rejected set only, never on the mask)."""
    from multispin.optimize.objectives import ObjectiveSearch

    s = ObjectiveSearch(
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
