"""Paired intervals for goodput comparisons on common random numbers.

A policy's steady-state goodput over a set of rounds is a ratio of sums, G = Σ N_r / Σ T_r. Two
policies run on the same seeds (drop, prompts, sampling numbers) and the same channel in round r,
so their rounds pair up by index and the difference G_a / G_b − 1 is estimated with the noise the
two runs share cancelled.

Rounds are not independent: a device's acceptance estimate, its place in a text and the job it
is on carry over from round to round. The interval is therefore the steady-state simulation
textbook's **batch means**, here with a jackknife for the ratio: each seed's rounds are cut into
consecutive batches of at least `MIN_BATCH_ROUNDS` rounds (at most `MAX_BATCHES_PER_SEED` per
seed; the same cuts for both policies, so the pairing is kept), the ratio is recomputed leaving one
batch out at a time, and the interval is built on the **log scale**: log R ± t_{M−1, 0.975} ·
jackknife s.e. of log R over the M batches of every seed, mapped back by exp. Dependence shorter
than a batch is respected; seeds are independent batches of batches. "Not significant" means the
interval covers 0.

Why the log: both quantities are ratios of positive sums, a goodput (> 0) and G_a / G_b (> 0, so
the difference is > −100%). An interval symmetric on the linear scale ignores that and, with few
batches (t_{1, 0.975} = 12.7 for a 3-round run's 2 batches), reaches below zero (a 3-round tiny
demo printed a goodput of 60.5 [−91.0, 211.9]); on the log scale the interval stays inside the
possible values, is asymmetric as a ratio's sampling distribution is, and is unchanged for
identical runs (log 1 = 0).

**Two estimators** of each comparison, named in every verdict and in summary.json:

- *realised*: the tokens each round committed, as above.
- *acceptance-conditioned*: each device's tokens replaced by their expectation given its draft,
  E[κ | draft] (`speculative.expected_kept`), which the server computes from the acceptance odds
  β_i = min(1, p_i(x_i) / q̂_i(x_i)) of every drafted position (rounds.jsonl `expected_tokens`).
  realised − expected has mean exactly 0 given everything before the acceptance test (a
  martingale difference), so this is a control variate with a known mean and coefficient 1:
  nothing is fitted, the batches and their degrees of freedom are unchanged, and the ratio of sums
  keeps its limit. It removes the acceptance uniforms' noise, which the policies share poorly
  (their γ differ, so their texts, and the positions the numbers are keyed on, part within a
  round or two); what stays is the drafts' own luck and the difficulty of each device's current
  prompt. On the 12-round K = 20 demo it cut the per-round sd of the tokens by 16–33% (adaptive
  15.5 → 13.0, all-UL 15.0 → 12.0, all-DL 19.1 → 12.8 tokens per round) and that of the per-round
  log ratio adaptive / all-UL from 0.218 to 0.155. Round latencies stay realised.

  A model-based control variate (the planner's goodput at the realised channel, its mean over
  fresh channels by Monte Carlo) was looked at first: on that run its per-round paired difference
  correlated −0.19 with the realised one (adaptive vs all-UL; −0.20 vs all-DL), because the
  channel sets γ and the airtime while the acceptance sets the token count. It is not used.

`tests/experiments/test_paired_coverage.py` checks both on simulated rounds with a known
difference, at the demo's size (one seed, `DEMO_ROUNDS` rounds, 5 batches): coverage of the 95%
interval ≥ 0.93 (0.943 realised, 0.941 conditioned over 3,000 simulated runs), the conditioned
estimator's unbiasedness, and negative controls that must fail (a shrunk interval, a numerator
built on a model's α). The simulation's prompt difficulty persists over a prompt's dozen rounds
somewhat more than the demo's rounds show; where it persists much more (a prompt-to-prompt spread
of acceptance three times the calibrated one) the conditioned interval's coverage falls under 0.9,
because batches of 4 rounds no longer hold the dependence: more batches, or seeds, are the remedy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from multispin.errors import ConfigError

LEVEL = 0.95
MIN_BATCH_ROUNDS = 4
MAX_BATCHES_PER_SEED = 8
NUMERICAL_ZERO = 1e-9  # in the estimate's units (percent, tokens/s)


Estimator = Literal["realised", "conditioned"]
ESTIMATOR_NAMES: dict[str, str] = {"realised": "realised tokens", "conditioned": "acceptance-conditioned"}


@dataclass(frozen=True)
class RoundLog:
    """Tokens and latency (s) of one policy's measured rounds: arrays (seeds, rounds); with
    `expected_tokens`, each round's E[tokens | drafts] (the conditioned estimator's numerator)."""

    tokens: np.ndarray
    latency_s: np.ndarray
    expected_tokens: np.ndarray | None = None

    @classmethod
    def of(cls, tokens, latency_s, expected_tokens=None) -> RoundLog:
        tok, lat = np.atleast_2d(np.asarray(tokens, float)), np.atleast_2d(np.asarray(latency_s, float))
        if tok.shape != lat.shape or tok.size == 0:
            raise ConfigError(
                f"round log: tokens {tok.shape} and latencies {lat.shape} must be the same "
                "non-empty (seeds, rounds) shape"
            )
        exp = None if expected_tokens is None else np.atleast_2d(np.asarray(expected_tokens, float))
        if exp is not None and exp.shape != tok.shape:
            raise ConfigError(f"round log: expected tokens {exp.shape} must have the tokens' shape {tok.shape}")
        return cls(tok, lat, exp)

    def numerator(self, estimator: Estimator) -> np.ndarray:
        """The tokens the estimator sums: realised, or expected given the drafts."""
        if estimator == "realised":
            return self.tokens
        if self.expected_tokens is None:
            raise ConfigError(
                "estimator: 'conditioned' needs each round's expected tokens (rounds.jsonl expected_tokens)"
            )
        return self.expected_tokens

    @property
    def goodput(self) -> float:
        return float(self.tokens.sum() / self.latency_s.sum())


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float

    @property
    def covers_zero(self) -> bool:
        # identical runs differ by rounding only (1e-14 %): that is no difference
        return self.low <= NUMERICAL_ZERO and self.high >= -NUMERICAL_ZERO

    def to_dict(self) -> dict:
        return {"estimate": self.estimate, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class PairedDifference:
    """G_a / G_b − 1 in percent with its paired 95% interval."""

    a: str
    b: str
    pct: Interval
    seeds: int
    rounds: int
    batches_per_seed: int
    estimator: Estimator = "realised"

    @property
    def significant(self) -> bool:
        return not self.pct.covers_zero

    @property
    def verdict(self) -> str:
        """One line: the difference, its interval and estimator, and what it means."""
        p = self.pct
        head = (
            f"{self.a} vs {self.b}: {pct_text(p.estimate)} goodput (95% interval {pct_text(p.low)} … "
            f"{pct_text(p.high)}, {ESTIMATOR_NAMES[self.estimator]})"
        )
        if not self.significant:
            return f"{head}: not significant"
        return f"{head}: {self.a} {'ahead' if p.estimate > 0 else 'behind'}"

    def to_dict(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "pct": self.pct.to_dict(),
            "significant": self.significant,
            "seeds": self.seeds,
            "rounds": self.rounds,
            "batches_per_seed": self.batches_per_seed,
            "estimator": self.estimator,
            "verdict": self.verdict,
        }


def pct_text(x: float) -> str:
    """A percentage with one decimal, or two significant digits when that would print 0.0."""
    return f"{x:+.1f}%" if abs(x) >= 0.05 or abs(x) < NUMERICAL_ZERO else f"{x:+.2g}%"


def batches_per_seed(rounds: int) -> int:
    return int(np.clip(rounds // MIN_BATCH_ROUNDS, 2, MAX_BATCHES_PER_SEED)) if rounds >= 2 else 1


def batch_sums(x: np.ndarray, per_seed: int) -> np.ndarray:
    """Sums of consecutive batches of rounds, every seed's batches in one vector (M = seeds · per_seed)."""
    edges = np.linspace(0, x.shape[1], per_seed + 1).round().astype(int)
    return np.add.reduceat(x, edges[:-1], axis=1).ravel()


