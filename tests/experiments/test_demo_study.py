"""The demo at the paper's K and the study (`demo --study`): the policies a run compares, seeds run
in parallel giving the same numbers as one after another, and realised / forecast over seeds."""

from __future__ import annotations

import json

import numpy as np
import pytest

from multispin.commands._scenario_fields import running_values
from multispin.errors import ConfigError, RunFailed
from multispin.experiments.demo import DemoConfig, PolicyRuns, SweepPoint, complete_seeds, forecast_ratio, run_demo
from multispin.experiments.demo_defaults import DEMO_DEVICES, STUDY_POLICIES
from multispin.models.registry import resolve_pair


def test_the_demo_defaults_to_the_papers_k_on_a_device_pool_and_testbed_keeps_its_own():
    cfg = DemoConfig()
    assert cfg.devices == DEMO_DEVICES == 20 and cfg.runner == "pool"
    tb = cfg.testbed("all_ul", 0, None, cfg.out)
    # the pool drafts for all K devices: its rounds get the longer timeout, not the lone device's 120 s
    assert tb.runner == "pool" and tb.devices == 20 and tb.round_timeout_s == cfg.round_timeout_s > 120
    assert running_values("paper-qwen", set(), {"devices": DEMO_DEVICES}, devices=None)["devices"] == 20
    assert running_values("paper-qwen", set(), devices=None)["devices"] == 8  # testbed's default
    assert running_values("paper-qwen", set(), {"devices": DEMO_DEVICES}, devices=5)["devices"] == 5  # a flag wins


@pytest.mark.parametrize(
    "policies", [("all_ul", "all_dl"), ("adaptive",), ("adaptive", "greedy"), ("adaptive", "all_dl", "all_dl")]
)
def test_a_demo_needs_adaptive_and_another_known_policy_each_once(policies):
    with pytest.raises(ConfigError, match="policies: three_way or adaptive and at least one other"):
        DemoConfig.make(policies=policies)


def test_policies_run_in_the_demos_order_adaptive_first():
    assert DemoConfig.make(policies=("target_only", "all_dl", "adaptive")).policies == (
        "adaptive",
        "all_dl",
        "target_only",
    )


def test_forecast_ratio_is_the_ratio_of_sums_over_seeds_with_a_log_jackknife_interval():
    r = forecast_ratio([90.0, 110.0, 100.0], [100.0, 100.0, 100.0])
    # leave-one-seed-out ratios 210/200, 190/200, 200/200; jackknife s.e. of their logs, t with 2 df
    loo = np.log([1.05, 0.95, 1.0])
    half = 4.302652729911275 * np.sqrt(2 / 3 * np.sum((loo - loo.mean()) ** 2))
    assert r is not None and r.estimate == pytest.approx(1.0) and r.seeds == 3
    assert r.low == pytest.approx(np.exp(-half)) and r.high == pytest.approx(np.exp(half))
    # weighted by the forecast: a seed forecast twice as high counts twice
    weighted = forecast_ratio([90.0, 220.0], [100.0, 200.0])
    assert weighted is not None and weighted.estimate == pytest.approx(310 / 300)
    one = forecast_ratio([90.0], [100.0])
    assert one is not None and one.estimate == pytest.approx(0.9) and one.low is None
    assert forecast_ratio([90.0], [None]) is None


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    cfg = DemoConfig.make(
        pair="tiny", devices=2, rounds=4, seeds=2, max_new_tokens=5, policies=STUDY_POLICIES, out=out / "serial", seed=4
    )
    return cfg, run_demo(cfg, resolve_pair("tiny"))


