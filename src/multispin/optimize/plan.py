"""Entry points: :func:`plan` (γ per device, every round) and :func:`optimize_scenario` (the CLI's report).

The runtime calls :func:`plan` each round with the current channel and acceptance estimates (an
:class:`~multispin.system.instance.Instance`) and gets draft lengths back; after verification it
calls :func:`multispin.optimize.reactive.reactive` with the round's rejected set to get modes,
powers and bandwidths. Neither reads a clock or draws hidden randomness: uniforms (or a
Generator) are passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from multispin.errors import ConfigError
from multispin.optimize.baselines import DRAFT_POLICIES, all_baselines, optimise_draft_lengths
from multispin.optimize.bandwidth import optimized_split_batch
from multispin.optimize.goodput import Goodput, SAAObjective, expected_tokens, outcomes, rejection_prob
from multispin.optimize.reactive import MODE_POLICIES, SPLITS, optimal_modes_batch, ul_latency_s
from multispin.system.instance import Instance


@dataclass(frozen=True)
class Plan:
    """Draft lengths for one round and what they are expected to give."""

    draft_len: np.ndarray  # (K,) γ_k
    goodput: Goodput
    policy: str
    modes: str
    split: str
    expected_tokens: np.ndarray  # (K,) E[N_k]
    rejection_prob: np.ndarray  # (K,)

    @property
    def goodput_tokens_per_s(self) -> float:
        return self.goodput.goodput_tokens_per_s


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
    modes: str = "optimal",
    split: str = "equal",
    mode_uniforms: np.ndarray | None = None,
    warm_start: np.ndarray | None = None,
) -> Plan:
    """Draft lengths γ per device that maximise the SAA goodput of this round's instance.

    ``uniforms`` (N_SAA, K) or ``rng`` (draws them); ``policy`` one of greedy (shipped),
    greedy_paper, best_uniform, computation_only, oracle; ``modes`` the reactive policy the plan
    assumes (optimal, all_ul, all_dl, random — random needs ``mode_uniforms`` or ``rng``);
    ``split``: equal or optimized bandwidth split. ``warm_start`` (K draft lengths, e.g. last
    round's plan) replaces the policy by ±1 local search from that point: cheap enough to re-plan
    every round, never worse than the warm start on this round's samples.
    """
    if policy not in DRAFT_POLICIES:
        raise ConfigError(f"policy: unknown value {policy!r} (allowed: {', '.join(DRAFT_POLICIES)})")
    if modes not in MODE_POLICIES:
        raise ConfigError(f"modes: unknown value {modes!r} (allowed: {', '.join(MODE_POLICIES)})")
    if split not in SPLITS:
        raise ConfigError(f"split: unknown value {split!r} (allowed: {', '.join(SPLITS)})")
    u = _uniforms(inst, uniforms, rng, n_saa)
    if modes == "random" and mode_uniforms is None:
        if rng is None:
            raise ConfigError("mode_uniforms: the random mode policy needs mode uniforms or rng")
        mode_uniforms = rng.random(u.shape)
    obj = SAAObjective(inst, u, modes, split, mode_uniforms if modes == "random" else None)
    if warm_start is not None:
        from multispin.optimize.draft_lengths import two_phase_greedy

        dp = two_phase_greedy(obj, start=np.asarray(warm_start))
    else:
        dp = optimise_draft_lengths(obj, policy)
    return Plan(dp.draft_len, dp.goodput, dp.policy, modes, split, expected_tokens(inst, dp.draft_len),
                rejection_prob(inst, dp.draft_len))


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
    if split == "optimized":
        is_ul = optimized_split_batch(o, inst).is_ul
    else:
        is_ul = optimal_modes_batch(o, inst, return_modes=True).is_ul
    n = o.shape[0]
    rej = o.sum(axis=0)
    share = inst.radio.bandwidth_hz / np.maximum(o.sum(axis=1), 1)
    tau = np.where(o, ul_latency_s(inst, share[:, None]), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ul_given = np.where(rej > 0, is_ul.sum(axis=0) / rej, np.nan)
        lat_given = np.where(rej > 0, tau.sum(axis=0) / rej, np.nan)
    return DeviceStats(
        ul_share=is_ul.sum(axis=0) / n, dl_share=(o & ~is_ul).sum(axis=0) / n,
        ul_share_given_rejected=ul_given, ul_latency_s_given_rejected=lat_given,
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


def optimize_instance(
    inst: Instance,
    uniforms: np.ndarray,
    mode_uniforms: np.ndarray,
    policy: str = "greedy",
    split: str = "equal",
    with_baselines: bool = True,
) -> OptimizeReport:
    """Plan one instance and compare against every baseline on the same samples."""
    p = plan(inst, uniforms=uniforms, policy=policy, split=split)
    stats = device_stats(inst, p.draft_len, uniforms, split)
    rep = OptimizeReport(inst, p, stats)
    if with_baselines:
        for name, dp in all_baselines(inst, uniforms, mode_uniforms, policy, split).items():
            rep.baselines[name] = dp.goodput_tokens_per_s
            rep.baseline_draft_len[name] = dp.draft_len.tolist()
    return rep