def log_jackknife(ratio: Callable[[np.ndarray], np.ndarray], batches: int, level: float) -> Interval:
    """A positive ratio(weights) at all batches, with the t interval of its log from leaving each
    batch out, mapped back by exp (module docstring): low > 0 always. Without two batches, or with
    a leave-one-out ratio of 0 (a batch holding every token), the interval is (0, ∞)."""
    full = float(ratio(np.ones((1, batches)))[0])
    if batches < 2:
        return Interval(full, 0.0, np.inf)
    loo = ratio(1.0 - np.eye(batches))
    if full <= 0 or np.any(loo <= 0):
        return Interval(full, 0.0, np.inf)
    log_loo = np.log(loo)
    se = float(np.sqrt((batches - 1) / batches * np.sum((log_loo - log_loo.mean()) ** 2)))
    half = float(stats.t.ppf((1 + level) / 2, batches - 1)) * se
    return Interval(full, full * float(np.exp(-half)), full * float(np.exp(half)))


def ratio_of_sums(
    numerator: Sequence[float], denominator: Sequence[float], clusters: Sequence | None = None, level: float = LEVEL
) -> Interval:
    """Σ numerator / Σ denominator over independent runs (e.g. realised over forecast goodput, each
    run weighted by its forecast) with the log-scale jackknife interval of `log_jackknife`, leaving
    out one cluster at a time: runs that share random numbers (the policies run on one seed share
    its prompts and channel) are one cluster, never independent runs. Default: each run its own."""
    num, den = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    if num.shape != den.shape or num.ndim != 1:
        raise ValueError(f"ratio_of_sums: need two equal-length vectors (got {num.shape} and {den.shape})")
    if clusters is not None and len(clusters) != num.size:
        raise ValueError(f"ratio_of_sums: need one cluster per run ({num.size}), got {len(clusters)}")
    cluster = np.arange(num.size) if clusters is None else np.unique(np.asarray(clusters), return_inverse=True)[1]
    n_c, d_c = np.bincount(cluster, weights=num), np.bincount(cluster, weights=den)
    return log_jackknife(lambda w: (w @ n_c) / (w @ d_c), n_c.size, level)


