"""Your own policy on the model (docs/own-policy.md): the protocol of
`multispin.runtime.round.user_policy` (γ from ``draft_lengths(view)``, then ``modes(view,
rejected)`` after verification) played round by round on the optimiser's instance, beside the
built-in policies on the same random numbers, with the project's paired intervals.

The mode rule is reactive, so a user policy has no closed-form goodput: it is evaluated over
simulated rounds (`multispin.optimize.montecarlo.simulate_policy_rounds`), each round's rejected
set drawn, the policy's modes asked for it, and the round's latency solved for those modes.

- `evaluate_policy` (``ms.evaluate(plan, policy=...)``): Monte Carlo rounds on the plan's instance
  with fresh acceptance draws; adaptive runs the same rounds on the same draws (one uniform per
  device and draft position per round), and the difference carries the batch-means interval of
  `multispin.experiments.paired` (a policy that learns makes rounds dependent; batches hold that).
- `drop_goodput` (``ms.sweep(policies=[..., policy])``, ``ms.plan(policy=...)``): a drop's SAA
  samples played as successive rounds (sample r is round r's outcome, as the SAA objective reads
  it), scored as Σ E[tokens | γ_r] / Σ (T_comp(γ_r) + T_comm_r); where γ is the same every round
  this is the SAA goodput at that γ, computed as for the built-ins, so a user policy that rebuilds a
  built-in gives its figures exactly. Adaptive's gain over it is the sweep's paired ratio of means.

A policy object is copied (deep) for every evaluation and every drop, so its state starts afresh
and the same seed gives the same figures.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from multispin.errors import ConfigError
from multispin.experiments.intervals import bootstrap_mean_ci, ratio_of_means_ci
from multispin.experiments.paired import PairedDifference, RoundLog, paired_difference
from multispin.optimize.goodput import goodput
from multispin.optimize.montecarlo import (
    FixedPolicy,
    MonteCarloResult,
    PolicyRounds,
    SimulatedRound,
    simulate_policy_rounds,
)
from multispin.runtime.round.user_policy import (
    RoundView,
    UserPolicy,
    checked_draft_lengths,
    checked_modes,
    user_policy_label,
)
from multispin.system.instance import Instance
from multispin.vocabulary import POLICY_TABLE, REFERENCE, STANDARD, UL, ModeRule

# the built-in policies ms.evaluate(policy=...) also runs round by round: the run policies that
# draft and verify standard, each with its γ (the plan's, or the baseline's optimised for its mode
# rule) and its mode rule
BUILT_IN_RULES: dict[str, ModeRule] = {
    p.name: p.rule for p in POLICY_TABLE.values() if p.run and p.drafts and p.verify == STANDARD
}


class UserOnModel:
    """A user policy as `simulate_policy_rounds` asks it: each round a `RoundView` of the instance
    (every device active, the true channel and α, what the last simulated round gave), its answers
    checked as the testbed checks them; its modes become the coins of the random rule (0: UL, 1: DL)."""

    rule: ModeRule = "random"

    def __init__(self, policy: UserPolicy, inst: Instance, uniforms: np.ndarray, split: str, draft_policy: str):
        self.policy = policy
        self.inst, self.uniforms, self.split, self.draft_policy = inst, uniforms, split, draft_policy
        self.view: RoundView | None = None
        self.coin_rows: list[np.ndarray] = []

    def draft_lengths(self, r: int, last: SimulatedRound | None) -> np.ndarray:
        inst = self.inst
        k = inst.num_devices
        caps = inst.gamma_cap if inst.gamma_cap is not None else np.full(k, inst.gamma_max, dtype=np.int64)
        rejected = () if last is None else tuple(int(d) for d in np.flatnonzero(last.rejected))
        accepted = {} if last is None else {d: int(a) for d, a in enumerate(last.accepted)}
        self.view = RoundView(
            r, tuple(range(k)), np.asarray(inst.gain_ul), np.asarray(inst.gain_dl), np.asarray(inst.alpha),
            np.asarray(caps), inst.gamma_max, rejected, inst, self.uniforms, self.split,
            accepted, None if last is None else last.latency_s, self.draft_policy,
        )  # fmt: skip
        return checked_draft_lengths(self.policy, self.view)

    def coins(self, r: int, rejected: np.ndarray) -> np.ndarray:
        assert self.view is not None, "coins: asked after draft_lengths"
        chosen = checked_modes(self.policy, self.view, [int(d) for d in np.flatnonzero(rejected)])
        coins = np.array([0.0 if chosen.get(d) == UL else 1.0 for d in range(rejected.size)])
        self.coin_rows.append(coins)
        return coins


@dataclass(frozen=True)
class PolicyEvaluation:
    """A policy's simulated rounds on a plan's instance beside adaptive's on the same draws:
    ``result`` and ``adaptive`` (`MonteCarloResult`), ``paired`` (the policy against adaptive,
    percent, with its 95% interval; None for adaptive itself) and every round (``rounds``)."""

    policy: str
    result: MonteCarloResult
    adaptive: MonteCarloResult
    paired: PairedDifference | None
    rounds: PolicyRounds

    @property
    def goodput_tokens_per_s(self) -> float:
        return self.result.goodput_tokens_per_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "rounds": self.result.rounds,
            "goodput_tokens_per_s": self.goodput_tokens_per_s,
            "adaptive_goodput_tokens_per_s": self.adaptive.goodput_tokens_per_s,
            "mean_draft_len": float(self.rounds.draft_len.mean()),
            "vs_adaptive": self.paired.to_dict() if self.paired else None,
        }


def built_in_round_policy(name: str, plan_gamma, baseline_gamma: dict, coin_seed: int) -> FixedPolicy:
    """A built-in run policy as a round policy: adaptive at the plan's γ, a mode baseline at its
    own optimised γ (the plan's ``baseline_draft_len``)."""
    if name == REFERENCE:
        return FixedPolicy(np.asarray(plan_gamma), "optimal")
    if name not in baseline_gamma:
        raise ConfigError(f"policy: {name!r} needs the plan's baselines (ms.plan(..., baselines=True))")
    rule = BUILT_IN_RULES[name]
    return FixedPolicy(np.asarray(baseline_gamma[name]), rule, np.random.default_rng([coin_seed, 0xC017]))


def evaluate_policy(
    inst: Instance,
    uniforms: np.ndarray,
    split: str,
    policy: str | UserPolicy,
    adaptive: FixedPolicy,
    make_rng: Callable[[], np.random.Generator],
    rounds: int,
    built_in: Callable[[str], FixedPolicy],
    label: str | None = None,
) -> PolicyEvaluation:
    """``rounds`` simulated rounds of ``policy`` (a built-in name of BUILT_IN_RULES or a user
    policy) and of adaptive on the same draws (``make_rng`` gives the same generator each call)."""
    if isinstance(policy, str):
        if policy not in BUILT_IN_RULES:
            raise ConfigError(f"policy: unknown value {policy!r} (allowed: {', '.join(BUILT_IN_RULES)} or module:attr)")
        label, runner = policy, built_in(policy)
    else:
        label = label or user_policy_label(policy)
        runner = UserOnModel(copy.deepcopy(policy), inst, uniforms, split, "greedy")
    own, result = simulate_policy_rounds(inst, runner, rounds, make_rng(), split)
    base, base_result = simulate_policy_rounds(inst, adaptive, rounds, make_rng(), split)
    paired = None
    if label != REFERENCE:
        paired = paired_difference(
            RoundLog.of(own.tokens, own.latency_s), RoundLog.of(base.tokens, base.latency_s), (label, REFERENCE)
        )
    return PolicyEvaluation(label, result, base_result, paired, own)


def drop_goodput(inst: Instance, uniforms: np.ndarray, policy: UserPolicy, split: str = "equal") -> tuple[float, float]:
    """A user policy on one drop's SAA samples played as successive rounds (module doc): its
    goodput and mean γ."""
    runner = UserOnModel(copy.deepcopy(policy), inst, uniforms, split, "greedy")
    rounds, _ = simulate_policy_rounds(inst, runner, uniforms.shape[0], split=split, uniforms=uniforms)
    g = rounds.draft_len
    if np.all(g == g[0]):  # one γ every round: the SAA goodput at that γ, as the built-ins' figure
        coins = np.array(runner.coin_rows)
        value = goodput(inst, g[0], uniforms, "random", split, coins).goodput_tokens_per_s
    else:
        value = float(rounds.expected_tokens.sum() / rounds.latency_s.sum())
    return float(value), float(g.mean())


def sweep_row(
    params: dict[str, Any],
    keys: Sequence[str],
    label: str,
    per_drop: Sequence[tuple[float, float]],
    adaptive_per_drop: Sequence[float],
) -> dict[str, Any]:
    """A sweep row for a user policy at one point (``params``): the ``keys`` of a built-in row, the
    service figures None (the drop computes them for the built-ins' plans only), the goodput with
    its bootstrap interval and adaptive's paired gain over it (ratio of means over the drops, as
    for the built-ins)."""
    goodputs = [x[0] for x in per_drop]
    mean, low, high, n = bootstrap_mean_ci(goodputs)
    gain, gain_low, gain_high = ratio_of_means_ci(adaptive_per_drop, goodputs)
    row: dict[str, Any] = {k: None for k in keys}
    row.update(params)
    row.update(
        policy=label,
        goodput_tokens_per_s=mean,
        goodput_low=low,
        goodput_high=high,
        adaptive_gain_pct=gain,
        adaptive_gain_low=gain_low,
        adaptive_gain_high=gain_high,
        mean_draft_len=float(np.mean([x[1] for x in per_drop])),
        n_drops=n,
        coupled_share=0.0,
        coupled_share_low=0.0,
        coupled_share_high=0.0,
    )
    return row
