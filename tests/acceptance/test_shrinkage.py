"""The α a running system sees (`shrinkage.shrunk_alpha`): a profile's teacher-forced α corrected by its own
verdict rounds, shrunk across profiles."""

from __future__ import annotations

import numpy as np
import pytest

from multispin.acceptance.shipped import acceptance_profiles, device_alpha, shipped_shrunk_alpha
from multispin.acceptance.shrinkage import gap_prior, shrunk_alpha, verdict_alpha

SAMPLED = {"temperature": 1.0, "top_k": 1024, "top_p": 1.0}


def _profile(tf: float, accepted_per_round: float, all_accepted: float, rounds: int, gamma: int = 8) -> dict:
    """A profile whose verdict rounds accepted `accepted_per_round` tokens and ran all γ through
    `all_accepted` of the time (the fields verdict_alpha reads)."""
    measured = list(np.linspace(1.5, 1.0 + accepted_per_round - all_accepted, gamma - 1)) + [1.0 + accepted_per_round]
    return {"alpha": tf, "num_rounds": rounds, "iid_check": {"measured": measured}}


def test_verdict_alpha_is_accepted_over_tested_positions():
    prof = _profile(0.8, accepted_per_round=3.0, all_accepted=0.2, rounds=100)
    alpha, trials = verdict_alpha(prof)
    assert alpha == pytest.approx(3.0 / 3.8) and trials == pytest.approx(380)
    assert verdict_alpha({"alpha": 0.8, "num_rounds": 0, "iid_check": {"measured": []}}) is None
    assert shrunk_alpha({"alpha": 0.8, "num_rounds": 0}, (0.0, 0.0)) == 0.8  # no verdicts: the teacher-forced α


def test_run_alpha_lies_between_the_teacher_forced_and_the_verdict_alpha_of_each_shipped_profile():
    for prof in acceptance_profiles("smollm2-135m"):
        v = verdict_alpha(prof)[0]
        lo, hi = sorted((prof["alpha"], v))
        mu = gap_prior([p for p in acceptance_profiles("smollm2-135m")])[0]
        assert lo - abs(mu) - 1e-9 <= shipped_shrunk_alpha(prof) <= hi + abs(mu) + 1e-9
    # the testbed's default chat device: below its teacher-forced 0.840, as its runs' verdicts are
    shrunk = device_alpha("smollm2-135m", "q5g64", "chat", SAMPLED, kind="shrunk")
    assert 0.81 < shrunk < device_alpha("smollm2-135m", "q5g64", "chat", SAMPLED) - 0.01


def test_shrinking_the_gap_beats_either_estimate_alone_on_simulated_profiles():
    """Profiles with a true run α = teacher-forced + δ (δ spread across profiles) and 450 verdict
    trials each: the empirical-Bayes α is closer to the truth than the teacher-forced α (which
    ignores δ) and than the verdict α (which carries its sampling noise)."""
    rng = np.random.default_rng(3)
    err = {"teacher_forced": [], "verdict": [], "run": []}
    for _ in range(40):
        tf = rng.uniform(0.4, 0.9, 20)
        truth = np.clip(tf - 0.01 + rng.normal(0, 0.02, tf.size), 0.05, 0.98)
        profiles = []
        for t, a in zip(tf, truth):
            rounds = 120
            acc = np.minimum(rng.geometric(1 - a, rounds) - 1, 8)  # accepted tokens per round at γ = 8
            hist = np.bincount(acc, minlength=9)
            reach = hist[::-1].cumsum()[::-1]
            measured = list(1.0 + (reach[1:] / rounds).cumsum())
            profiles.append({"alpha": float(t), "num_rounds": rounds, "iid_check": {"measured": measured}})
        prior = gap_prior(profiles)
        for p, a in zip(profiles, truth):
            err["teacher_forced"].append(abs(p["alpha"] - a))
            err["verdict"].append(abs(verdict_alpha(p)[0] - a))
            err["run"].append(abs(shrunk_alpha(p, prior) - a))
    mean = {k: float(np.mean(v)) for k, v in err.items()}
    assert mean["run"] < mean["teacher_forced"] and mean["run"] < mean["verdict"], mean


def test_unknown_alpha_kind_is_refused():
    with pytest.raises(ValueError, match="kind"):
        device_alpha("smollm2-135m", "q5g64", "chat", SAMPLED, kind="verdict")
