"""The α runs' own verdicts show (`acceptance.run_verdicts`): reading jobs from round rows, pooling
them with an interval that covers, and the shipped file the planner's run α prefers."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from multispin.acceptance import shipped as profiles
from multispin.acceptance.run_verdicts import (
    DraftRound,
    JobVerdicts,
    draft_rounds,
    iid_tokens,
    job_verdicts,
    pool_jobs,
    pool_runs,
    tokens_matched_alpha,
)
from multispin.acceptance.shipped import device_alpha, shipped_tokens_matched_alpha

SAMPLED = {"temperature": 1.0, "top_k": 1024, "top_p": 1.0}


def _row(gamma: dict[int, int], gained: dict[int, int], rejected: list[int]):
    return SimpleNamespace(gamma=gamma, tokens_gained=gained, rejected=rejected, coupled=[])


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


# Per pair: how narrow its intervals must be, and the seeds its forecast is checked on (docs/system-model.md
# §5.5), which the runs it was measured on must stay apart from. The cross pair drafts little (mean γ
# about 1 at α 0.55), so its 120 runs hold a tenth of smollm2-135m's trials and its intervals are wider.
SHIPPED = {
    "smollm2-135m": {
        "verdict_width": 0.03,
        "tokens_width": 0.012,
        "verdict_apart": range(60),
        "tokens_apart": [*range(10, 30), *range(50, 60)],
    },
    "smollm2-135m:qwen2.5-coder-0.5b": {
        "verdict_width": 0.04,
        "tokens_width": 0.045,
        "verdict_apart": range(60),
        "tokens_apart": range(60),
    },
}


@pytest.mark.parametrize("pair", sorted(SHIPPED))
def test_the_shipped_rates_are_what_the_planner_plans_on(pair):
    limits = SHIPPED[pair]
    files = profiles.run_verdict_files(pair)
    assert files, f"{pair} ships its runs' verdicts"
    for data in files:
        for label, entry in data["tasks"].items():
            task = {v: k for k, v in profiles.TASK_SOURCE.items()}[label]
            lo, hi = entry["ci95"]
            assert lo < entry["alpha"] < hi and hi - lo < limits["verdict_width"] and entry["jobs"] >= 100
            # the planner plans on the tokens-matched α of the runs, inside its interval
            tokens = entry["tokens"]
            lo, hi = tokens["ci95"]
            assert lo < tokens["alpha"] < hi and hi - lo < limits["tokens_width"] and tokens["runs"] >= 100
            assert shipped_tokens_matched_alpha(pair, data["draft"], task, data["sampling"]) == tokens["alpha"]
            assert device_alpha(pair, data["draft"], task, data["sampling"], kind="planned") == tokens["alpha"]
        assert not set(data["runs"]["seeds"]) & set(limits["verdict_apart"])
        assert not set(data["tokens_runs"]["seeds"]) & set(limits["tokens_apart"])


def test_a_sampling_policy_without_runs_has_no_run_alpha():
    # the shrunk profile estimate stands
    greedy = {"temperature": 0.0, "top_k": 0, "top_p": 1.0}
    assert shipped_tokens_matched_alpha("smollm2-135m", "q5g64", "chat", greedy) is None
    assert shipped_tokens_matched_alpha("tiny", "close", "chat", SAMPLED) is None


def test_a_run_verdicts_file_without_tokens_gives_its_verdict_rate(monkeypatch):
    data = json.loads(json.dumps(profiles.run_verdict_files("smollm2-135m")[0]))
    for entry in data["tasks"].values():
        del entry["tokens"]
    monkeypatch.setattr(profiles, "run_verdict_files", lambda pair: [data])
    assert shipped_tokens_matched_alpha("smollm2-135m", "q5g64", "chat", SAMPLED) == data["tasks"]["sharegpt"]["alpha"]


def test_without_a_run_verdicts_file_the_run_alpha_is_the_shrunk_profile_estimate(monkeypatch):
    shrunk = device_alpha("smollm2-135m", "q5g64", "chat", SAMPLED, kind="shrunk")
    assert shrunk != device_alpha("smollm2-135m", "q5g64", "chat", SAMPLED, kind="planned")
    monkeypatch.setattr(profiles, "run_verdict_files", lambda pair: [])
    assert device_alpha("smollm2-135m", "q5g64", "chat", SAMPLED, kind="planned") == shrunk


def test_verdicts_by_response_token_places_each_trial_at_its_token():
    from multispin.acceptance.run_verdicts import verdicts_by_response_token

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
    from multispin.acceptance.run_verdicts import verdicts_by_response_token

    rng = np.random.default_rng(5)
    hard = verdicts_by_response_token(_jobs_with_a_first_token(rng, 0.5, 0.9, 200), {"0": "chat"})
    first, later = pool_jobs(hard[("chat", 0)]), pool_jobs(hard[("chat", 8)])
    assert first.ci95[0] < 0.5 < first.ci95[1] < later.ci95[0] and abs(later.alpha - 0.9) < 0.02
    # the control: the same rate at every token reads the same in every bin
    even = verdicts_by_response_token(_jobs_with_a_first_token(rng, 0.9, 0.9, 200), {"0": "chat"})
    rates = [pool_jobs(even[("chat", b)]) for b in (0, 1, 8)]
    assert all(abs(r.alpha - 0.9) < 0.05 for r in rates) and rates[0].ci95[1] > rates[2].ci95[0]


def test_draft_rounds_keep_the_rounds_that_carry_a_verdict():
    tasks = {"0": "chat", "1": "code"}
    rows = [
        SimpleNamespace(
            gamma={0: 4, 1: 5}, tokens_gained={0: 3, 1: 6}, rejected=[0], expected_tokens={0: 2.5, 1: 5.1}, coupled=[]
        ),
        # device 1 cut by EOS (2 tokens of a 5-draft, not rejected), device 3 drafts nothing
        SimpleNamespace(
            gamma={0: 4, 1: 5, 3: 0},
            tokens_gained={0: 5, 1: 2, 3: 1},
            rejected=[],
            expected_tokens={0: 4.0, 1: 2.0},
            coupled=[],
        ),
    ]
    assert draft_rounds(rows, tasks) == [
        DraftRound("chat", 4, 2.5),
        DraftRound("code", 5, 5.1),
        DraftRound("chat", 4, 4.0),
    ]


def _drafts(rng, n: int, mean: float, spread: float, gammas) -> tuple[list[DraftRound], int, int]:
    """``n`` drafting rounds whose acceptance differs from draft to draft (each draft's own rate:
    Beta around ``mean`` with sd ``spread``; 0 for i.i.d.), with each round's expected tokens at
    its own rate (what rounds.jsonl records from the drafted positions' β) and its verdict,
    (accepted, trials) pooled."""
    if spread > 0:
        k = mean * (1 - mean) / spread**2 - 1
        rates = rng.beta(mean * k, (1 - mean) * k, n)
    else:
        rates = np.full(n, mean)
    g = rng.choice(gammas, n)
    accepted = np.minimum(rng.geometric(1 - rates) - 1, g)
    trials = accepted + (accepted < g)
    rounds = [DraftRound("chat", int(gi), float(iid_tokens(gi, r))) for gi, r in zip(g, rates)]
    return rounds, int(accepted.sum()), int(trials.sum())


def test_the_tokens_matched_alpha_predicts_fresh_rounds_where_the_verdict_rate_over_counts():
    """Acceptance that differs from draft to draft (sd 0.12 around 0.82): fitted on one set of
    rounds (γ 3-7), the tokens-matched α predicts another set's tokens (γ 4-6) within 0.6% (0.25%
    here); the verdict rate of the same rounds, the negative control, over-counts them by more than
    1.2% (1.7%).
    Where every draft shares its rate, the two agree to 0.003."""
    rng = np.random.default_rng(5)
    fit, acc, tri = _drafts(rng, 40000, 0.82, 0.12, [3, 4, 5, 6, 7])
    fresh, _, _ = _drafts(rng, 40000, 0.82, 0.12, [4, 5, 6])
    g = np.array([r.gamma for r in fresh])
    realised = sum(r.expected_tokens for r in fresh)
    tokens = tokens_matched_alpha(fit)
    assert abs(iid_tokens(g, tokens).sum() / realised - 1) < 0.006
    assert iid_tokens(g, acc / tri).sum() / realised > 1.012
    same, acc, tri = _drafts(rng, 20000, 0.82, 0.0, [3, 4, 5, 6, 7])
    assert abs(tokens_matched_alpha(same) - acc / tri) < 0.003


def test_the_tokens_matched_interval_over_runs_covers():
    """120 simulated calibrations of 40 runs, each run's drafts sharing a rate of its own (sd 0.03
    around 0.82, as a run's prompts do) and differing from draft to draft: the bootstrap over runs
    covers the population's tokens-matched α about 95% of the time (0.96 at 200); a bootstrap over
    rounds (the negative control: a run's rounds taken as independent) misses often (0.72)."""
    rng = np.random.default_rng(6)

    def runs(n):
        return [
            _drafts(rng, 30, float(np.clip(rng.normal(0.82, 0.03), 0.5, 0.97)), 0.1, [3, 4, 5, 6, 7])[0]
            for _ in range(n)
        ]

    truth = tokens_matched_alpha([d for r in runs(3000) for d in r])
    covered, by_round, sims = 0, 0, 120
    for _ in range(sims):
        sample = runs(40)
        r = pool_runs(sample, resamples=300, seed=int(rng.integers(1 << 30)))
        covered += r.ci95[0] <= truth <= r.ci95[1]
        flat = pool_runs([[d] for run in sample for d in run], resamples=300, seed=int(rng.integers(1 << 30)))
        by_round += flat.ci95[0] <= truth <= flat.ci95[1]
    assert covered / sims >= 0.9, covered / sims
    assert by_round / sims < covered / sims - 0.05, (by_round / sims, covered / sims)


def test_tokens_matched_alpha_refuses_rounds_without_a_draft():
    with pytest.raises(ValueError, match="rounds"):
        tokens_matched_alpha([DraftRound("chat", 0, 1.0)])
    with pytest.raises(ValueError, match="runs"):
        pool_runs([[DraftRound("chat", 3, 2.0)]])
