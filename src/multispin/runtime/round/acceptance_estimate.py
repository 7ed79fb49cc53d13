"""Online acceptance estimates from verdicts: each device's α, shrunk towards its group's.

Under the i.i.d. model every drafted position a verdict reaches is a Bernoulli(α) trial: a round
that accepted a tokens and rejected the next adds a successes and 1 failure; all γ accepted adds
γ successes.

Devices that run the same draft on the same task (here: devices that share a prior α) have the
same acceptance up to the prompts they happen to get, so a device's own few verdicts are a noisy
estimate of it. Planning on that noise hands lucky devices long drafts, and the longest draft
sets every device's T_comp. `AcceptanceEstimator` therefore plans each device on an empirical
Bayes (beta-binomial) estimate:

- the group's rate ρ pools the prior (``prior_weight`` trials at the prior α) and every member's
  trials;
- the spread τ² of the members' true rates around ρ is estimated by moments of their excess
  successes (`_spread_by_moments`; the members' counts spread more than their own noise, or not
  at all), a noise that holds for drafts stopped at their first rejection, not the binomial's;
- device k with n_k trials and s_k successes plans on (s_k + m·ρ) / (n_k + m), m = ρ(1 − ρ)/τ² − 1
  but never below ``prior_weight``: its own rate once it has many more trials than m, the group's
  while it has few, and the group's always when τ² = 0.

The binomial moments, and no floor on m, had one round's verdicts (a rejection at the first
position next to a member that accepted all γ) read as a spread of 0.2 between members: one
rejection took a device from 0.83 to 0.41, where the all-UL policy stops drafting for it, and a
device that does not draft gets no verdict to undo it (smollm2-135m testbed, seed 48: ten rounds
without a draft). On simulated groups of 4 devices the mean error after one round falls from
0.115 to 0.051 and is unchanged after 20 rounds (tests/runtime/round/test_acceptance_estimate.py).

``pooling="device"`` is the estimate without a group (``prior_weight`` trials at the prior, then
the device's own trials): kept to measure what pooling changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from multispin.errors import ConfigError

ALPHA_FLOOR, ALPHA_CEIL = 0.02, 0.995
Pooling = Literal["group", "device"]
POOLINGS = ("group", "device")


def groups_of(prior_alpha: Sequence[float]) -> np.ndarray:
    """Group index per device: devices with the same prior α (same draft and task) share one."""
    _, inverse = np.unique(np.asarray(prior_alpha, dtype=float), return_inverse=True)
    return inverse.ravel()


class AcceptanceEstimator:
    """Per-device acceptance rate from verdicts, starting from a prior (module docstring)."""

    def __init__(
        self,
        prior_alpha: np.ndarray,
        prior_weight: float = 8.0,
        pooling: Pooling = "group",
        groups: Sequence[int] | None = None,
    ):
        if pooling not in POOLINGS:
            raise ConfigError(f"pooling: unknown value {pooling!r} (allowed: {', '.join(POOLINGS)})")
        self.prior = np.clip(np.asarray(prior_alpha, dtype=float), ALPHA_FLOOR, ALPHA_CEIL)
        self.prior_weight = float(prior_weight)
        self.pooling = pooling
        self.groups = groups_of(self.prior) if groups is None else np.asarray(groups, dtype=int)
        if self.groups.shape != self.prior.shape:
            raise ConfigError(f"groups: need one group per device ({self.prior.size}), got {self.groups.size}")
        self.own_successes = np.zeros(self.prior.shape)
        self.own_trials = np.zeros(self.prior.shape)

    def update(self, index: int, draft_len: int, num_accepted: int, rejected: bool) -> None:
        if draft_len == 0:
            return
        self.own_successes[index] += num_accepted
        self.own_trials[index] += num_accepted + (1 if rejected else 0)

    # the pre-pooling view (successes and trials with the prior's pseudo-trials), kept for callers
    @property
    def successes(self) -> np.ndarray:
        return self.prior * self.prior_weight + self.own_successes

    @property
    def trials(self) -> np.ndarray:
        return self.prior_weight + self.own_trials

    def _group_fit(self, members: np.ndarray) -> tuple[float, float, float]:
        """(ρ, m, var ρ) of one group: pooled rate, prior strength of the spread, ρ's variance."""
        s, n = self.own_successes[members], self.own_trials[members]
        w = self.prior_weight * members.size  # each member's prior trials count once in the pool
        rho = float((w * self.prior[members].mean() + s.sum()) / (w + n.sum()))
        rho = min(max(rho, ALPHA_FLOOR), ALPHA_CEIL)
        seen = n > 0
        big_n = n[seen].sum()
        tau2 = 0.0
        if seen.sum() >= 2 and big_n > 0:
            tau2 = _spread_by_moments(s[seen], n[seen], rho)
        m = rho * (1 - rho) / tau2 - 1.0 if tau2 > 0 else np.inf
        # never fewer pseudo-trials at ρ than the prior's own weight: a device's first few verdicts
        # (one round: a rejection at the first position, or all γ accepted) say little about its
        # own rate, and τ² from a few members' few rounds is mostly their noise
        return rho, max(m, self.prior_weight), rho * (1 - rho) / (w + big_n)

    def posterior(self) -> tuple[np.ndarray, np.ndarray]:
        """(estimate, standard deviation) of every device's α."""
        if self.pooling == "device":
            a, n = self.successes / self.trials, self.trials
            return a, np.sqrt(a * (1 - a) / (n + 1))
        est, sd = np.empty(self.prior.shape), np.empty(self.prior.shape)
        for g in np.unique(self.groups):
            members = np.flatnonzero(self.groups == g)
            rho, m, var_rho = self._group_fit(members)
            s, n = self.own_successes[members], self.own_trials[members]
            if np.isinf(m):
                m = 1e12  # τ² = 0: every member on the group rate (its interval still widened below)
            a = (s + m * rho) / (n + m)
            shrink = m / (n + m)  # the weight of the (uncertain) group rate in each estimate
            # τ² from a few members is itself uncertain (often 0 when the spread is real): the
            # interval also allows the whole distance of a member's own rate from ρ as its bias
            own = np.divide(s, n, out=np.full(n.shape, rho), where=n > 0)
            excess = (own - rho) ** 2
            sd[members] = np.sqrt(a * (1 - a) / (n + m + 1) + shrink**2 * (var_rho + excess))
            est[members] = a
        return est, sd

    @property
    def alpha(self) -> np.ndarray:
        return np.clip(self.posterior()[0], ALPHA_FLOOR, ALPHA_CEIL)


def _spread_by_moments(s: np.ndarray, n: np.ndarray, rho: float) -> float:
    """τ², the spread of the members' own rates around ρ, by moments of their excess successes
    s − ρ·n. A draft stops at its first rejection, so a member's trial count depends on its
    outcomes and its rate s/n is not binomial (one round: 0/1 or γ/γ); but s − α·n is a sum of
    centred trials up to a stopping time, whose second moment is α(1 − α)·E[n] (Wald's identity),
    whatever stopped it. So Σ (s − ρn)² ≈ ρ(1 − ρ)(N − Σn²/N) + τ²·(Σn² − 2Σn³/N + (Σn²/N)²)."""
    big_n, n2 = float(n.sum()), float(np.sum(n**2))
    denom = n2 - 2 * float(np.sum(n**3)) / big_n + (n2 / big_n) ** 2
    if denom <= 0:
        return 0.0
    excess = float(np.sum((s - rho * n) ** 2))
    return max(0.0, (excess - rho * (1 - rho) * (big_n - n2 / big_n)) / denom)
