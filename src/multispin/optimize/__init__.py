"""Decisions: DL power, UL/DL modes, draft lengths, baselines and exact oracles (numpy/scipy only).

The entry points, which ``__all__`` lists:

- :func:`plan`: draft lengths γ for one round's :class:`~multispin.system.instance.Instance`
  (a :class:`Plan`); :func:`optimize_instance` also runs every baseline on the same samples and
  attaches a :class:`Certificate` (what ``multispin optimize`` prints, via :func:`multispin.plan`);
- :func:`reactive`: modes, powers and bandwidths for a round's rejected set (a
  :class:`ReactiveDecision`);
- :func:`goodput` / :class:`SAAObjective`: G(γ) on SAA samples; :func:`exact_goodput`: G(γ) over
  every outcome (small K);
- :func:`simulate_rounds`: Monte Carlo of rounds at fixed γ (a :class:`MonteCarloResult`).

Searches, baselines and oracles (``draft_lengths``, ``baselines``, ``bandwidth``,
``reactive.brute_force_oracle``, …) live in their modules and are imported from there.
"""

from multispin.optimize.goodput import Goodput, SAAObjective, exact_goodput, goodput
from multispin.optimize.montecarlo import MonteCarloResult, simulate_rounds
from multispin.optimize.plan import Certificate, OptimizeReport, Plan, optimize_instance, plan
from multispin.optimize.reactive import ReactiveDecision, reactive

__all__ = [
    "Certificate", "Goodput", "MonteCarloResult", "OptimizeReport", "Plan", "ReactiveDecision", "SAAObjective",
    "exact_goodput", "goodput", "optimize_instance", "plan", "reactive", "simulate_rounds",
]
