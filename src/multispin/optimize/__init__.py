"""Decisions: DL power, UL/DL modes, draft lengths, baselines and exact oracles (numpy/scipy only).

Entry points: :func:`plan` (draft lengths for a round), :func:`reactive` (modes, powers and
bandwidths for a round's rejected set), :func:`goodput` / :class:`SAAObjective` (G(γ)).
"""

from multispin.optimize.bandwidth import brute_force_split_oracle, optimized_split_batch
from multispin.optimize.baselines import all_baselines, draft_baselines, mode_baselines, optimise_draft_lengths
from multispin.optimize.draft_lengths import (
    DraftPlan,
    best_uniform,
    computation_only,
    exhaustive_oracle,
    max_g_max,
    paper_greedy,
    two_phase_greedy,
)
from multispin.optimize.goodput import (
    Goodput,
    SAAObjective,
    exact_goodput,
    expected_tokens,
    g_max,
    goodput,
    rejection_prob,
    t_comp_s,
)
from multispin.optimize.montecarlo import MonteCarloResult, simulate_rounds
from multispin.optimize.plan import DeviceStats, OptimizeReport, Plan, device_stats, optimize_instance, plan
from multispin.optimize.reactive import (
    ReactiveDecision,
    brute_force_oracle,
    dl_power_equalisation,
    linear_scan_oracle,
    optimal_modes_batch,
    reactive,
    t_comm_batch,
)

__all__ = [
    "DeviceStats", "DraftPlan", "Goodput", "MonteCarloResult", "OptimizeReport", "Plan", "ReactiveDecision",
    "SAAObjective", "all_baselines", "best_uniform", "brute_force_oracle", "brute_force_split_oracle",
    "computation_only", "device_stats", "dl_power_equalisation", "draft_baselines", "exact_goodput",
    "exhaustive_oracle", "expected_tokens", "g_max", "goodput", "linear_scan_oracle", "max_g_max",
    "mode_baselines", "optimal_modes_batch", "optimise_draft_lengths", "optimize_instance",
    "optimized_split_batch", "paper_greedy", "plan", "reactive", "rejection_prob", "simulate_rounds",
    "t_comm_batch", "t_comp_s", "two_phase_greedy",
]
