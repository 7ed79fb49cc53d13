"""Monte Carlo of rounds: sampled acceptances and outcomes, the reactive solver per round.

The check on the analytic goodput: run many rounds at fixed draft lengths on a fixed channel,
sample each device's accepted prefix token by token (position i accepted with its conditional
rate), add its tokens (accepted + bonus/correction), solve the round's reactive problem for the
rejected set, and report total tokens / total time, the same ratio of expectations that G is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
