"""Paired intervals for the service metrics (experiments/service.py) of two policies on common random numbers.

The same family as the goodput comparison (experiments/paired.py): each seed's rounds are cut into
the same consecutive batches for both policies, a metric is recomputed leaving one batch out, and
the interval of the ratio metric_a / metric_b is Student's t on the log scale of the jackknife,
reported as a difference in percent. Worst-device goodput, Jain's index and energy per token are
smooth functions of batch sums, where the jackknife is consistent. p95 TPOT is a quantile, where
the jackknife of a quantile is known to be inconsistent: its interval is **indicative** (its
coverage on synthetic rounds is reported in tests).

**Longer batches than the goodput comparison's.** Batch means assume that batches are nearly
independent. Energy per token is the one figure here in which the channel's level does not cancel
between the two policies (a round's joules hold idle time, a device's tokens do not), and a channel
whose memory outlasts a 4-round batch makes adjacent batches correlate: the jackknife then
underestimates the variance, and on synthetic rounds with an AR(0.7) channel the 4-round batches
covered 0.91 instead of 0.95 (no bias: a bias-corrected jackknife covered the same; 0.96 without
channel memory). The cure is the textbook one, fewer and longer batches: each seed is cut into as
few batches as keep `MIN_BATCHES` in all (2 per seed from 3 seeds on), never more than the
goodput comparison would cut. The price is width where rounds are independent (a t quantile with
5 degrees of freedom, and each batch's spread estimated from fewer batches).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from multispin.errors import ConfigError
from multispin.experiments.paired import LEVEL, Interval, batch_sums, batches_per_seed, log_jackknife, pct_text
from multispin.experiments.service import device_energy_j, jain_index, round_durations
from multispin.runtime.wire.round_row import RoundRow

# batches in all seeds together: the fewest that leave the t quantile finite and moderate (t_5 = 2.57)
MIN_BATCHES = 6

# name → (what it measures, whether its interval is indicative only)
METRICS = {
    "worst_device_goodput": ("worst device's goodput", False),
    "jain_index": ("Jain's index", False),
    "energy_per_token": ("energy per token", False),
    "tpot_p95": ("p95 TPOT", True),
}


@dataclass(frozen=True)
class ServiceLog:
    """One policy's measured rounds: tokens per device slot (seeds, rounds, K), round durations
    (seeds, rounds), the devices' joules per round (seeds, rounds)."""

    tokens: np.ndarray
    latency_s: np.ndarray
    joules: np.ndarray

    @classmethod
    def of(cls, tokens, latency_s, joules=None) -> ServiceLog:
        tok = np.asarray(tokens, float)
        lat = np.asarray(latency_s, float)
        if tok.ndim != 3 or tok.shape[:2] != lat.shape or tok.size == 0:
            raise ConfigError(
                f"service log: tokens {tok.shape} must be (seeds, rounds, devices) over latencies {lat.shape}"
            )
        j = np.zeros_like(lat) if joules is None else np.asarray(joules, float)
        return cls(tok, lat, j)

    @classmethod
    def of_runs(
        cls,
        runs: Sequence[Sequence[RoundRow]],
        devices: int,
        *,
        energy=None,
        p_ul_w: float | None = None,
        clock: str = "virtual",
    ) -> ServiceLog:
        """From each seed's typed round rows (device id d is slot d mod K, as in `service_metrics`)."""
        tok = np.zeros((len(runs), max((len(r) for r in runs), default=0), devices))
        lat = np.zeros(tok.shape[:2])
        joules = np.zeros(tok.shape[:2])
        for s, rows in enumerate(runs):
            dur = round_durations(rows, clock)
            lat[s, : len(rows)] = dur
            for i, (r, t) in enumerate(zip(rows, dur)):
                for d, n in r.tokens_gained.items():
                    tok[s, i, d % devices] += n
                if energy is not None:
                    joules[s, i] = sum(device_energy_j(r, d, float(t), energy, float(p_ul_w or 0.0)) for d in r.gamma)
        return cls.of(tok, lat, joules)


