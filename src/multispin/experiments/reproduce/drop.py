"""One drop's numbers (what every point of every study computes, drop by drop) and the version of
the code they depend on, part of every cache key.

One drop = one `multispin.system.World` (the scenario with the drop's own seed: device
positions, tasks, draft latencies, fading, SAA samples), its round-0 instance, and the optimiser's
plan plus whatever baselines the point asks for (``options``), all on the same SAA samples. The
optimiser is used as shipped ([`multispin.optimize.plan.plan`][multispin.optimize.plan.plan], the baselines of §5.3). It
needs nothing of the run's configuration or grids (`.config`, `.studies`), which both
import it.
"""

from __future__ import annotations

import hashlib
import inspect
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from multispin.experiments.reproduce.long_form import column
from multispin.vocabulary import POLICY_TABLE, policies_in

REPRODUCE_TABLE_MAX_DEVICES = 12  # the certificate's exact table per drop: 4,096 rejected sets at most


# ----------------------------------------------------------------------------- one drop


def _nan_if_empty(num: float, den: float) -> float:
    return float(num / den) if den > 0 else float("nan")


def _pct(a: float, b: float) -> float:
    return 100.0 * (a / b - 1.0) if b > 0 else float("nan")


def run_drop(scenario: dict[str, Any], options: dict[str, Any]) -> dict[str, float]:
    """Every number of one drop (a dict of floats); ``scenario`` carries the drop's seed.

    The baselines the point asks for run first and the shipped search starts from their γ, so the
    plan is never below them on the drop's samples; ``options["reference"]`` also runs the slow
    reference search, for the diagnostic ``greedy_shortfall_pct``.
    """
    if options.get("csi"):  # the channel-knowledge study computes other numbers (its own module)
        from multispin.experiments.reproduce.csi import run_csi_drop

        return run_csi_drop(scenario, options)
    if options.get("capacity"):  # capacity under a TPOT target (experiments/capacity.py)
        from multispin.experiments.capacity import run_capacity_drop

        return run_capacity_drop(scenario, options)
    from multispin.optimize.baselines import baselines as baseline_plans
    from multispin.optimize.goodput import SAAObjective
    from multispin.optimize.plan import plan
    from multispin.system import World, scenario_from_dict

    sc = scenario_from_dict(scenario)
    world = World(sc)
    inst = world.instance(0)
    u = world.saa_uniforms(0)
    obj = SAAObjective(inst, u, "optimal", "equal")
    baselines = baseline_plans(
        inst, u, world.mode_uniforms(0), modes=bool(options.get("modes")), draft_lengths=bool(options.get("drafts"))
    )
    p = plan(inst, uniforms=u, extra_starts={n: dp.draft_len for n, dp in baselines.items()})
    if options.get("coupled") and sc.optimizer.objective != "sum":
        from multispin.errors import ConfigError

        raise ConfigError(
            f"objective: the coupled policies are compared on the sum goodput only (got {sc.optimizer.objective!r})"
        )
    if sc.optimizer.objective != "sum":  # the sum plan and its baselines are the searches' starts
        return objective_drop(sc, inst, u, world.mode_uniforms(0), p, baselines, options)
    row = _plan_columns(inst, obj, p)
    if options.get("stats"):
        row.update(_rejection_columns(inst, p.draft_len, u))
    row.update(_baseline_columns(sc, obj, p, baselines, reference=bool(options.get("reference"))))
    if options.get("extensions"):
        row.update(_extension_columns(sc, inst, u, p))
    if options.get("coupled"):  # the study "UL, DL or neither" (experiments.reproduce.coupled)
        from multispin.experiments.reproduce.coupled import coupled_columns

        row.update(coupled_columns(world, inst, u, p, baselines))
    if options.get("service"):
        plans = {"": (p.draft_len, "optimal", None)}
        plans.update(
            {POLICY_TABLE[n].suffix: (dp.draft_len, POLICY_TABLE[n].rule, None) for n, dp in baselines.items()}
        )
        row.update(service_columns(sc, inst, u, world.mode_uniforms(0), plans))
    return {k: float(v) for k, v in row.items()}


def _plan_columns(inst, obj, p) -> dict[str, float]:
    """The shipped plan's own numbers: its goodput against the bounds, its timing and its γ."""
    from multispin.optimize.bound import communication_bound
    from multispin.optimize.draft_lengths import goodput_upper_bound

    g = p.draft_len
    gp = p.goodput
    return {
        "goodput": gp.goodput_tokens_per_s,
        "g_max": gp.g_max_tokens_per_s,
        "g_ratio": gp.goodput_tokens_per_s / gp.g_max_tokens_per_s,
        # against max_γ G_max(γ), a true bound: g_ratio is 1 wherever nobody drafts
        "g_bound": (ub := goodput_upper_bound(inst)),
        "g_ratio_bound": gp.goodput_tokens_per_s / ub,
        # the certificate: no γ does better on this drop's samples than the communication-aware bound
        # the exact-table part only up to REPRODUCE_TABLE_MAX_DEVICES: 2^K rejected sets per drop cost
        # seconds each at K = 20, over hundreds of drops; above it the (looser) single-device bound
        "g_comm_bound": (
            cb := communication_bound(obj, g, table=inst.num_devices <= REPRODUCE_TABLE_MAX_DEVICES).value
        ),
        "gap_comm_bound_pct": 100.0 * (1.0 - gp.goodput_tokens_per_s / cb),
        "e_t_comm_ms": 1e3 * gp.e_t_comm_s,
        "t_comp_ms": 1e3 * gp.t_comp_s,
        "tokens_per_round": gp.expected_tokens,
        "gamma_mean": float(np.mean(g)),
        "gamma_mean_drafting": float(np.mean(g[g > 0])) if np.any(g > 0) else float("nan"),
        "frac_no_draft": float(np.mean(g == 0)),
    }


