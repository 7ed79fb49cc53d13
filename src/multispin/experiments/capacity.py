"""Capacity under a service target: how many devices one server carries while each device's time
per output token stays within a target (docs/service.md), under a mode policy and an objective.

For K = 1, 2, … the model plans each round of a drop (`optimize.plan` for the sum, the objective's
search otherwise) and simulates rounds at that plan: per device-round, the tokens N_k and the
round's duration T (T_comp + T_comm of the rejected set under the policy's modes); TPOT samples
are T / N_k, as in a run's summary (`experiments.service`). K is served when the pooled
q-th percentile of TPOT is at most the target; the capacity is the largest K served with every
smaller K served too (adding a device never shortens a round, so the first miss ends the count).

This is the model, not the running system: the testbed's TPOT percentiles are in its summary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from multispin.errors import ConfigError
from multispin.experiments.reproduce.long_form import column
from multispin.vocabulary import REFERENCE, policies_in

# the policies the capacity compares, each a mode rule (vocabulary.POLICY_TABLE)
POLICY_MODES = {p.name: p.rule for p in policies_in(kind="capacity")}


def round_tpot_samples(
    inst, gamma: np.ndarray, modes: str, rng: np.random.Generator, rounds: int, split: str = "equal"
) -> np.ndarray:
    """TPOT samples T / N_k of `rounds` simulated rounds at draft lengths γ (one per device-round)."""
    u = rng.random((rounds, inst.num_devices))
    mu = rng.random(u.shape) if modes == "random" else None
    return saa_tpot_samples(inst, gamma, modes, u, mu, split)


def saa_tpot_samples(
    inst, gamma: np.ndarray, modes: str, u: np.ndarray, mu: np.ndarray | None = None, split: str = "equal"
) -> np.ndarray:
    """TPOT samples T / N_k of the rounds the uniforms u (rounds, K) draw, as the SAA samples do (a
    device's drafts are rejected where u > P(its γ drafts all accepted)); `mu`: the random mode
    baseline's uniforms."""
    from multispin.optimize.goodput import t_comp_s
    from multispin.optimize.reactive import t_comm_batch

    k = inst.num_devices
    surv = inst.accepted_survival  # (K, γ_max + 1): P(the first i drafts are all accepted)
    # N_k = 1 + the accepted drafts: draft i counts while u < P(first i accepted), i ≤ γ_k
    idx = np.arange(surv.shape[1])[None, :]
    counted = (u[:, :, None] < surv[None, :, :]) & (idx[None, :, :] >= 1) & (idx[None, :, :] <= gamma[None, :, None])
    tokens = 1 + counted.sum(axis=2)
    rejected = u > inst.survival[np.arange(k), gamma][None, :]  # coupled devices are never corrected
    t = float(t_comp_s(inst, gamma)) + t_comm_batch(rejected, inst, modes, split, mu)
    return (t[:, None] / tokens).ravel()


@dataclass(frozen=True)
class CapacityPoint:
    devices: int
    tpot_quantile_s: float
    served: bool


def capacity(
    scenario,
    *,
    policy: str = REFERENCE,
    objective: str = "sum",
    tpot_target_s: float = 0.1,
    quantile: float = 95.0,
    max_devices: int = 16,
    drops: int = 3,
    rounds: int = 200,
    n_saa: int = 200,
) -> tuple[int, list[CapacityPoint]]:
    """(the capacity, the TPOT quantile at each K tried) for ``scenario`` (its radio, compute and
    seed); ``drops`` drops per K (seeds scenario.seed, +1, …), samples pooled over them."""
    from multispin.optimize.objectives import EnergyModel, plan_objective
    from multispin.optimize.plan import plan
    from multispin.system.channel import World, stream

    if policy not in POLICY_MODES:
        raise ConfigError(f"policy: unknown value {policy!r} (allowed: {', '.join(POLICY_MODES)})")
    if not tpot_target_s > 0:
        raise ConfigError(f"tpot_target_s: must be > 0 (got {tpot_target_s!r})")
    modes = POLICY_MODES[policy]
    points: list[CapacityPoint] = []
    best = 0
    for k in range(1, max_devices + 1):
        samples = []
        for d in range(drops):
            sc = scenario.override({"devices.count": k, "seed": scenario.seed + d})
            inst = World(sc).instance(0)
            u = stream(sc.seed, "saa", 0).random((n_saa, k))
            p = plan(inst, uniforms=u, modes=modes, policy="fast" if modes == "optimal" else "greedy")
            if objective != "sum":
                p = plan_objective(
                    inst, objective, uniforms=u, energy=EnergyModel.of(sc), modes=modes, starts=[p.draft_len]
                )[0]
            rng = stream(sc.seed, "montecarlo", k)  # the outcomes simulated at the plan
            samples.append(round_tpot_samples(inst, p.draft_len, modes, rng, rounds))
        q = float(np.percentile(np.concatenate(samples), quantile))
        points.append(CapacityPoint(k, q, q <= tpot_target_s))
        if q > tpot_target_s:
            break
        best = k
    return best, points


# the reproduce study (experiments/reproduce, figure fig9_capacity): one drop's capacities
CAPACITY_OBJECTIVES = ("sum", "proportional-fair")
CAPACITY_TPOT_TARGET_S = 0.2
CAPACITY_GAMMA_MAX = 8
CAPACITY_ROUNDS = 200
CAPACITY_N_SAA = 200
CAPACITY_MAX_DEVICES = 24


def run_capacity_drop(scenario: dict, options: dict) -> dict[str, float]:
    """One drop (the scenario carries its seed) of the capacity study: devices served within the
    p95 TPOT target per policy × objective, as ``capacity_<policy>_<objective>``."""
    from multispin.system import scenario_from_dict

    sc = scenario_from_dict(scenario).override({"optimizer.gamma_max": CAPACITY_GAMMA_MAX})
    target = float(options.get("tpot_target_s", CAPACITY_TPOT_TARGET_S))
    row = {}
    for policy in POLICY_MODES:
        for objective in CAPACITY_OBJECTIVES:
            row[column(f"capacity_{objective.replace('-', '_')}", policy)] = float(
                capacity(
                    sc,
                    policy=policy,
                    objective=objective,
                    tpot_target_s=target,
                    max_devices=CAPACITY_MAX_DEVICES,
                    drops=1,
                    rounds=CAPACITY_ROUNDS,
                    n_saa=CAPACITY_N_SAA,
                )[0]
            )
    return row
