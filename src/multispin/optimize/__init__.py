"""Decisions: DL power, UL/DL modes, draft lengths, baselines and exact oracles (numpy/scipy only).

The entry points, which ``__all__`` lists:

- [`plan`][multispin.optimize.plan.plan]: draft lengths γ for one round's `Instance`
  (a [`Plan`][multispin.optimize.plan.Plan]); [`optimize_instance`][multispin.optimize.plan.optimize_instance] also runs every baseline on the same samples and
  attaches a [`Certificate`][multispin.optimize.plan.Certificate] (what ``multispin optimize`` prints, via [`multispin.plan`][multispin.api.plan]);
- [`reactive`][multispin.optimize.reactive.reactive]: modes, powers and bandwidths for a round's rejected set (a
  [`ReactiveDecision`][multispin.optimize.reactive.ReactiveDecision]);
- `goodput` / `SAAObjective`: G(γ) on SAA samples; `exact_goodput`: G(γ) over
  every outcome (small K);
- [`simulate_rounds`][multispin.optimize.montecarlo.simulate_rounds]: Monte Carlo of rounds at fixed γ (a `MonteCarloResult`).

Searches, baselines and oracles (``draft_lengths``, ``baselines``, ``bandwidth``,
``reactive.brute_force_oracle``, …) live in their modules and are imported from there.
"""

from multispin.optimize.goodput import Goodput, SAAObjective, exact_goodput, goodput
from multispin.optimize.montecarlo import MonteCarloResult, simulate_rounds
from multispin.optimize.plan import Certificate, OptimizeReport, Plan, optimize_instance, plan
from multispin.optimize.reactive import ReactiveDecision, reactive

__all__ = [
    "Certificate",
    "Goodput",
    "MonteCarloResult",
    "OptimizeReport",
    "Plan",
    "ReactiveDecision",
    "SAAObjective",
    "exact_goodput",
    "goodput",
    "optimize_instance",
    "plan",
    "reactive",
    "simulate_rounds",
]
