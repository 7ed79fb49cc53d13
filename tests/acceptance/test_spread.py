"""Between-prompt spread of acceptance (`acceptance.spread`): the two-ends fit recovers a
known spread on simulated jobs, finds none where every prompt has the same rate (even when texts
have easy and hard stretches, which the whole-job fit mistakes for spread), and jobs' α are drawn
with the fitted mean and spread."""

from __future__ import annotations

import numpy as np
import pytest

from multispin.acceptance.spread import (
    draw_job_alpha,
    fit_between_prompt_spread,
    fit_jobs,
    job_alpha_quantile,
    round_trials,
    shipped_spread,
    verdict_ends,
)

GAMMA, ROUNDS = 8, 10


def _round(alpha: float, rng: np.random.Generator) -> tuple[int, int]:
    """One γ = 8 verdict round at rate α: (accepted, trials)."""
    accepted = 0
    while accepted < GAMMA and rng.random() < alpha:
        accepted += 1
    return accepted, round_trials(GAMMA, accepted, accepted < GAMMA)


def _jobs(job_alpha: np.ndarray, rng: np.random.Generator, stretch: float = 0.0) -> list[list[tuple[int, int]]]:
    """Each job's rounds at its own α; ``stretch``: runs of rounds alternate between α ± stretch
    (easy and hard stretches of a text, the same for every prompt on average)."""
    jobs = []
    for a in job_alpha:
        rounds, sign = [], 1.0
        for r in range(ROUNDS):
            if stretch and r % 3 == 0:
                sign = 1.0 if rng.random() < 0.5 else -1.0
            rounds.append(_round(float(np.clip(a + sign * stretch, 0, 1)), rng))
        jobs.append(rounds)
    return jobs


def test_fit_recovers_a_known_between_prompt_spread():
    rng = np.random.default_rng(0)
    fits, pooled = [], []
    for _ in range(20):
        alpha = draw_job_alpha(np.full(150, 0.82), np.full(150, 0.06), rng)
        fits.append(fit_jobs(_jobs(alpha, rng)))
        trials = (1 - alpha**GAMMA) / (1 - alpha)  # per round: easy jobs test more positions
        pooled.append(np.sum(alpha * trials) / np.sum(trials))
    cov = np.array([f.covariance for f in fits])
    assert abs(cov.mean() - 0.06**2) < 3 * cov.std(ddof=1) / np.sqrt(cov.size), cov
    assert np.sqrt(cov.mean()) == pytest.approx(0.06, abs=0.01)
    # the mean is the pooled verdict rate (what the online estimator and the run α count)
    assert np.mean([f.mean for f in fits]) == pytest.approx(np.mean(pooled), abs=0.005)


def test_fit_finds_no_spread_where_prompts_share_one_rate_and_the_whole_job_fit_does():
    rng = np.random.default_rng(1)
    fits = [fit_jobs(_jobs(np.full(150, 0.82), rng, stretch=0.12)) for _ in range(20)]
    cov = np.array([f.covariance for f in fits])
    naive = np.array([f.naive_sd for f in fits])
    assert abs(cov.mean()) < 3 * cov.std(ddof=1) / np.sqrt(cov.size), cov
    # negative control: the variance of whole jobs' rates less binomial noise counts the
    # stretches as a spread between prompts
    assert np.median(naive) > 0.03, naive


def test_a_job_is_split_into_its_first_and_last_third_of_rounds():
    assert verdict_ends([(2, 3), (8, 8), (5, 6), (0, 1), (1, 2), (4, 5), (3, 4)]) == ((10, 11), (7, 9))
    assert verdict_ends([(2, 3), (3, 4)]) is None
    assert round_trials(8, 8, False) == 8 and round_trials(8, 3, True) == 4 and round_trials(0, 0, False) == 0


def test_fit_refuses_too_few_or_empty_jobs():
    with pytest.raises(ValueError, match="at least 3"):
        fit_between_prompt_spread((np.array([1, 2]), np.array([2, 3])), (np.array([1, 2]), np.array([2, 3])))
    with pytest.raises(ValueError, match="both parts"):
        fit_between_prompt_spread((np.array([1, 2, 0]), np.array([2, 3, 0])), (np.ones(3), np.ones(3)))


def test_job_alpha_draws_have_the_mean_and_spread_asked_for():
    rng = np.random.default_rng(2)
    a = draw_job_alpha(np.full(200_000, 0.85), np.full(200_000, 0.05), rng)
    assert a.mean() == pytest.approx(0.85, abs=1e-3) and a.std() == pytest.approx(0.05, abs=1e-3)
    assert np.all((a > 0) & (a < 1))
    mean = np.array([0.3, 0.9])
    assert np.array_equal(draw_job_alpha(mean, np.zeros(2), rng), mean)
    # the quantiles the forecast takes: monotone in u, the median near the mean
    q = job_alpha_quantile(np.full(3, 0.85), np.full(3, 0.05), np.array([0.1, 0.5, 0.9]))
    assert q[0] < q[1] < q[2] and q[1] == pytest.approx(0.85, abs=0.01)


def test_a_spread_file_is_read_for_its_draft_task_and_sampling_only(tmp_path, monkeypatch):
    import json

    import multispin.acceptance.shipped as profiles

    sampled = {"temperature": 1.0, "top_k": 1024, "top_p": 1.0}
    (tmp_path / "pairx").mkdir()
    doc = {"pair": "pairx", "draft": "d1", "sampling": sampled, "tasks": {"sharegpt": {"sd": 0.04}}}
    (tmp_path / "pairx" / "spread-d1-t1-topk1024.json").write_text(json.dumps(doc))
    monkeypatch.setattr(profiles, "PROFILES_ROOT", tmp_path)
    assert shipped_spread("pairx", "d1", "chat", sampled) == 0.04
    assert shipped_spread("pairx", "d1", "code", sampled) is None  # HumanEval not measured
    assert shipped_spread("pairx", "d2", "chat", sampled) is None
    assert shipped_spread("pairx", "d1", "chat", {"temperature": 0.0, "top_k": 0, "top_p": 1.0}) is None
    assert shipped_spread("tiny", "close", "chat") is None


def test_the_embedded_pair_ships_its_measured_spread_for_the_testbed_draft_and_sampling():
    from multispin.acceptance.spread import spread_files

    (doc,) = spread_files("smollm2-135m")
    assert doc["schema"] == "multispin.acceptance-spread"
    assert doc["provenance"]["produced_by"] == "multispin profiles spread"  # from its shipped inputs
    for label, task in (("sharegpt", "chat"), ("humaneval", "code")):
        fit = doc["tasks"][label]
        lo, hi = fit["sd_ci95"]
        assert fit["jobs"] >= 100 and lo <= fit["sd"] <= hi < 0.1  # a measured spread, with its interval
        assert shipped_spread("smollm2-135m", doc["draft"], task, doc["sampling"]) == fit["sd"]
