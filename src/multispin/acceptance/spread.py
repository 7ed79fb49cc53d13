"""How much acceptance differs between prompts of one task, and jobs' α drawn from that spread.

A profile's α is a mean over prompts. In a running system each job (one prompt) has its own rate:
some prompts are easier for the draft than others. That spread is signal, not noise: the planner's
online estimator finds the easy jobs and gives them longer drafts, and since the tokens a round
gains, E[N](α) = (1 − α^{γ+1}) / (1 − α), are convex in α, a mix of jobs gains more than jobs all
at the mean α would. A forecast that scores every job at the mean α is pessimistic by that much.

The spread is measured from real rounds' verdicts (`fit_between_prompt_spread`): each job's rounds
split into thirds, and in the first and the last third the successes beyond the task's mean rate
(accepted positions − mean × trials, trials counted as the online estimator counts them); the
spread is the covariance of the two across jobs, per trial. Their own
noise (binomial, and the easy and hard stretches within a text that make a job's verdicts
correlated) is independent between them as long as a stretch is shorter than the middle third
that separates them (about 20 tokens of a 64-token job), so only what a job keeps from start to
end, the prompt's own rate, survives the covariance. The naive alternative, the variance of whole
jobs' rates less their binomial variance, counts those stretches as spread too.

`draw_job_alpha` draws each job's α from a Beta distribution with the task's mean and that
spread; the shipped spreads (``data/profiles/<pair>/spread-<draft>-<policy>.json``, written by
``multispin profiles spread`` from `spread_document`) are read by `shipped_spread`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import betaincinv

from multispin.acceptance.shipped import TASK_SOURCE, _same_policy, shipped_files

SPREAD_SCHEMA = "multispin.acceptance-spread"
# the draft length of the verdict rounds a spread is fitted on: every round drafts the whole γ
VERDICT_GAMMA = 8
# prompts resampled for the interval of each task's spread
SPREAD_RESAMPLES = 1000


@dataclass(frozen=True)
class SpreadFit:
    """Between-prompt spread of one task's acceptance: ``sd`` of the jobs' own α around ``mean``
    (the pooled verdict rate; ``sd`` 0 when the two ends of jobs do not co-vary), from ``jobs``
    jobs."""

    mean: float
    sd: float
    jobs: int
    covariance: float  # of the two ends' excess successes per trial: estimates sd², can be negative
    naive_sd: float  # whole jobs' rates less their binomial noise (counts within-text stretches too)


def fit_between_prompt_spread(first: tuple[np.ndarray, np.ndarray], second: tuple[np.ndarray, np.ndarray]) -> SpreadFit:
    """The spread of jobs' own acceptance rates from each job's (successes, trials) in two parts
    of its rounds far apart (`verdict_ends`, module docstring). Jobs need trials in both."""
    s1, n1 = (np.asarray(x, dtype=float) for x in first)
    s2, n2 = (np.asarray(x, dtype=float) for x in second)
    if not (s1.shape == n1.shape == s2.shape == n2.shape) or s1.ndim != 1:
        raise ValueError("first, second: one (successes, trials) pair of equal-length arrays per part")
    if s1.size < 3:
        raise ValueError(f"jobs: need at least 3 jobs with verdicts in both parts (got {s1.size})")
    if np.any(n1 <= 0) or np.any(n2 <= 0):
        raise ValueError("trials: every job needs trials in both parts")
    # each trial's success − m has mean α − m whatever decided to stop the draft (a rejection, γ),
    # so a part's s − m·n has mean (α − m)·n: the two parts' products estimate (α − m)², i.e. the
    # spread, without the bias of per-part rates s/n from a few rounds (steeper than α itself)
    m = float((s1 + s2).sum() / (n1 + n2).sum())
    cov = float(np.sum((s1 - m * n1) * (s2 - m * n2)) / np.sum(n1 * n2))
    s, n = s1 + s2, n1 + n2
    mean = float(s.sum() / n.sum())
    rates = s / n
    binomial = mean * (1 - mean) * float(np.mean(1.0 / n))
    naive = max(0.0, float(np.var(rates, ddof=1)) - binomial)
    return SpreadFit(
        mean=mean, sd=float(np.sqrt(max(cov, 0.0))), jobs=int(s1.size), covariance=cov, naive_sd=float(np.sqrt(naive))
    )


def job_alpha_quantile(mean: np.ndarray, sd: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The ``u``-quantile of each job's α: Beta with the given ``mean`` and standard deviation
    ``sd`` (the mean itself where ``sd`` is 0; the spread is capped just below the largest a Beta
    of that mean can have)."""
    mean = np.clip(np.asarray(mean, dtype=float), 1e-6, 1 - 1e-6)
    sd = np.broadcast_to(np.asarray(sd, dtype=float), mean.shape)
    u = np.broadcast_to(np.asarray(u, dtype=float), mean.shape)
    var = np.minimum(sd**2, 0.99 * mean * (1 - mean))
    out = mean.copy()
    spread = var > 0
    if np.any(spread):
        m, v = mean[spread], var[spread]
        concentration = m * (1 - m) / v - 1
        out[spread] = betaincinv(m * concentration, (1 - m) * concentration, u[spread])
    return out


