"""Monte Carlo of rounds: sampled acceptances and outcomes, the reactive solver per round.

The check on the analytic goodput: run many rounds at fixed draft lengths on a fixed channel,
sample each device's accepted prefix token by token (position i accepted with its conditional
rate), add its tokens (accepted + bonus/correction), solve the round's reactive problem for the
rejected set, and report total tokens / total time, the same ratio of expectations that G is.

`simulate_policy_rounds` runs rounds one after another for a policy that decides round by round
(a user's policy, docs/own-policy.md): γ before each round, seeing the last round, and the modes
of each rejected set after verification, as the testbed asks them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from multispin.errors import ConfigError
from multispin.optimize.goodput import _gamma, expected_tokens, t_comp_s
from multispin.optimize.reactive import t_comm_batch
from multispin.system.instance import Instance
from multispin.vocabulary import ModeRule


@dataclass(frozen=True)
class MonteCarloResult:
    """Totals over the simulated rounds."""

    rounds: int
    tokens: float
    time_s: float
    mean_t_comm_s: float
    rejection_rate: np.ndarray  # (K,) share of rounds the device needed a correction over the air
    mean_tokens: np.ndarray  # (K,) per round

    @property
    def goodput_tokens_per_s(self) -> float:
        return self.tokens / self.time_s


def simulate_rounds(
    inst: Instance,
    gamma,
    n_rounds: int,
    rng: np.random.Generator,
    modes: ModeRule = "optimal",
    split: str = "equal",
    chunk: int = 4096,
) -> MonteCarloResult:
    """Simulate ``n_rounds`` rounds at draft lengths γ; randomness only from ``rng``."""
    g = _gamma(inst, gamma)
    k = inst.num_devices
    tc = float(t_comp_s(inst, g))
    if inst.gamma_cap is not None:  # a γ past a device's cap is drafted as the cap (as the tables are)
        g = np.minimum(g, inst.gamma_cap)
    gmax = max(int(g.max()), 1)
    alpha_pos = np.broadcast_to(_rate_per_position(inst), (k, inst.gamma_max))[:, :gmax]
    corrected = ~inst.coupled_mask  # a coupled device commits x* itself: never corrected over the air
    tokens = 0.0
    t_comm_total = 0.0
    rejected_count = np.zeros(k)
    tokens_dev = np.zeros(k)
    done = 0
    while done < n_rounds:
        m = min(chunk, n_rounds - done)
        r = rng.random((m, k, gmax))
        acc = r <= alpha_pos[None, :, :]
        acc &= np.arange(gmax)[None, None, :] < g[None, :, None]  # only drafted positions
        accepted = np.cumprod(acc, axis=2).sum(axis=2)  # leading run of acceptances
        rejected = (accepted < g[None, :]) & corrected[None, :]
        n_tok = accepted + 1
        mu = rng.random((m, k)) if modes == "random" else None
        t_comm = t_comm_batch(rejected, inst, modes, split, mu)
        tokens += float(n_tok.sum())
        tokens_dev += n_tok.sum(axis=0)
        t_comm_total += float(t_comm.sum())
        rejected_count += rejected.sum(axis=0)
        done += m
    return MonteCarloResult(
        rounds=n_rounds,
        tokens=tokens,
        time_s=n_rounds * tc + t_comm_total,
        mean_t_comm_s=t_comm_total / n_rounds,
        rejection_rate=rejected_count / n_rounds,
        mean_tokens=tokens_dev / n_rounds,
    )


def _rate_per_position(inst: Instance) -> np.ndarray:
    """(K, 1) or (K, γ_max): each device's acceptance rate per draft position, under its own rule
    (the coupled α where the device verifies coupled)."""
    alpha = inst.alpha
    if inst.alpha_coupled is not None and inst.coupled_mask.any():
        mask = inst.coupled_mask if alpha.ndim == 1 else inst.coupled_mask[:, None]
        alpha = np.where(mask, inst.alpha_coupled, alpha)
    return alpha[:, None] if alpha.ndim == 1 else alpha


def analytic_round(
    inst, gamma: np.ndarray, modes: ModeRule, split: str, rng: np.random.Generator, samples: int = 4000
) -> tuple[float, float, float]:
    """The analytic model of one round at draft lengths γ: (Σ E[N_k] exactly, T_comp, E[T_comm] over
    `samples` fresh outcome uniforms)."""
    u = rng.random((samples, inst.num_devices))
    rejected = u > inst.survival[np.arange(inst.num_devices), gamma]
    mu = rng.random(u.shape) if modes == "random" else None
    return (
        float(expected_tokens(inst, gamma).sum()),
        float(t_comp_s(inst, gamma)),
        float(t_comm_batch(rejected, inst, modes, split, mu).mean()),
    )


# --------------------------------------------------------------------------- round by round


@dataclass(frozen=True)
class SimulatedRound:
    """One simulated round, as a round-by-round policy sees it after the round: per device (K,) its
    γ, the drafted tokens accepted and whether it was corrected over the air; the round's tokens
    (realised, and expected given γ) and its latency parts."""

    round: int
    draft_len: np.ndarray
    accepted: np.ndarray
    rejected: np.ndarray
    tokens: float
    expected_tokens: float
    t_comp_s: float
    t_comm_s: float

    @property
    def latency_s(self) -> float:
        return self.t_comp_s + self.t_comm_s


class SimulatedPolicy(Protocol):
    """What `simulate_policy_rounds` asks of a policy each round: γ before the round (seeing the
    last round), then the modes of the rejected set as the mode rule ``rule`` applies them; for
    ``rule == "random"`` ``coins`` gives one uniform per device (UL where < 1/2), which a policy
    that picks its modes itself sets to 0 (UL) or 1 (DL)."""

    rule: ModeRule

    def draft_lengths(self, r: int, last: SimulatedRound | None) -> np.ndarray: ...

    def coins(self, r: int, rejected: np.ndarray) -> np.ndarray | None: ...


@dataclass
class FixedPolicy:
    """A built-in policy as a `SimulatedPolicy`: the same γ every round and a mode rule (the random
    rule's coins from ``coin_rng``)."""

    gamma: np.ndarray
    rule: ModeRule = "optimal"
    coin_rng: np.random.Generator | None = None

    def draft_lengths(self, r: int, last: SimulatedRound | None) -> np.ndarray:
        return self.gamma

    def coins(self, r: int, rejected: np.ndarray) -> np.ndarray | None:
        if self.rule != "random":
            return None
        if self.coin_rng is None:
            raise ConfigError("coin_rng: the random mode rule needs a generator for its coins")
        return self.coin_rng.random(rejected.shape)


@dataclass(frozen=True)
class PolicyRounds:
    """Every simulated round of one policy: per round (R,) its tokens, expected tokens and latency,
    and (R, K) its γ and rejected sets."""

    draft_len: np.ndarray
    rejected: np.ndarray
    tokens: np.ndarray
    expected_tokens: np.ndarray
    latency_s: np.ndarray
    t_comm_s: np.ndarray

    @property
    def goodput_tokens_per_s(self) -> float:
        return float(self.tokens.sum() / self.latency_s.sum())

    def result(self, tokens_dev: np.ndarray) -> MonteCarloResult:
        n = self.tokens.size
        return MonteCarloResult(
            rounds=n,
            tokens=float(self.tokens.sum()),
            time_s=float(self.latency_s.sum()),
            mean_t_comm_s=float(self.t_comm_s.mean()),
            rejection_rate=self.rejected.mean(axis=0),
            mean_tokens=tokens_dev / n,
        )


def simulate_policy_rounds(
    inst: Instance,
    policy: SimulatedPolicy,
    n_rounds: int,
    rng: np.random.Generator | None = None,
    split: str = "equal",
    uniforms: np.ndarray | None = None,
) -> tuple[PolicyRounds, MonteCarloResult]:
    """``n_rounds`` rounds one after another, the policy choosing γ before each round (seeing the
    last) and the modes of each rejected set after it.

    Outcomes: with ``uniforms`` (N, K), round r is SAA sample r (rows in turn): device k keeps the
    first L drafts where u_{r,k} ≤ P(first L accepted), and is corrected where u > P(all γ_k
    accepted), the SAA objective's outcome; otherwise each round draws (K, γ_max) fresh uniforms
    from ``rng``, one per draft position, so two policies on the same seed share each position's
    acceptance draw (common random numbers)."""
    k, gmax = inst.num_devices, inst.gamma_max
    if uniforms is None and rng is None:
        raise ConfigError("rng: simulated rounds need a generator or SAA uniforms")
    alpha_pos = np.broadcast_to(_rate_per_position(inst), (k, gmax))
    corrected = ~inst.coupled_mask
    cols = np.arange(k)
    rows: list[SimulatedRound] = []
    tokens_dev = np.zeros(k)
    last: SimulatedRound | None = None
    for r in range(n_rounds):
        g = _gamma(inst, policy.draft_lengths(r, last))
        if uniforms is not None:
            u = uniforms[r % uniforms.shape[0]]
            kept = u[:, None] <= inst.accepted_survival[:, 1 : gmax + 1]
            accepted = np.minimum(kept.sum(axis=1), g)
            rejected = u > inst.survival[cols, g]
        else:
            acc = (rng.random((k, gmax)) <= alpha_pos) & (np.arange(gmax)[None, :] < g[:, None])  # type: ignore[union-attr]
            accepted = np.cumprod(acc, axis=1).sum(axis=1)
            rejected = (accepted < g) & corrected
        coins = policy.coins(r, rejected)
        t_comm = float(
            t_comm_batch(rejected[None, :], inst, policy.rule, split, None if coins is None else coins[None, :])[0]
        )
        n_tok = accepted + 1
        tokens_dev += n_tok
        last = SimulatedRound(
            r, g, accepted, rejected, float(n_tok.sum()), float(expected_tokens(inst, g).sum()),
            float(t_comp_s(inst, g)), t_comm,
        )  # fmt: skip
        rows.append(last)
    out = PolicyRounds(
        np.array([x.draft_len for x in rows]),
        np.array([x.rejected for x in rows]),
        np.array([x.tokens for x in rows]),
        np.array([x.expected_tokens for x in rows]),
        np.array([x.latency_s for x in rows]),
        np.array([x.t_comm_s for x in rows]),
    )
    return out, out.result(tokens_dev)