def best_estimator(*logs: RoundLog) -> Estimator:
    """The acceptance-conditioned estimator where every log carries expected tokens, else realised."""
    return "conditioned" if all(x.expected_tokens is not None for x in logs) else "realised"


def paired_difference(
    a: RoundLog,
    b: RoundLog,
    names: tuple[str, str] = ("a", "b"),
    *,
    estimator: Estimator = "realised",
    batches: int | None = None,
    level: float = LEVEL,
) -> PairedDifference:
    """G_a / G_b − 1 (percent) with its paired batch-means jackknife interval, built for the ratio
    G_a / G_b on the log scale (module docstring), so it never reaches −100%; `estimator` picks the
    token counts (realised, or conditioned on the drafts); `batches` per seed overrides the default."""
    if a.tokens.shape != b.tokens.shape:
        raise ConfigError(f"paired runs: need the same seeds and rounds (got {a.tokens.shape} and {b.tokens.shape})")
    seeds, rounds = a.tokens.shape
    per_seed = min(batches or batches_per_seed(rounds), rounds)
    na, ta, nb, tb = (
        batch_sums(x, per_seed) for x in (a.numerator(estimator), a.latency_s, b.numerator(estimator), b.latency_s)
    )

    def ratio(w: np.ndarray) -> np.ndarray:
        return (w @ na) / (w @ ta) / ((w @ nb) / (w @ tb))

    r = log_jackknife(ratio, na.size, level)
    pct = Interval(*(100.0 * (x - 1.0) for x in (r.estimate, r.low, r.high)))
    return PairedDifference(names[0], names[1], pct, seeds, rounds, per_seed, estimator)


def goodput_interval(log: RoundLog, *, batches: int | None = None, level: float = LEVEL) -> Interval:
    """One policy's goodput (tokens/s) with the same batch-means jackknife interval (log scale:
    its low end is above 0)."""
    seeds, rounds = log.tokens.shape
    per_seed = min(batches or batches_per_seed(rounds), rounds)
    return ratio_of_sums(batch_sums(log.tokens, per_seed), batch_sums(log.latency_s, per_seed), level=level)
