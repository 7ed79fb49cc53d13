"""The models at the rounds a run made: what the analytic model and the Monte Carlo simulator
predict at the draft lengths and channels the planner actually used (a consistency check of the
run against the models, not a forecast: `experiments.forecast` is that)."""

from __future__ import annotations

import numpy as np

from multispin.optimize.montecarlo import analytic_round, simulate_rounds
from multispin.runtime.round.planner import ScenarioPlanner
from multispin.vocabulary import RUN_POLICIES


def model_predictions(planner: ScenarioPlanner, mc_rounds: int, seed: int) -> dict[str, float]:
    """What the analytic model and the Monte Carlo simulator predict for the rounds the planner
    ran, at the draft lengths actually used and the scenario's (profile) acceptance rates: the
    ratio Σ tokens / Σ time, comparable with the running system's `goodput_tokens_per_s`."""
    modes = RUN_POLICIES[planner.policy]
    rng = np.random.default_rng([seed, 41])
    a_tok = a_time = a_comm = mc_tok = mc_time = 0.0
    for past in planner.history:
        profile = past.instance.replace(alpha=planner.world.drop.alpha[past.devices])
        gamma = past.draft_len
        if planner.coupled_estimator is not None:  # and the coupled rule's prior α, not its estimate
            profile = profile.replace(alpha_coupled=np.asarray(planner.coupled_estimator.prior)[past.devices])
        tokens, comp, comm = analytic_round(profile, gamma, modes, planner.split, rng)
        a_tok += tokens
        a_time += comp + comm
        a_comm += comm
        mc = simulate_rounds(profile, gamma, mc_rounds, rng, modes=modes, split=planner.split)
        mc_tok += mc.tokens / mc_rounds
        mc_time += mc.time_s / mc_rounds
    return {
        "analytic_tokens_per_s": a_tok / a_time if a_time else 0.0,
        "montecarlo_tokens_per_s": mc_tok / mc_time if mc_time else 0.0,
        # per round, beside the run's mean_t_comm_s and tokens_per_round: where a gap sits
        "analytic_t_comm_s": a_comm / len(planner.history) if planner.history else 0.0,
        "analytic_tokens_per_round": a_tok / len(planner.history) if planner.history else 0.0,
    }
