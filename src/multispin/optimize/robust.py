"""Draft lengths under imperfect channel knowledge: naive and robust planning.

The server plans a round on what its pilots told it
(`multispin.system.channel_process.ChannelEstimate`), not on the channel the corrections will
meet. Two ways to use that knowledge:

- **naive** (the paper's): the estimate is taken as the channel; the shipped search plans the
  instance built on it ([`multispin.optimize.plan.plan`][multispin.optimize.plan.plan]).
- **robust**: the same search on the same SAA uniforms, but every SAA sample s carries its own
  channel draw from the posterior of this round's channel given the estimate, so the objective is
  ``Σ E[N] / (T_comp + mean_s T_comm*(o_s; h_s))``: the expected goodput over the outcomes *and*
  the channel uncertainty. The naive plan is one of its starts, so on the posterior samples the
  robust plan is never below the naive one.

Modes and powers stay reactive in both ([`multispin.optimize.reactive.reactive`][multispin.optimize.reactive.reactive]): they are
chosen on the channel known after verification (the pilots in the verdict), so only the draft
lengths bear the uncertainty.
"""

from __future__ import annotations

import numpy as np

from multispin.errors import ConfigError
from multispin.optimize.plan import Plan, plan
from multispin.system.instance import Instance
from multispin.vocabulary import ModeRule

PLANNINGS = ("naive", "robust")


def plan_on_estimate(
    inst: Instance,
    uniforms: np.ndarray,
    planning: str = "naive",
    posterior_gains=None,
    *,
    modes: ModeRule = "optimal",
    split: str = "equal",
    mode_uniforms: np.ndarray | None = None,
    naive: Plan | None = None,
) -> Plan:
    """Draft lengths for a round whose channel is known only through an estimate.

    ``inst``: the round built on the estimate (gains = the estimated ones); ``posterior_gains``
    ``(gain_ul, gain_dl)`` (N_SAA, K): posterior draws of the channel, one per SAA sample (needed
    for ``robust``); ``naive``: the naive plan if already computed (its γ starts the robust search).
    """
    if planning not in PLANNINGS:
        raise ConfigError(f"planning: unknown value {planning!r} (allowed: {', '.join(PLANNINGS)})")
    if naive is None:
        naive = plan(inst, uniforms=uniforms, modes=modes, split=split, mode_uniforms=mode_uniforms)
    if planning == "naive":
        return naive
    if posterior_gains is None:
        raise ConfigError("posterior_gains: robust planning needs the posterior channel draws")
    return plan(
        inst,
        uniforms=uniforms,
        modes=modes,
        split=split,
        mode_uniforms=mode_uniforms,
        channel_gains=posterior_gains,
        extra_starts={"naive": naive.draft_len},
    )