def draw_job_alpha(mean: np.ndarray, sd: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One α per job, drawn from `job_alpha_quantile`'s Beta."""
    mean = np.asarray(mean, dtype=float)
    return job_alpha_quantile(mean, sd, rng.random(mean.shape))


def spread_files(pair: str) -> list[dict]:
    """Every shipped spread file of ``pair`` (``[]`` without any)."""
    return shipped_files(pair, "spread")


def shipped_spread(pair: str, draft: str, task: str, sampling=None) -> float | None:
    """The between-prompt sd of α measured for ``draft`` on a testbed device of ``task`` (chat,
    code; or a prompt-set label) under ``sampling``, or ``None`` where none was measured."""
    label = TASK_SOURCE.get(task, task)
    for data in spread_files(pair):
        if str(data["draft"]) == draft and _same_policy(data, sampling) and label in data["tasks"]:
            return float(data["tasks"][label]["sd"])
    return None


def verdict_ends(rounds: list[tuple[int, int]]) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """A job's (successes, trials) in the first and in the last third of its drafting rounds (the
    middle third left out), from each round's (accepted, trials); ``None`` when either has no
    trials."""
    third = len(rounds) // 3
    first, second = rounds[:third], rounds[len(rounds) - third :]
    s1, n1 = sum(a for a, _ in first), sum(n for _, n in first)
    s2, n2 = sum(a for a, _ in second), sum(n for _, n in second)
    return ((s1, n1), (s2, n2)) if n1 > 0 and n2 > 0 else None


def round_trials(draft_len: int, accepted: int, rejected: bool) -> int:
    """Bernoulli trials of one round under the i.i.d. model: the accepted positions, and the
    rejected one if a rejection ended the draft (the online estimator's count)."""
    return accepted + (1 if rejected else 0) if draft_len > 0 else 0


def fit_jobs(jobs: list[list[tuple[int, int]]]) -> SpreadFit:
    """`fit_between_prompt_spread` over jobs given as their rounds' (accepted, trials)."""
    return _fit_ends(_job_ends(jobs))


def _job_ends(jobs: list[list[tuple[int, int]]]) -> np.ndarray:
    """Each job's `verdict_ends` as a row (s1, n1, s2, n2), NaN where it has none."""
    return np.array([sum(e, ()) if (e := verdict_ends(j)) is not None else (np.nan,) * 4 for j in jobs], dtype=float)


def _fit_ends(ends: np.ndarray) -> SpreadFit:
    """`fit_between_prompt_spread` over the rows of `_job_ends` that have ends."""
    ends = ends[~np.isnan(ends[:, 0])]
    if ends.shape[0] == 0:
        raise ValueError("jobs: none has verdicts in its first and last third")
    return fit_between_prompt_spread((ends[:, 0], ends[:, 1]), (ends[:, 2], ends[:, 3]))


def verdict_jobs(prompts: list[dict], gamma: int = VERDICT_GAMMA) -> list[list[tuple[int, int]]]:
    """Each prompt's rounds as (accepted, trials), from a verdicts document's ``prompts`` (each
    ``{"accepted": [...]}``, one count per round of γ drafted positions)."""
    return [[(int(a), round_trials(gamma, int(a), int(a) < gamma)) for a in p["accepted"]] for p in prompts]


def spread_entry(verdicts: dict) -> dict:
    """One task's entry of a spread file from its verdicts document (`fit_jobs`, with a bootstrap
    interval over prompts of `SPREAD_RESAMPLES` resamples, seeded 0)."""
    jobs = verdict_jobs(verdicts["prompts"])
    ends = _job_ends(jobs)  # once: each resample takes its rows
    fit = _fit_ends(ends)
    rng = np.random.default_rng(0)
    boot = [_fit_ends(ends[rng.integers(0, len(jobs), len(jobs))]).sd for _ in range(SPREAD_RESAMPLES)]
    return {
        "sd": fit.sd,
        "sd_ci95": [float(x) for x in np.percentile(boot, [2.5, 97.5])],
        "mean": fit.mean,
        "jobs": fit.jobs,
        "whole_job_sd": fit.naive_sd,
        "prompt_seed": verdicts["seed"],
    }


def spread_document(pair: str, verdicts: list[dict]) -> dict:
    """The spread file of ``pair`` fitted on ``verdicts`` (one document per task, all of one draft
    and sampling policy), without its provenance."""
    if not verdicts:
        raise ValueError("verdicts: need at least one verdicts document")
    first = verdicts[0]
    for doc in verdicts[1:]:
        if doc["draft"] != first["draft"] or doc["sampling"] != first["sampling"]:
            raise ValueError("verdicts: every document must be of one draft and one sampling policy")
    return {
        "schema": SPREAD_SCHEMA,
        "schema_version": 1,
        "pair": pair,
        "draft": first["draft"],
        "sampling": first["sampling"],
        "draft_len": VERDICT_GAMMA,
        "max_new_tokens": int(first.get("max_new_tokens", 64)),
        "method": "acceptance/spread.py: covariance of each prompt's excess accepted positions per trial "
        "in the first and the last third of its rounds",
        "tasks": {TASK_SOURCE[doc["task"]]: spread_entry(doc) for doc in verdicts},
    }