def test_the_study_compares_adaptive_with_all_dl_only(tiny_study):
    cfg, result = tiny_study
    point = result.points[0]
    assert [r.policy for r in point.rows] == ["adaptive", "all_dl"]
    assert all(r.vs_target_only is None for r in point.rows)
    assert [(c.a, c.b) for c in point.comparisons] == [("adaptive", "all_dl")]
    ratio = point.rows[0].realised_over_forecast
    assert ratio is not None and ratio.seeds == 2 and ratio.low <= ratio.estimate <= ratio.high
    # the conditioned check divides each seed's acceptance-conditioned goodput by the same forecast
    cond = point.rows[0].conditioned_over_forecast
    per_seed = point.rows[0].per_seed
    assert cond is not None and cond.estimate == pytest.approx(
        sum(x.acceptance_conditioned_goodput_tokens_per_s for x in per_seed)
        / sum(x.forecast_tokens_per_s for x in per_seed)
    )
    saved = json.loads((cfg.out / "summary.json").read_text())
    assert [r["policy"] for r in saved["points"][0]["policies"]] == ["adaptive", "all_dl"]
    assert [s["seed"] for s in saved["points"][0]["policies"][0]["per_seed"]] == [4, 5]


@pytest.mark.slow
def test_a_run_that_ended_early_leaves_its_seed_out_of_every_policy(tiny_study):
    """A study whose pool was killed mid-run (out of memory: seed 6 of a K = 20 study ended after
    10 of 20 rounds) crashed in its summary on the ragged rounds; the seed now leaves every
    policy's figures, the rest stay paired, and summary.json says which run and why."""
    import dataclasses

    cfg, result = tiny_study
    runs = result.points[0].runs
    seeds = [res.config.seed for res in runs["adaptive"].results]
    cut = {
        p: PolicyRuns(
            p,
            [
                dataclasses.replace(res, rounds=res.rounds[:2])
                if p == "adaptive" and res.config.seed == seeds[1]
                else res
                for res in pr.results
            ],
        )
        for p, pr in runs.items()
    }
    with pytest.raises(ValueError):  # the negative control: what the study did before
        SweepPoint(None, None, cut).summarise()
    kept, left_out = complete_seeds(cut, cfg.rounds)
    assert [x["seed"] for x in left_out] == [seeds[1]] and left_out[0]["policy"] == "adaptive"
    assert left_out[0]["rounds"] == 2 and left_out[0]["of"] == cfg.rounds
    assert all([res.config.seed for res in pr.results] == [seeds[0]] for pr in kept.values())
    point = SweepPoint(None, None, kept, left_out=left_out)
    point.summarise()
    assert point.to_dict()["left_out"] == left_out and point.comparisons[0].b == "all_dl"
    # nothing comparable left: one line naming each short run
    every = {
        p: PolicyRuns(p, [dataclasses.replace(r, rounds=r.rounds[:1]) for r in pr.results]) for p, pr in runs.items()
    }
    with pytest.raises(RunFailed, match=r"every seed has a run that ended early \(adaptive seed 4 after 1 of 4 rounds"):
        complete_seeds(every, cfg.rounds)
    assert complete_seeds(runs, cfg.rounds) == (runs, [])


def test_seeds_run_in_a_process_pool_give_the_numbers_run_one_after_another_give(tiny_study):
    cfg, serial = tiny_study
    par = run_demo(
        cfg.model_copy(update={"executor": "local", "workers": 2, "out": cfg.out.parent / "local"}),
        resolve_pair("tiny"),
    )
    for a, b in zip(serial.points[0].rows, par.points[0].rows):
        assert a.per_seed == b.per_seed
    assert serial.points[0].comparisons[0].pct == par.points[0].comparisons[0].pct


def test_demo_study_on_the_cli_prints_the_one_verdict_and_the_forecast_ratio(tmp_path):
    from typer.testing import CliRunner

    from multispin.cli import app

    res = CliRunner().invoke(
        app,
        [
            "demo",
            "--pair",
            "tiny",
            "--devices",
            "2",
            "--study",
            "--rounds",
            "2",
            "--seeds",
            "2",
            "--max-new-tokens",
            "4",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "adaptive vs all_dl: " in res.output and "adaptive vs all_ul" not in res.output
    assert "realised / forecast over 2 seeds (95% interval): adaptive " in res.output
    assert "conditioned / forecast over 2 seeds (95% interval): adaptive " in res.output
    assert "steady state: 2 rounds × 2 seed(s)" in res.output


def test_demo_refuses_an_unknown_executor_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from multispin.cli import app

    res = CliRunner().invoke(app, ["demo", "--pair", "tiny", "--executor", "cloud", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "--executor" in res.output and "serial" in res.output
