"""The forecast check's recorded runs (docs/data/forecast-check/, one `tools/forecast_gap.py runs` line
per run) say what docs/results.md says of them: recomputed here with the
estimator `table` uses, so a claim cannot drift from its evidence."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from multispin.experiments.paired import ratio_of_sums

DATA = Path(__file__).resolve().parents[2] / "docs" / "data" / "forecast-check"
POLICIES = ("adaptive", "all_dl", "all_ul")


def _runs(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


def _ratio(runs: list[dict], policy: str | None = None, den: str = "forecast"):
    rows = [x for x in runs if policy in (None, x["policy"])]
    return ratio_of_sums([x["real"] for x in rows], [x[den] for x in rows], [x["seed"] for x in rows])


@pytest.mark.parametrize("policy", POLICIES)
def test_the_cross_pair_forecast_is_within_two_percent_on_its_run_alpha(policy):
    runs = _runs("cross-tokens-alpha-seeds-0-44.jsonl")
    assert sorted({x["seed"] for x in runs if x["policy"] == policy}) == list(range(45))
    r = _ratio(runs, policy)
    assert 0.98 < r.low < 1.0 < r.high < 1.02, (r.estimate, r.low, r.high)


def test_the_check_tells_the_profile_alpha_from_the_run_alpha():
    # the negative control: the same check on the runs that planned on the shrunk profile α (1.2%
    # optimistic pooled) fails it, pooled and for all-DL
    before = _runs("cross-shrunk-alpha-seeds-100-219.jsonl")
    assert not set(x["seed"] for x in before) & set(range(45))
    pooled, all_dl = _ratio(before), _ratio(before, "all_dl")
    assert pooled.high < 1.0 and all_dl.low < 0.98


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_contains_one_on_smollm2_fresh_seeds(policy):
    # what the docs say of seeds 60-89 alone (inside ±2% needed more seeds: the intervals are ±2.1-3.0%)
    runs = _runs("smollm2-tokens-alpha-seeds-60-89.jsonl")
    assert sorted({x["seed"] for x in runs if x["policy"] == policy}) == list(range(60, 90))
    r = _ratio(runs, policy)
    assert r.low < 1.0 < r.high


SMOLLM2_LATER = "smollm2-tokens-alpha-seeds-90-179.jsonl"


def _smollm2_all() -> list[dict]:
    return _runs("smollm2-tokens-alpha-seeds-60-89.jsonl") + _runs(SMOLLM2_LATER)


@pytest.mark.parametrize("policy", POLICIES)
def test_smollm2_over_120_seeds_per_policy(policy):
    # what §5.5 says of seeds 60-179 on the realised tokens, the target met (the same code
    # throughout; a seed re-run on the later code gives the same goodput to the last digit)
    runs = _smollm2_all()
    assert sorted({x["seed"] for x in runs if x["policy"] == policy}) == list(range(60, 180))
    r = _ratio(runs, policy)
    assert 0.98 < r.low < 1.0 < r.high < 1.02, (r.estimate, r.low, r.high)


def _full(runs: list[dict], policy: str | None = None, den: str = "forecast"):
    rows = [x for x in runs if policy in (None, x["policy"]) and x.get("full") is not None]
    return ratio_of_sums([x["full"] for x in rows], [x[den] for x in rows], [x["seed"] for x in rows])


@pytest.mark.parametrize("policy", POLICIES)
def test_smollm2_outcome_conditioned_is_within_two_percent(policy):
    # the runs that log E[T_comm | drafts] (seeds 94-134 and 138-179): tokens and T_comm without
    # the acceptance test's luck, over the same forecast
    runs = _runs(SMOLLM2_LATER)
    seeds = sorted({x["seed"] for x in runs if x["policy"] == policy and x.get("full") is not None})
    assert seeds == [*range(94, 135), *range(138, 180)]
    r = _full(runs, policy)
    assert 0.98 < r.low < 1.0 < r.high < 1.02, (r.estimate, r.low, r.high)


def test_smollm2_outcome_conditioned_tells_the_budget_blind_forecast_apart():
    # the negative control on the same runs: the forecast that plans as if prompts never ended
    r = _full(_runs(SMOLLM2_LATER), den="blind")
    assert r.high < 1.0, (r.estimate, r.low, r.high)


def test_smollm2_realised_tells_the_budget_blind_forecast_apart():
    # the negative control over the same 120 seeds per policy: pooled by seed it excludes 1
    runs = _smollm2_all()
    r = _ratio(runs, den="blind")
    assert r.high < 1.0, (r.estimate, r.low, r.high)


def _fresh_seed_runs(name: str, policy: str) -> list[dict]:
    """The runs of ``name``: one of ``policy`` per fresh seed 60-89 (apart from the calibration seeds)."""
    runs = _runs(name)
    assert sorted(x["seed"] for x in runs) == list(range(60, 90)) and {x["policy"] for x in runs} == {policy}
    return runs


THREE_WAY = "smollm2-three-way-seeds-60-89.jsonl"


def test_the_three_way_forecast_contains_one_on_30_fresh_seeds():
    # what docs/results.md says of the coupled policy's forecast check: realised / forecast
    # contains 1 on seeds 60-89, but its interval reaches past 1.02 (the ±2% target needs more
    # seeds, as the standard policies needed 120); the point estimate is 1.3% high
    runs = _fresh_seed_runs(THREE_WAY, "three_way")
    r = _ratio(runs)
    assert 0.98 < r.low < 1.0 < r.high < 1.04, (r.estimate, r.low, r.high)
    assert 1.02 < r.high  # not yet inside the ±2% band: said so, not hidden


def test_the_three_way_check_tells_the_budget_blind_forecast_apart():
    # the negative control on the same runs: the budget-blind forecast (no prompt ever ends) is
    # excluded, so the check has the power to see a 2% miss
    runs = _runs(THREE_WAY)
    blind = _ratio(runs, den="blind")
    assert blind.high < 1.0, (blind.estimate, blind.low, blind.high)


ALL_COUPLED = "smollm2-all-coupled-seeds-60-89.jsonl"


def test_the_all_coupled_forecast_contains_one_but_its_control_is_not_excluded():
    # what docs/results.md says of all-coupled's forecast check on seeds 60-89: realised / forecast
    # contains 1, its interval reaches past 1.02; and on these 30 runs the budget-blind forecast is
    # not excluded either, so this check cannot yet see a 2% miss (said so, not hidden)
    runs = _fresh_seed_runs(ALL_COUPLED, "all_coupled")
    r = _ratio(runs)
    assert 0.98 < r.low < 1.0 < r.high < 1.04, (r.estimate, r.low, r.high)
    assert 1.02 < r.high
    blind = _ratio(runs, den="blind")
    assert blind.low < 1.0 < blind.high, (blind.estimate, blind.low, blind.high)


ALL_COUPLED_RUNS_ALPHA = "smollm2-all-coupled-runs-alpha-seeds-60-89.jsonl"


THREE_WAY_RUNS_ALPHA = "smollm2-three-way-runs-alpha-seeds-60-89.jsonl"
ON_RUNS_ALPHA = [("all_coupled", ALL_COUPLED_RUNS_ALPHA, ALL_COUPLED), ("three_way", THREE_WAY_RUNS_ALPHA, THREE_WAY)]


@pytest.mark.parametrize(("policy", "name", "before"), ON_RUNS_ALPHA)
def test_on_the_coupled_runs_alpha_each_coupled_policy_is_forecast_within_two_percent(policy, name, before):
    # what docs/results.md says of the coupled policies' check once their devices plan on the coupled
    # runs' α (fitted on seeds 100-129): realised / forecast 0.996 (all-coupled) and 0.997 (three-way)
    # on the same seeds 60-89, each interval's low end 2.2-2.4% below 1 (not wholly inside ±2% on 30
    # seeds); the budget-blind control excluded for both
    runs = _fresh_seed_runs(name, policy)
    r = _ratio(runs)
    assert 0.98 < r.estimate < 1.02 and 0.97 < r.low < 0.98 and 1.0 < r.high < 1.02, (r.estimate, r.low, r.high)
    blind = _ratio(runs, den="blind")
    assert blind.high < 1.0, (blind.estimate, blind.low, blind.high)


def test_on_the_coupled_runs_alpha_all_coupled_forecasts_each_part():
    # the forecast's parts for all-coupled (no air): tokens per round, γ and T_comp each within 0.5%
    runs = _runs(ALL_COUPLED_RUNS_ALPHA)
    for real, forecast in (
        ("tokens_per_round", "forecast_tokens_per_round"),
        ("mean_gamma", "forecast_mean_gamma"),
        ("t_comp", "forecast_t_comp_s"),
    ):
        assert abs(sum(x[real] for x in runs) / sum(x[forecast] for x in runs) - 1) < 0.005


@pytest.mark.parametrize(("policy", "name", "before"), ON_RUNS_ALPHA)
def test_the_check_tells_the_ratio_prior_from_the_coupled_runs_alpha(policy, name, before):
    # the negative control, paired by seed: the runs that planned on the planned α × the teacher-
    # forced ratio read 1.6-1.8% higher against their forecast, outside the noise of the pairing
    old = {x["seed"]: x for x in _runs(before)}
    new = _runs(name)
    diff = np.array(
        [np.log(x["real"] / x["forecast"] / (old[x["seed"]]["real"] / old[x["seed"]]["forecast"])) for x in new]
    )
    half = 2.045 * diff.std(ddof=1) / np.sqrt(diff.size)  # Student's t, 29 degrees of freedom
    assert diff.mean() + half < 0, (diff.mean(), half)