def _rejection_columns(inst, g, u) -> dict[str, float]:
    """How many devices a round rejects on average at the plan's γ, and the share of them on the DL."""
    from multispin.optimize.plan import device_stats

    st = device_stats(inst, g, u)
    ul, dl = float(np.sum(st.ul_share)), float(np.sum(st.dl_share))
    return {"rejected_mean": ul + dl, "dl_fraction": _nan_if_empty(dl, ul + dl)}


def _baseline_columns(sc, obj, p, baselines, *, reference: bool) -> dict[str, float]:
    """Each baseline's goodput and mean γ, and the diagnostic of the draft-length search: the best
    goodput at optimal modes over every γ any policy (and the reference search, where run) found."""
    from multispin.optimize.draft_lengths import reference_search

    g = p.draft_len
    row: dict[str, float] = {}
    gammas = [g] + [dp.draft_len for dp in baselines.values()]
    for name, dp in baselines.items():  # their gains over the plan are computed where summarised
        row[column("goodput", name)] = dp.goodput_tokens_per_s
        row[column("gamma", name)] = float(np.mean(dp.draft_len))
    if reference:
        rng = np.random.default_rng([int(sc.seed), 0x5EF])
        gammas.append(reference_search(obj, rng, restarts=2, kicks=2, starts=[g]).draft_len)
    if len(gammas) > 1:
        best = max(obj.value(x) for x in gammas)
        row["goodput_best_known"] = best
        row["greedy_shortfall_pct"] = _pct(best, p.goodput.goodput_tokens_per_s)
    return row


def _extension_columns(sc, inst, u, p) -> dict[str, float]:
    """The two extensions against the plan: the optimised bandwidth split and the lattice codec."""
    from multispin.optimize.goodput import SAAObjective
    from multispin.optimize.plan import plan
    from multispin.system import World

    gp = p.goodput
    opt = SAAObjective(inst, u, "optimal", "optimized").value(p.draft_len)
    lat = World(sc.override({"payload.codec": "lattice:l=1024"}))  # the figure's ℓ, as before
    pl = plan(lat.instance(0), uniforms=u)
    return {
        "goodput_opt_split": opt,
        "gain_opt_split_pct": _pct(opt, gp.goodput_tokens_per_s),
        "goodput_lattice": pl.goodput_tokens_per_s,
        "gain_lattice_pct": _pct(pl.goodput_tokens_per_s, gp.goodput_tokens_per_s),
        "gamma_mean_lattice": float(np.mean(pl.draft_len)),
        "payload_bits_sparse": float(sc.payload.payload_bits),
        "payload_bits_lattice": float(lat.scenario.payload.payload_bits),
    }


_MODE_POLICIES = tuple(p.name for p in policies_in("modes"))  # the others use the optimal modes


def objective_drop(sc, inst, u, mode_u, sum_plan, baselines, options: dict[str, Any]) -> dict[str, float]:
    """One drop planned for the scenario's non-sum objective (`optimize.objectives`): adaptive and
    each mode baseline search their γ for the objective under their own modes, starting from the
    sum's plans; the columns are the sum goodput each plan gives, as for the sum (``goodput``,
    ``goodput_<policy>``, ``gamma_*``), the sum plan's goodput
    (``goodput_sum_objective``: what the objective costs in sum goodput) and, with
    ``options["service"]``, the service columns. The draft-length baselines optimise the sum only
    and are refused."""
    from multispin.errors import ConfigError
    from multispin.optimize.objectives import EnergyModel, plan_objective

    objective = sc.optimizer.objective
    other = sorted(set(baselines) - set(_MODE_POLICIES))
    if other or any(options.get(k) for k in ("reference", "extensions", "stats")):
        raise ConfigError(
            f"objective: {objective!r} plans adaptive and the mode baselines only (got {other or options})"
        )
    energy = EnergyModel.of(sc)
    starts = [sum_plan.draft_len, *(dp.draft_len for dp in baselines.values())]
    p, best, _ = plan_objective(inst, objective, uniforms=u, energy=energy, starts=starts)
    row: dict[str, float] = {
        "goodput": p.goodput_tokens_per_s,
        "gamma_mean": float(np.mean(p.draft_len)),
        "frac_no_draft": float(np.mean(p.draft_len == 0)),
        "goodput_sum_objective": sum_plan.goodput_tokens_per_s,
    }
    # the energy objective picks adaptive's modes after verification (its own search, not the
    # T_comm-optimal ones): its score already holds those modes' airtimes and joules
    plans: dict[str, tuple[Any, str, Any]] = {"": (p.draft_len, "optimal", best if objective == "energy" else None)}
    for name, dp in baselines.items():
        bp = plan_objective(
            inst,
            objective,
            uniforms=u,
            energy=energy,
            modes=name,
            mode_uniforms=mode_u if name == "random" else None,
            starts=[dp.draft_len],
        )[0]
        row[column("goodput", name)] = bp.goodput_tokens_per_s
        row[column("gamma", name)] = float(np.mean(bp.draft_len))
        plans[POLICY_TABLE[name].suffix] = (bp.draft_len, POLICY_TABLE[name].rule, None)
    if options.get("service"):
        row.update(service_columns(sc, inst, u, mode_u, plans))
    return {k: float(v) for k, v in row.items()}


