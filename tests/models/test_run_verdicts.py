"""The α runs' own verdicts show (`models.run_verdicts`): reading jobs from round rows, pooling
them with an interval that covers, and the shipped file the planner's run α prefers."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from multispin.models import profiles
from multispin.models.profiles import device_alpha, in_run_alpha
from multispin.models.run_verdicts import JobVerdicts, job_verdicts, pool_jobs

SAMPLED = {"temperature": 1.0, "top_k": 1024, "top_p": 1.0}


def _row(gamma: dict[int, int], gained: dict[int, int], rejected: list[int]):
    return SimpleNamespace(gamma=gamma, tokens_gained=gained, rejected=rejected)


def test_job_verdicts_counts_trials_as_the_online_estimator_and_drops_eos_cut_rounds():
    tasks = {"0": "chat", "1": "code"}  # K = 2: device 3 is device 1's second prompt
    rows = [
        _row({0: 4, 1: 5}, {0: 3, 1: 6}, [0]),  # 0: 2 accepted + the rejection; 1: all 5 + bonus
        _row({0: 4, 1: 5, 3: 0}, {0: 2, 1: 4, 3: 1}, [0]),  # 1: 3 tokens short of γ + bonus, no rejection: EOS
        _row({0: 6, 3: 3}, {0: 7, 3: 2}, [3]),
    ]
    jobs = {(j.task, j.accepted, j.trials): j.rounds for j in job_verdicts(rows, tasks)}
    assert jobs == {
        ("chat", 2 + 1 + 6, 3 + 2 + 6): [(2, 3), (1, 2), (6, 6)],
        ("code", 5, 5): [(5, 5)],  # the EOS-cut round is left out
        ("code", 1, 2): [(1, 2)],  # device 3's γ = 0 round has no verdict
    }
    doc = json.loads(json.dumps(job_verdicts(rows, tasks)[0].to_dict()))
    assert JobVerdicts.from_dict(doc) == job_verdicts(rows, tasks)[0]


def _simulated_jobs(rng, alpha: float, spread: float, n_jobs: int, stretch: float) -> list[JobVerdicts]:
    """Jobs with their own α (Beta around ``alpha``) and easy/hard stretches within a text (a job's
    rate switches by ±``stretch`` every 16 trials): verdicts correlated within a job, as in runs."""
    a, b = alpha * (alpha * (1 - alpha) / spread**2 - 1), (1 - alpha) * (alpha * (1 - alpha) / spread**2 - 1)
    jobs = []
    for own in rng.beta(a, b, n_jobs):
        rounds, seen = [], 0
        while seen < 60:
            rate = np.clip(own + stretch * (1 if (seen // 16 + rng.integers(2)) % 2 else -1), 0.01, 0.99)
            gamma = int(rng.integers(3, 8))
            accepted = int(min(rng.geometric(1 - rate) - 1, gamma))
            trials = accepted + (1 if accepted < gamma else 0)
            rounds.append((accepted, trials))
            seen += accepted + 1
        jobs.append(JobVerdicts("chat", rounds))
    return jobs


def test_the_interval_over_jobs_covers_where_a_binomial_one_does_not():
    """Coverage over 300 simulated calibrations of 60 correlated jobs: the bootstrap over jobs
    covers the population's rate per trial (what a run's verdicts estimate, not the mean of the
    jobs' own rates: jobs and stretches differ in trials per token) about 95% of the time (0.953);
    the binomial interval over trials (the negative control: it treats a job's verdicts as
    independent) is too narrow and misses (0.76)."""
    rng = np.random.default_rng(11)
    population = _simulated_jobs(rng, 0.82, spread=0.06, n_jobs=20000, stretch=0.08)
    truth = sum(j.accepted for j in population) / sum(j.trials for j in population)
    covered, binomial, sims = 0, 0, 300
    for _ in range(sims):
        pooled = pool_jobs(_simulated_jobs(rng, 0.82, 0.06, 60, 0.08), resamples=400, seed=int(rng.integers(1 << 30)))
        covered += pooled.ci95[0] <= truth <= pooled.ci95[1]
        half = 1.96 * np.sqrt(pooled.alpha * (1 - pooled.alpha) / pooled.trials)
        binomial += pooled.alpha - half <= truth <= pooled.alpha + half
    assert covered / sims >= 0.92, covered / sims
    assert binomial / sims < 0.85, binomial / sims


def test_pool_jobs_refuses_too_few_jobs():
    with pytest.raises(ValueError, match="jobs"):
        pool_jobs([JobVerdicts("chat", [(3, 4)])])


def test_the_shipped_rates_are_what_the_planner_plans_on():
    files = profiles.run_verdict_files("smollm2-135m")
    assert files, "smollm2-135m ships its runs' verdicts"
    for data in files:
        for label, entry in data["tasks"].items():
            task = {v: k for k, v in profiles.TASK_SOURCE.items()}[label]
            lo, hi = entry["ci95"]
            assert lo < entry["alpha"] < hi and hi - lo < 0.03 and entry["jobs"] >= 100
            assert in_run_alpha("smollm2-135m", data["draft"], task, data["sampling"]) == entry["alpha"]
            assert device_alpha("smollm2-135m", data["draft"], task, data["sampling"], kind="run") == entry["alpha"]
        # measured on seeds apart from those the forecast is checked on (docs/system-model.md §5.5: 0-29)
        assert not set(data["runs"]["seeds"]) & set(range(30))
    # another sampling policy has none: the shrunk profile estimate stands
    greedy = {"temperature": 0.0, "top_k": 0, "top_p": 1.0}
    assert in_run_alpha("smollm2-135m", "q5g64", "chat", greedy) is None
    assert in_run_alpha("tiny", "close", "chat", SAMPLED) is None


def test_without_a_run_verdicts_file_the_run_alpha_is_the_shrunk_profile_estimate(monkeypatch):
    shrunk = device_alpha("smollm2-135m", "q5g64", "chat", SAMPLED, kind="shrunk")
    assert shrunk != device_alpha("smollm2-135m", "q5g64", "chat", SAMPLED, kind="run")
    monkeypatch.setattr(profiles, "run_verdict_files", lambda pair: [])
    assert device_alpha("smollm2-135m", "q5g64", "chat", SAMPLED, kind="run") == shrunk


def test_verdicts_by_response_token_places_each_trial_at_its_token():
    from multispin.models.run_verdicts import verdicts_by_response_token

    tasks = {"0": "chat", "1": "code"}
    rows = [
        _row({0: 3, 1: 0}, {0: 2, 1: 1}, [0]),  # job 0: tokens 0 (pass), 1 (fail); job 1 writes token 0 alone
        _row({0: 2, 1: 2}, {0: 3, 1: 3}, []),  # job 0: tokens 2, 3 pass; job 1: tokens 1, 2 pass
    ]
    cells = verdicts_by_response_token(rows, tasks, bins=(0, 1, 3))
    rates = {key: [(j.accepted, j.trials) for j in jobs] for key, jobs in cells.items()}
    assert rates == {
        ("chat", 0): [(1, 1)],
        ("chat", 1): [(1, 2)],  # token 1 failed in round 0, token 2 passed in round 1
        ("chat", 3): [(1, 1)],
        ("code", 1): [(2, 2)],
    }
    with pytest.raises(ValueError, match="bins"):
        verdicts_by_response_token(rows, tasks, bins=(1, 8))


def _jobs_with_a_first_token(rng, first: float, rest: float, n_jobs: int) -> list:
    """Rows of `n_jobs` one-device jobs (K = 1) drafting γ = 4 until 40 tokens: the response's
    first token passes with ``first``, every other with ``rest``."""
    rows = []
    for job in range(n_jobs):
        spent = 0
        while spent < 40:
            rates = np.where(spent + np.arange(4) == 0, first, rest)
            fails = np.flatnonzero(rng.random(4) >= rates)
            accepted = int(fails[0]) if fails.size else 4
            rows.append(_row({job: 4}, {job: accepted + 1}, [job] if fails.size else []))
            spent += accepted + 1
    return rows


def test_a_hard_first_token_is_found_and_an_even_rate_is_not_mistaken_for_one():
    from multispin.models.run_verdicts import verdicts_by_response_token

    rng = np.random.default_rng(5)
    hard = verdicts_by_response_token(_jobs_with_a_first_token(rng, 0.5, 0.9, 200), {"0": "chat"})
    first, later = pool_jobs(hard[("chat", 0)]), pool_jobs(hard[("chat", 8)])
    assert first.ci95[0] < 0.5 < first.ci95[1] < later.ci95[0] and abs(later.alpha - 0.9) < 0.02
    # the control: the same rate at every token reads the same in every bin
    even = verdicts_by_response_token(_jobs_with_a_first_token(rng, 0.9, 0.9, 200), {"0": "chat"})
    rates = [pool_jobs(even[("chat", b)]) for b in (0, 1, 8)]
    assert all(abs(r.alpha - 0.9) < 0.05 for r in rates) and rates[0].ci95[1] > rates[2].ci95[0]
