"""The shrunk α: a profile's teacher-forced α corrected by its own verdict rounds, shrunk across
every shipped profile (empirical Bayes). It is the planner's α for a draft without runs of its own
(`acceptance.kinds`, ``shrunk``); docs/acceptance.md says why.
"""

from __future__ import annotations

import numpy as np

# ---- the α a running system sees --------------------------------------------------------------
#
# Teacher forcing scores every position of the target's text; a run tests only the positions its
# verdicts reach: the position after a bonus (which follows a fully accepted draft, an easy
# stretch) is never drafted, the position after a rejection always is. When acceptance varies
# along a text (easy and hard stretches), the run's positions are the harder ones, so the i.i.d.
# rate its verdicts see is lower than E[Σ min(p, q)]. Each profile's verdict rounds measure that
# rate directly, but from few prompts (8-16); `shrunk_alpha` combines the two: the gap δ = verdict
# α − teacher-forced α of each profile is shrunk towards the gap across all shipped profiles
# (normal-normal empirical Bayes, method-of-moments spread), and added to the teacher-forced α.


def verdict_alpha(profile: dict) -> tuple[float, float] | None:
    """(α, trials) of a profile's verdict rounds under the i.i.d. model: accepted tokens over
    accepted tokens plus rejections (the estimator the running system uses), or ``None`` without
    verdict rounds."""
    check, rounds = profile.get("iid_check") or {}, profile.get("num_rounds", 0)
    length = [float(x) for x in check.get("measured", [])]
    if not rounds or not length or not np.all(np.isfinite(length)):
        return None
    accepted = length[-1] - 1.0  # per round
    all_accepted = length[-1] - (length[-2] if len(length) > 1 else 1.0)  # P(every position accepted)
    tested = accepted + 1.0 - all_accepted
    if tested <= 0:
        return None
    return accepted / tested, rounds * tested


def _gap_and_variance(profile: dict) -> tuple[float, float] | None:
    v = verdict_alpha(profile)
    if v is None:
        return None
    alpha, trials = v
    # binomial variance: verdicts of one prompt are correlated, so this is a lower bound and the
    # spread across profiles (τ²) absorbs the rest
    return alpha - float(profile["alpha"]), max(alpha * (1 - alpha), 1e-4) / trials


def gap_prior(profiles: list[dict]) -> tuple[float, float]:
    """(μ, τ²) of the gap δ = verdict α − teacher-forced α across ``profiles`` (precision-weighted
    mean, method-of-moments spread; (0, 0) with fewer than two profiles with verdicts)."""
    pairs = [x for x in (_gap_and_variance(p) for p in profiles) if x is not None]
    if len(pairs) < 2:
        return 0.0, 0.0
    d, var = (np.array(x) for x in zip(*pairs))
    w = 1.0 / var
    mu = float(np.sum(w * d) / np.sum(w))
    q = float(np.sum(w * (d - mu) ** 2))
    tau2 = max(0.0, (q - (d.size - 1)) / (np.sum(w) - np.sum(w**2) / np.sum(w)))
    return mu, float(tau2)


def shrunk_alpha(profile: dict, prior: tuple[float, float]) -> float:
    """The α a running system's verdicts see for ``profile``: its teacher-forced α plus the
    empirical-Bayes estimate of its gap (``prior``: (μ, τ²) of the gap, `gap_prior`; the shipped
    profiles' is `acceptance.shipped.shipped_gap_prior`); the teacher-forced α itself when the
    profile has no verdict rounds."""
    own = _gap_and_variance(profile)
    if own is None:
        return float(profile["alpha"])
    mu, tau2 = prior
    gap, var = own
    weight = tau2 / (tau2 + var) if tau2 > 0 else 0.0
    return float(np.clip(float(profile["alpha"]) + mu + weight * (gap - mu), 0.0, 1.0))