def service_columns(sc, inst, u, mode_u, plans: dict[str, tuple[Any, str, Any]]) -> dict[str, float]:
    """What each device gets from each policy's plan on the drop's samples (docs/service.md, the
    model's counterpart of a run's `experiments.service` figures): per policy column suffix
    (``""`` for adaptive, ``"_all_ul"``, …) → (γ, its modes, the objective's score where it
    already fixed the modes, else None), the worst device's goodput min_k G_k
    (``goodput_worst<suffix>``), Jain's index of the G_k (``jain<suffix>``) and the devices'
    joules per generated token Σ_k E[J_k] / Σ_k E[N_k] (``energy_per_token_j<suffix>``), with
    G_k = E[N_k] / (T_comp + E[T_comm]) under the policy's modes (Σ_k G_k is its goodput column),
    and the p95 of TPOT over the samples' device-rounds (``tpot_p95_s<suffix>``: T / N_k as in
    `experiments.capacity`, at the T_comm-optimal modes for adaptive, also where the energy
    objective picked its own)."""
    from multispin.experiments.capacity import saa_tpot_samples
    from multispin.optimize.objectives import EnergyModel, ObjectiveSearch

    energy = EnergyModel.of(sc)
    out: dict[str, float] = {}
    for suffix, (gamma, modes, score) in plans.items():
        if score is None:
            search = ObjectiveSearch(
                inst, u, "energy", energy, modes, mode_uniforms=mode_u if modes == "random" else None
            )
            score = search.policy_modes_score(gamma)
        tokens = float(np.sum(score.expected_tokens))
        out[f"goodput_worst{suffix}"] = float(np.min(score.device_goodput))
        g = score.device_goodput  # Jain's index as experiments.service.jain_index (a test checks), here so
        # that the cache's code hash covers it
        out[f"jain{suffix}"] = float(np.sum(g) ** 2 / (g.size * np.sum(g * g))) if np.any(g > 0) else 1.0
        out[f"energy_per_token_j{suffix}"] = score.e_energy_j / tokens
        tpot = saa_tpot_samples(inst, np.asarray(gamma), modes, u, mode_u if modes == "random" else None)
        out[f"tpot_p95_s{suffix}"] = float(np.percentile(tpot, 95))
    return out


def run_chunk(scenario: dict[str, Any], options: dict[str, Any], seeds: list[tuple[int, int]]) -> list[dict]:
    """Drops ``(index, seed)`` of one point (the unit of work of the process pool and of the cache)."""
    out = []
    for index, seed in seeds:
        row = run_drop({**scenario, "seed": int(seed)}, options)
        out.append({"drop": int(index), "drop_seed": int(seed), **row})
    return out


def _csi_drop_code():
    from multispin.experiments.reproduce.csi import run_csi_drop

    return run_csi_drop


def _capacity_drop_code():
    from multispin.experiments import capacity

    return capacity  # the whole module: the capacity search and its drop


def _column_code():
    from multispin.experiments.reproduce import long_form

    return long_form  # the names of the drop's columns


def _coupled_drop_code():
    from multispin.experiments.reproduce.coupled import coupled_columns

    return coupled_columns


DROP_CODE = (
    _nan_if_empty,
    _pct,
    run_drop,
    _plan_columns,
    _rejection_columns,
    _baseline_columns,
    _extension_columns,
    objective_drop,
    service_columns,
    run_chunk,
    _csi_drop_code(),
    _capacity_drop_code(),
    _coupled_drop_code(),
    _column_code(),
)  # what code_version hashes


@lru_cache(maxsize=1)
def code_version() -> str:
    """Hash of the code a drop's numbers depend on: ``system/``, ``optimize/`` and the drop functions.

    Part of every cache key: a changed optimiser or drop computation recomputes instead of reusing
    stale drops (grids, figures and the report may change freely).
    """
    root = Path(__file__).parent.parent.parent  # the multispin package
    files = sorted([*root.joinpath("system").glob("*.py"), *root.joinpath("optimize").glob("*.py")])
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(root).as_posix().encode())
        h.update(f.read_bytes())
    for fn in DROP_CODE:
        h.update(inspect.getsource(fn).encode())
    return h.hexdigest()[:16]
