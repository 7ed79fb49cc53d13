"""Entry points: [`plan`][multispin.optimize.plan.plan] (γ per device, every round) and [`optimize_instance`][multispin.optimize.plan.optimize_instance] (the CLI's report).

The runtime calls [`plan`][multispin.optimize.plan.plan] each round with the current channel and acceptance estimates (an
`Instance`) and gets draft lengths back; after verification it
calls [`multispin.optimize.reactive.reactive`][multispin.optimize.reactive.reactive] with the round's rejected set to get modes,
powers and bandwidths. Neither reads a clock or draws hidden randomness: uniforms (or a
Generator) are passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from multispin.errors import ConfigError
from multispin.optimize.bandwidth import optimized_split_batch
from multispin.optimize.baselines import PLAN_POLICIES, baselines, optimise_draft_lengths
from multispin.optimize.bound import communication_bound
from multispin.optimize.draft_lengths import goodput_upper_bound
from multispin.optimize.goodput import Goodput, SAAObjective, expected_tokens, goodput, outcomes, rejection_prob
from multispin.optimize.reactive import MODE_POLICIES, SPLITS, optimal_modes_batch, ul_latency_s
from multispin.optimize.verification import all_coupled, as_standard, check_verify, choose_verification
from multispin.system.instance import Instance
from multispin.vocabulary import COUPLED, STANDARD, TARGET_ONLY, ModeRule


@dataclass(frozen=True)
class Certificate:
    """How good a plan is known to be: its G next to the best baseline on the same samples, the
    free-communication bound max_γ G_max(γ), and the communication-aware bound on max_γ G(γ) on
    the same samples (`multispin.optimize.bound`; both are true upper bounds on every plan's
    G, the second never above the first). ``proven_optimal``: a search proved the plan is the
    SAA optimum (``policy="certified"``)."""

    goodput_tokens_per_s: float
    best_baseline: str
    best_baseline_tokens_per_s: float
    upper_bound_tokens_per_s: float
    communication_bound_tokens_per_s: float = float("nan")
    bound_method: str = "none"
    proven_optimal: bool = False

    @property
    def gain_over_best_baseline_pct(self) -> float:
        b = self.best_baseline_tokens_per_s
        return 100.0 * (self.goodput_tokens_per_s / b - 1.0) if b > 0 else float("nan")

    @property
    def gap_to_upper_bound_pct(self) -> float:
        return 100.0 * (1.0 - self.goodput_tokens_per_s / self.upper_bound_tokens_per_s)

    @property
    def gap_to_communication_bound_pct(self) -> float:
        """How far below the communication-aware bound the plan is: no plan on these samples is
        more than this (%) better."""
        return 100.0 * (1.0 - self.goodput_tokens_per_s / self.communication_bound_tokens_per_s)

    def to_dict(self) -> dict:
        return {
            **self.__dict__,
            "gain_over_best_baseline_pct": self.gain_over_best_baseline_pct,
            "gap_to_upper_bound_pct": self.gap_to_upper_bound_pct,
            "gap_to_communication_bound_pct": self.gap_to_communication_bound_pct,
        }


def certify(
    inst: Instance,
    goodput_tokens_per_s: float,
    baselines: dict[str, float],
    obj: SAAObjective | None = None,
    draft_len: np.ndarray | None = None,
    proven_optimal: bool = False,
    bound: float | None = None,
) -> Certificate:
    """The [`Certificate`][multispin.optimize.plan.Certificate] of a plan reaching ``goodput_tokens_per_s`` against ``baselines``;
    with the plan's objective ``obj`` and ``draft_len``, also the communication-aware bound
    (``bound``, e.g. a branch and bound's, replaces it where it is lower)."""
    name = max(baselines, key=lambda b: baselines[b]) if baselines else "none"
    free = goodput_upper_bound(inst)
    comm, method = float("nan"), "none"
    if obj is not None and draft_len is not None:
        cb = communication_bound(obj, draft_len)
        comm, method = cb.value, cb.method
    if bound is not None and not bound >= comm:
        comm, method = float(bound), "branch_and_bound"
    if proven_optimal:
        comm = min(comm, float(goodput_tokens_per_s)) if np.isfinite(comm) else float(goodput_tokens_per_s)
    return Certificate(
        float(goodput_tokens_per_s),
        name,
        float(baselines.get(name, float("nan"))),
        free,
        float(comm),
        method,
        bool(proven_optimal),
    )


@dataclass(frozen=True)
class Plan:
    """Draft lengths for one round and what they are expected to give."""

    draft_len: np.ndarray  # (K,) γ_k
    goodput: Goodput
    policy: str
    modes: ModeRule
    split: str
    expected_tokens: np.ndarray  # (K,) E[N_k]
    rejection_prob: np.ndarray  # (K,)
    # the draft baselines the search started from, on the same samples (shipped search only)
    baselines: dict = field(default_factory=dict)
    # policy "certified": the branch and bound's upper bound on max_γ G and whether it is met
    upper_bound: float = float("nan")
    proven_optimal: bool = False
    # (K,) bool: the devices that verify coupled (all False unless planned with verify="coupled"/"choose")
    coupled: np.ndarray = None  # type: ignore[assignment]  # filled in __post_init__

    def __post_init__(self) -> None:
        k = np.asarray(self.draft_len).shape[0]
        c = np.zeros(k, dtype=bool) if self.coupled is None else np.asarray(self.coupled, dtype=bool)
        object.__setattr__(self, "coupled", c)

    @property
    def goodput_tokens_per_s(self) -> float:
        return self.goodput.goodput_tokens_per_s

    @property
    def coupled_share(self) -> float:
        """The fraction of devices that verify coupled."""
        return float(np.mean(self.coupled)) if self.coupled.size else 0.0


def _uniforms(inst: Instance, uniforms, rng, n_saa: int) -> np.ndarray:
    if uniforms is not None:
        return np.asarray(uniforms, dtype=float)
    if rng is None:
        raise ConfigError("uniforms: pass pre-drawn SAA uniforms or a numpy Generator (rng)")
    if n_saa < 1:
        raise ConfigError(f"n_saa: must be in [1, inf) (got {n_saa})")
    return rng.random((n_saa, inst.num_devices))


def plan(
    inst: Instance,
    *,
    uniforms: np.ndarray | None = None,
    rng: np.random.Generator | None = None,
    n_saa: int = 1000,
    policy: str = "greedy",
    modes: ModeRule = "optimal",
    split: str = "equal",
    mode_uniforms: np.ndarray | None = None,
    warm_start: np.ndarray | None = None,
    extra_starts=None,
    channel_gains=None,
    deadline_s: float | None = None,
    verify: str = STANDARD,
) -> Plan:
    """Draft lengths γ per device that maximise the SAA goodput of this round's instance.

    ``uniforms`` (N_SAA, K) or ``rng`` (draws them); ``policy`` one of greedy (shipped),
    fast (the per-round search: the same plans at a tenth of the CPU, `multispin.optimize.fast_search`),
    greedy_paper, best_uniform, computation_only, oracle; ``modes`` the reactive policy the plan
    assumes (optimal, all_ul, all_dl, random — random needs ``mode_uniforms`` or ``rng``);
    ``split``: equal or optimized bandwidth split. ``warm_start`` (K draft lengths, e.g. last
    round's plan) and ``extra_starts`` (γ vectors by name, e.g. the baselines' plans) are further
    starting points of the shipped search (policy ``greedy``): its plan is never below any of them
    on this round's samples. ``channel_gains`` (``(gain_ul, gain_dl)``, each (N_SAA, K)): robust
    planning, every SAA sample on its own channel draw (e.g. from the posterior of the channel
    given its estimate, `multispin.system.channel_process.ChannelEstimate.posterior_gains`);
    the policies that enumerate the instance's own rejected sets (oracle, certified) refuse it.
    ``deadline_s`` (policy ``fast`` only): CPU seconds after which the search returns the best plan
    found so far.
    With ``inst.gamma_cap`` (e.g. each job's remaining budget − 1) no device is planned past its cap.
    ``verify``: ``standard`` (every device, the paper's model; the plan is the same bit for bit as
    before the coupled rule existed), ``coupled`` (every device; needs ``inst.alpha_coupled``) or
    ``choose`` (per device with γ, `multispin.optimize.verification`; all standard where the
    instance has no coupled acceptance). The plan's ``coupled`` says which devices verify coupled.
    """
    check_verify(verify)
    if verify == COUPLED:
        inst, planner = all_coupled(inst), _one_rule_plan
    elif verify == STANDARD or not inst.coupled_available:
        inst, planner = as_standard(inst), _one_rule_plan
    else:
        planner = _choose_plan
    return planner(
        inst,
        uniforms=uniforms,
        rng=rng,
        n_saa=n_saa,
        policy=policy,
        modes=modes,
        split=split,
        mode_uniforms=mode_uniforms,
        warm_start=warm_start,
        extra_starts=extra_starts,
        channel_gains=channel_gains,
        deadline_s=deadline_s,
    )


def _one_rule_plan(
    inst: Instance,
    *,
    uniforms: np.ndarray | None,
    rng: np.random.Generator | None,
    n_saa: int,
    policy: str,
    modes: ModeRule,
    split: str,
    mode_uniforms: np.ndarray | None,
    warm_start: np.ndarray | None,
    extra_starts,
    channel_gains,
    deadline_s: float | None,
    objective: SAAObjective | None = None,
) -> Plan:
    """`plan` when every device verifies by the same rule (the one ``inst`` carries). ``objective``:
    the `SAAObjective` these arguments make, where the caller has built it (`_objective`)."""
    obj = objective
    if obj is None:
        obj = _objective(inst, uniforms, rng, n_saa, policy, modes, split, mode_uniforms, channel_gains)
    starts = _search_starts(policy, extra_starts, warm_start, deadline_s)
    dp = optimise_draft_lengths(obj, policy, starts or None, warm_start if policy == "fast" else None, deadline_s)
    # past a device's gamma_cap the objective is flat in its tokens and outcomes, so a search may
    # stop there; the engine would draft the cap, which is never worse (T_comp can only fall)
    draft_len, value = inst.capped(dp.draft_len), dp.goodput
    if not np.array_equal(draft_len, dp.draft_len):
        value = obj.evaluate(draft_len)
    return Plan(
        draft_len,
        value,
        dp.policy,
        modes,
        split,
        expected_tokens(inst, draft_len),
        rejection_prob(inst, draft_len),
        dict(dp.baselines),
        dp.upper_bound,
        dp.proven_optimal,
        inst.coupled_mask.copy(),
    )


def _objective(
    inst: Instance, uniforms, rng, n_saa: int, policy: str, modes: ModeRule, split: str, mode_uniforms, channel_gains
) -> SAAObjective:
    """The SAA objective of `plan`'s arguments, each checked."""
    if policy not in PLAN_POLICIES:
        raise ConfigError(f"policy: unknown value {policy!r} (allowed: {', '.join(PLAN_POLICIES)})")
    if modes not in MODE_POLICIES:
        raise ConfigError(f"modes: unknown value {modes!r} (allowed: {', '.join(MODE_POLICIES)})")
    if split not in SPLITS:
        raise ConfigError(f"split: unknown value {split!r} (allowed: {', '.join(SPLITS)})")
    u = _uniforms(inst, uniforms, rng, n_saa)
    mode_uniforms = _mode_uniforms(modes, mode_uniforms, rng, u.shape)
    if channel_gains is not None and policy in ("oracle", "certified"):
        raise ConfigError(
            f"policy: {policy!r} enumerates one channel's rejected sets; robust planning over "
            "channel samples allows greedy, greedy_paper, best_uniform, computation_only"
        )
    return SAAObjective(inst, u, modes, split, mode_uniforms if modes == "random" else None, channel_gains)


def _mode_uniforms(modes: ModeRule, mode_uniforms: np.ndarray | None, rng, shape) -> np.ndarray | None:
    """The uniforms that draw the random mode policy's modes: those given, else (random policy only)
    drawn from ``rng``."""
    if modes == "random" and mode_uniforms is None:
        if rng is None:
            raise ConfigError("mode_uniforms: the random mode policy needs mode uniforms or rng")
        mode_uniforms = rng.random(shape)
    return mode_uniforms


def _search_starts(policy: str, extra_starts, warm_start, deadline_s: float | None) -> dict[str, np.ndarray]:
    """The named starting points of the searches (``extra_starts`` and last round's plan); the
    per-round search (fast) takes the warm start apart, as its own seed."""
    if deadline_s is not None and (policy != "fast" or not deadline_s >= 0):
        raise ConfigError(
            f"deadline_s: a number of seconds ≥ 0, for policy fast only (got {deadline_s!r} with policy {policy!r})"
        )
    starts = dict(extra_starts or {})
    if warm_start is not None:
        if policy not in ("greedy", "certified", "fast"):
            raise ConfigError(
                f"warm_start: only the searches (policies greedy, certified, fast) take one (got {policy!r})"
            )
        if policy != "fast":
            starts["warm"] = np.asarray(warm_start)
    return starts


def _choose_plan(inst: Instance, **kw) -> Plan:
    """``plan(verify="choose")``: the all-standard plan, then the three-way search from it and from
    all coupled (`multispin.optimize.verification.choose_verification`); the draft-length policy
    also polishes γ once on the mask the moves reach (not ``fast``: the per-round search)."""
    std = as_standard(inst)
    args = ("uniforms", "rng", "n_saa", "policy", "modes", "split", "mode_uniforms", "channel_gains")
    # one objective for the all-standard plan and the search from it: its caches (sample levels,
    # flip solver) are built once
    obj = _objective(std, *(kw[a] for a in args))
    base = _one_rule_plan(std, **kw, objective=obj)
    u, mu = obj.uniforms, obj.mode_uniforms
    policy = kw["policy"]

    def polish(masked: Instance, g: np.ndarray) -> np.ndarray:
        o = SAAObjective(masked, u, base.modes, base.split, mu, kw["channel_gains"])
        starts = {"current": g} if policy in ("greedy", "certified") else None
        return optimise_draft_lengths(o, policy, starts).draft_len

    # the per-round search (fast) skips the polish: another full search would double its time
    fast = policy == "fast"
    choice = choose_verification(obj, base.draft_len, None if fast else polish, subsample=fast)
    chosen = std.with_coupled(choice.coupled)
    return Plan(
        choice.draft_len,
        choice.goodput,
        f"{base.policy}+choose",
        base.modes,
        base.split,
        expected_tokens(chosen, choice.draft_len),
        rejection_prob(chosen, choice.draft_len),
        {**base.baselines, **{f"all_{name}": v for name, v in choice.starts.items()}},
        coupled=choice.coupled.copy(),
    )


@dataclass(frozen=True)
class DeviceStats:
    """Per-device view of a plan on its SAA outcomes (all arrays (K,))."""

    ul_share: np.ndarray  # fraction of all outcomes in which the device is served in UL mode
    dl_share: np.ndarray
    ul_share_given_rejected: np.ndarray
    ul_latency_s_given_rejected: np.ndarray  # mean UL latency at P^ul on its equal share, when rejected
    ul_latency_s_alone: np.ndarray  # UL latency at P^ul with the whole band B


def device_stats(inst: Instance, gamma, uniforms: np.ndarray, split: str = "equal") -> DeviceStats:
    """Who is served in UL/DL over the SAA outcomes at draft lengths γ, and their UL latencies."""
    o = outcomes(inst, gamma, uniforms)
    is_ul: np.ndarray | None
    if split == "optimized":
        is_ul = optimized_split_batch(o, inst).is_ul
    else:
        is_ul = optimal_modes_batch(o, inst, return_modes=True).is_ul
    assert is_ul is not None  # asked for (return_modes)
    n = o.shape[0]
    rej = o.sum(axis=0)
    share = inst.radio.bandwidth_hz / np.maximum(o.sum(axis=1), 1)
    tau = np.where(o, ul_latency_s(inst, share[:, None]), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ul_given = np.where(rej > 0, is_ul.sum(axis=0) / rej, np.nan)
        lat_given = np.where(rej > 0, tau.sum(axis=0) / rej, np.nan)
    return DeviceStats(
        ul_share=is_ul.sum(axis=0) / n,
        dl_share=(o & ~is_ul).sum(axis=0) / n,
        ul_share_given_rejected=ul_given,
        ul_latency_s_given_rejected=lat_given,
        ul_latency_s_alone=ul_latency_s(inst, inst.radio.bandwidth_hz),
    )


@dataclass
class OptimizeReport:
    """Everything ``multispin optimize`` prints: the plan, per-device stats, baselines."""

    inst: Instance
    plan: Plan
    stats: DeviceStats
    baselines: dict[str, float] = field(default_factory=dict)
    baseline_draft_len: dict[str, list[int]] = field(default_factory=dict)
    certificate: Certificate | None = None


def optimize_instance(
    inst: Instance,
    uniforms: np.ndarray,
    mode_uniforms: np.ndarray,
    policy: str = "greedy",
    split: str = "equal",
    with_baselines: bool = True,
    verify: str = STANDARD,
) -> OptimizeReport:
    """Plan one instance and compare against every baseline on the same samples.

    The baselines run first and the shipped search starts from each of their γ, so with
    ``policy="greedy"`` the plan is never below any of them; the certificate says by how much it
    beats the best one and how far it is from the free-communication bound. ``verify`` as in
    `plan`; with ``choose`` the paper's adaptive plan (``adaptive``) and all-coupled join the
    baselines, and the certificate's bounds cover every coupled mask (`three_way_certificate`).
    """
    check_verify(verify)
    std = as_standard(inst)
    base = baselines(std, uniforms, mode_uniforms, policy=policy, split=split) if with_baselines else {}
    starts = {name: dp.draft_len for name, dp in base.items()} if policy in ("greedy", "certified") else None
    p = plan(inst, uniforms=uniforms, policy=policy, split=split, extra_starts=starts, verify=verify)
    chosen = inst.with_coupled(p.coupled) if inst.coupled_available else std
    stats = device_stats(chosen, p.draft_len, uniforms, split)
    rep = OptimizeReport(chosen, p, stats)
    for name, dp in base.items():
        rep.baselines[name] = dp.goodput_tokens_per_s
        rep.baseline_draft_len[name] = dp.draft_len.tolist()
    if verify != STANDARD and inst.coupled_available:
        _add_coupled_baselines(rep, inst, uniforms, policy, split, starts)
        rep.certificate = three_way_certificate(inst, uniforms, split, p, rep.baselines)
        return rep
    obj = SAAObjective(inst, uniforms, "optimal", split)
    bb = p.upper_bound if np.isfinite(p.upper_bound) else None
    rep.certificate = certify(
        inst,
        p.goodput_tokens_per_s,
        rep.baselines or p.baselines,
        obj,
        p.draft_len,
        proven_optimal=p.proven_optimal,
        bound=bb,
    )
    return rep


def _add_coupled_baselines(rep: OptimizeReport, inst: Instance, uniforms, policy: str, split: str, starts) -> None:
    """The paper's adaptive plan (all standard, optimal modes) and all-coupled, as baselines of a
    plan that chooses the verification rule."""
    for name, v in (("adaptive", STANDARD), ("all_coupled", COUPLED)):
        bp = plan(inst, uniforms=uniforms, policy=policy, split=split, extra_starts=starts, verify=v)
        rep.baselines[name] = bp.goodput_tokens_per_s
        rep.baseline_draft_len[name] = bp.draft_len.tolist()


def three_way_certificate(inst: Instance, uniforms, split: str, p: Plan, baselines: dict[str, float]) -> Certificate:
    """The certificate of a plan that chooses the verification rule: both bounds hold over every
    coupled mask as well as every γ (`multispin.optimize.bound.communication_bound` with the
    coupled option: a coupled device's tokens and drafting time, no airtime)."""
    std = as_standard(inst)
    cpl = all_coupled(inst)
    option = (cpl.expected_tokens, cpl.token_latency_s)
    obj = SAAObjective(std, uniforms, "optimal", split)
    table = std.num_devices <= 12  # the exact-table surrogate: 2^K sets
    cb = communication_bound(obj, np.where(p.coupled, 0, p.draft_len), table=table, coupled=option)
    name = max(baselines, key=lambda b: baselines[b]) if baselines else "none"
    return Certificate(
        float(p.goodput_tokens_per_s),
        name,
        float(baselines.get(name, float("nan"))),
        cb.free_communication,
        cb.value,
        cb.method,
    )


def target_only_plan(inst: Instance) -> Plan:
    """The plan of plain decoding: γ = 0 everywhere, one token per device, no communication."""
    gamma = np.zeros(inst.num_devices, dtype=int)
    g = goodput(inst, gamma, np.zeros((1, inst.num_devices)))  # nothing is ever rejected at γ = 0
    return Plan(gamma, g, TARGET_ONLY, "optimal", "equal", expected_tokens(inst, gamma), rejection_prob(inst, gamma))
