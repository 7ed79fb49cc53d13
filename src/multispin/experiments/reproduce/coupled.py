"""A drop's coupled-verification columns (the study "UL, DL or neither"): the three-way plan
(each device coupled or standard with its γ, then UL or DL for a rejected standard device) and
all-coupled, on the drop's samples next to the paper's adaptive plan.

The coupled α is `multispin.system.coupled_alpha`'s assumption (labelled in every output that
shows these columns): no preset carries a measured one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from multispin.experiments.reproduce.long_form import column
from multispin.vocabulary import ALL_COUPLED, REFERENCE, THREE_WAY


def coupled_columns(world, inst, u: np.ndarray, adaptive, baselines: dict[str, Any]) -> dict[str, float]:
    """``goodput_three_way``, ``goodput_all_coupled`` with their γ (``gamma_*``), the three-way
    plan's coupled share (``frac_coupled_three_way``), its T_comp and E[T_comm] (ms). The three-way
    search starts from the adaptive plan and every baseline's γ, so it is never below adaptive."""
    from multispin.optimize.plan import plan

    inst_c = inst.replace(alpha_coupled=world.drop.coupled_alpha(inst.alpha))
    starts = {REFERENCE: adaptive.draft_len, **{n: dp.draft_len for n, dp in baselines.items()}}
    three = plan(inst_c, uniforms=u, verify="choose", extra_starts=starts)
    allc = plan(inst_c, uniforms=u, verify="coupled")
    g3 = three.goodput
    return {
        column("goodput", THREE_WAY): g3.goodput_tokens_per_s,
        column("gamma", THREE_WAY): float(np.mean(three.draft_len)),
        column("frac_coupled", THREE_WAY): three.coupled_share,
        column("t_comp_ms", THREE_WAY): 1e3 * g3.t_comp_s,
        column("e_t_comm_ms", THREE_WAY): 1e3 * g3.e_t_comm_s,
        column("goodput", ALL_COUPLED): allc.goodput_tokens_per_s,
        column("gamma", ALL_COUPLED): float(np.mean(allc.draft_len)),
    }
