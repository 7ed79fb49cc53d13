"""Baselines of docs/system-model.md §5.3, each on the same SAA uniforms as the optimised policy.

- Mode baselines: all-UL, all-DL, random (each rejected device picks UL or DL with probability
  1/2 from pre-drawn coins; DL powers optimal for the chosen modes), each with its own draft
  lengths optimised by the same draft-length policy.
- Draft-length baselines (optimal reactive modes): the best uniform γ, computation-only control,
  and the paper's pure two-phase greedy.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from multispin.errors import ConfigError
from multispin.optimize.draft_lengths import (
    DraftPlan,
    best_uniform,
    computation_only,
    exhaustive_oracle,
    local_search,
    paper_greedy,
)
from multispin.optimize.fast_search import fast_search
from multispin.optimize.goodput import SAAObjective
from multispin.system.instance import Instance
from multispin.vocabulary import DRAFT_POLICIES, MODE_RULES, PLAN_POLICIES  # noqa: F401 (importable from here)

MODE_BASELINES = tuple(m for m in MODE_RULES if m != "optimal")


def optimise_draft_lengths(
    obj: SAAObjective, policy: str = "greedy", extra_starts=None, warm_start=None, deadline_s: float | None = None
) -> DraftPlan:
    """Draft lengths by name: ``greedy`` (the shipped search, which also starts from
    ``extra_starts``), ``fast`` (the per-round search, `multispin.optimize.fast_search`: also
    takes ``warm_start`` and ``deadline_s``), ``greedy_paper``, ``best_uniform``,
    ``computation_only`` or ``oracle`` (exhaustive, small K) or ``certified`` (the shipped search,
    then branch and bound from its plan: `multispin.optimize.certified`, K ≤ 12)."""
    if policy == "greedy":
        return local_search(obj, extra_starts)
    if policy == "fast":
        return fast_search(obj, warm_start, extra_starts, deadline_s)
    if policy == "certified":
        # lazy: the certified search is opt-in, and the demo's start-up path imports this module
        from multispin.optimize.certified import branch_and_bound  # noqa: PLC0415

        start = local_search(obj, extra_starts)
        g, _, upper, proven, nodes = branch_and_bound(obj, start.draft_len)
        return replace(
            start,
            draft_len=g,
            goodput=obj.evaluate(g),
            policy="certified",
            evaluations=start.evaluations + nodes,
            upper_bound=upper,
            proven_optimal=proven,
        )
    if policy == "greedy_paper":
        return paper_greedy(obj)
    if policy == "best_uniform":
        return best_uniform(obj)
    if policy == "computation_only":
        return computation_only(obj)
    if policy == "oracle":
        return exhaustive_oracle(obj)
    raise ConfigError(f"policy: unknown value {policy!r} (allowed: {', '.join(PLAN_POLICIES)})")


def baselines(
    inst: Instance,
    uniforms: np.ndarray,
    mode_uniforms: np.ndarray,
    *,
    policy: str = "greedy",
    split: str = "equal",
    modes: bool = True,
    draft_lengths: bool = True,
) -> dict[str, DraftPlan]:
    """The baselines of §5.3 on the same samples.

    ``modes``: all_ul, all_dl and random modes, each with draft lengths optimised for it by
    ``policy``. ``draft_lengths``: best_uniform, computation_only and the paper's greedy, with the
    optimal modes."""
    out: dict[str, DraftPlan] = {}
    if modes:
        # the random policy has no per-set T* for a branch and bound: mode baselines use the shipped search
        search = "greedy" if policy == "certified" else policy
        for m in MODE_BASELINES:
            obj = SAAObjective(
                inst, uniforms, modes=m, split=split, mode_uniforms=mode_uniforms if m == "random" else None
            )
            out[m] = optimise_draft_lengths(obj, search)
    if draft_lengths:
        obj = SAAObjective(inst, uniforms, "optimal", split)
        out.update(
            best_uniform=best_uniform(obj), computation_only=computation_only(obj), greedy_paper=paper_greedy(obj)
        )
    return out