def service_batches_per_seed(seeds: int, rounds: int) -> int:
    """Batches per seed: as few as leave `MIN_BATCHES` in all, at least 2 per seed, and never more
    (shorter) than the goodput comparison's `batches_per_seed` (module docstring)."""
    return min(batches_per_seed(rounds), max(2, -(-MIN_BATCHES // max(seeds, 1))))


def _batch_ids(seeds: int, rounds: int, per_seed: int) -> np.ndarray:
    """Each round's batch index in the (seeds · per_seed) vector `batch_sums` builds."""
    edges = np.linspace(0, rounds, per_seed + 1).round().astype(int)
    within = np.searchsorted(edges, np.arange(rounds), side="right") - 1
    return (np.arange(seeds)[:, None] * per_seed + within[None, :]).ravel()


def metric_functions(log: ServiceLog, per_seed: int) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """Each metric as a function of batch weights (m, M) → (m,) values; ones give the full run's value."""
    seeds, rounds, devices = log.tokens.shape
    tok = np.stack([batch_sums(log.tokens[:, :, k], per_seed) for k in range(devices)], axis=1)  # (M, K)
    lat = batch_sums(log.latency_s, per_seed)
    joules = batch_sums(log.joules, per_seed)
    # TPOT samples: a device-round's duration over the tokens it committed, tagged with its batch
    ids = np.repeat(_batch_ids(seeds, rounds, per_seed), devices)
    n = log.tokens.reshape(-1)
    t = np.repeat(log.latency_s.reshape(-1), devices)
    keep = n > 0
    tpot, tpot_batch = t[keep] / n[keep], ids[keep]

    def worst(w: np.ndarray) -> np.ndarray:
        return (w @ tok).min(axis=1) / (w @ lat)

    def jain(w: np.ndarray) -> np.ndarray:
        return np.array([jain_index(row) for row in w @ tok])

    def energy(w: np.ndarray) -> np.ndarray:
        return (w @ joules) / (w @ tok).sum(axis=1)

    def p95(w: np.ndarray) -> np.ndarray:
        return np.array([np.percentile(tpot[row[tpot_batch] > 0], 95) if tpot.size else np.nan for row in w])

    return {"worst_device_goodput": worst, "jain_index": jain, "energy_per_token": energy, "tpot_p95": p95}


@dataclass(frozen=True)
class ServiceDifference:
    """metric_a / metric_b − 1 in percent with its paired interval."""

    metric: str
    a: str
    b: str
    pct: Interval
    indicative: bool

    @property
    def significant(self) -> bool:
        return not self.pct.covers_zero

    @property
    def verdict(self) -> str:
        """One line: the difference, its interval, and what it means."""
        p = self.pct
        head = f"{self.a} vs {self.b}: {pct_text(p.estimate)} {METRICS[self.metric][0]} (95% interval {pct_text(p.low)} … {pct_text(p.high)})"
        tail = "not significant" if not self.significant else ("higher" if p.estimate > 0 else "lower")
        return f"{head}: {tail}" + (" (indicative: quantile jackknife)" if self.indicative else "")

    def to_dict(self) -> dict:
        return {
            "metric": self.metric,
            "a": self.a,
            "b": self.b,
            "pct": self.pct.to_dict(),
            "significant": self.significant,
            "indicative": self.indicative,
        }


def service_differences(
    a: ServiceLog,
    b: ServiceLog,
    names: tuple[str, str] = ("a", "b"),
    *,
    metrics: Sequence[str] = tuple(METRICS),
    batches: int | None = None,
    level: float = LEVEL,
) -> list[ServiceDifference]:
    """Each metric's paired difference a vs b (percent) with its batch-means jackknife interval on
    the log scale; a metric that is 0 or undefined in some leave-one-out gets the interval (−100%, ∞).
    `batches` per seed overrides `service_batches_per_seed`."""
    if a.tokens.shape != b.tokens.shape:
        raise ConfigError(
            f"paired runs: need the same seeds, rounds and devices (got {a.tokens.shape} and {b.tokens.shape})"
        )
    unknown = sorted(set(metrics) - set(METRICS))
    if unknown:
        raise ConfigError(f"service interval: unknown metric {unknown[0]!r} (allowed: {', '.join(METRICS)})")
    seeds, rounds = a.tokens.shape[:2]
    per_seed = min(batches or service_batches_per_seed(seeds, rounds), rounds)
    fa, fb = metric_functions(a, per_seed), metric_functions(b, per_seed)
    out = []
    for m in metrics:

        def ratio(w: np.ndarray, m: str = m) -> np.ndarray:
            with np.errstate(divide="ignore", invalid="ignore"):
                r = fa[m](w) / fb[m](w)
            return np.where(np.isfinite(r), r, 0.0)

        r = log_jackknife(ratio, seeds * per_seed, level)
        pct = Interval(*(100.0 * (x - 1.0) for x in (r.estimate, r.low, r.high)))
        out.append(ServiceDifference(m, names[0], names[1], pct, METRICS[m][1]))
    return out
