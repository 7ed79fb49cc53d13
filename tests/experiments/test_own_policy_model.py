"""Your own policy on the model and in the demo (experiments/own_policy.py, docs/own-policy.md): a
class that rebuilds all-DL from the protocol gives all_dl's figures exactly in ms.evaluate, ms.plan
and ms.sweep and its tokens in the demo; a hostile policy is a one-line error on the model too; the
bandit example is deterministic for a seed and learns from the last round's feedback."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import multispin as ms
from multispin.cli import app, main
from multispin.errors import ConfigError


@pytest.fixture(scope="module")
def small_plan():
    return ms.plan(ms.scenario("paper-qwen", devices=4, n_saa=40, seed=3))


def _same_rounds(a, b) -> bool:
    ra, rb = a.rounds, b.rounds
    return all(
        np.array_equal(getattr(ra, f), getattr(rb, f))
        for f in ("draft_len", "rejected", "tokens", "expected_tokens", "latency_s")
    )


def test_a_user_all_dl_gives_all_dl_figures_in_evaluate(examples, small_plan):
    built_in = ms.evaluate(small_plan, rounds=60, policy="all_dl")
    user = ms.evaluate(small_plan, rounds=60, policy="own_policies:AllDL")
    assert user.policy == "own_policies:AllDL"
    assert _same_rounds(user, built_in)
    assert user.goodput_tokens_per_s == built_in.goodput_tokens_per_s
    assert user.paired is not None and built_in.paired is not None
    assert user.paired.pct == built_in.paired.pct
    # adaptive ran the same draws both times
    assert user.adaptive.goodput_tokens_per_s == built_in.adaptive.goodput_tokens_per_s
    # negative control: another policy gives other figures on the same draws
    other = ms.evaluate(small_plan, rounds=60, policy="own_policies:Threshold")
    assert not _same_rounds(other, built_in)
    assert other.paired is not None and other.paired.pct != built_in.paired.pct


def test_a_user_all_dl_gives_all_dl_figures_in_plan_and_sweep(examples, small_plan):
    p = ms.plan(small_plan.scenario, policy="own_policies:AllDL")
    assert p.user is not None and p.user["goodput_tokens_per_s"] == p.baselines["all_dl"]
    sc = ms.scenario("paper-qwen", devices=3, n_saa=40)
    policies = ["adaptive", "all_dl", "own_policies:AllDL", "own_policies:Threshold"]
    t = ms.sweep(sc, over={"radio.p_dl_dbm": [10, 30]}, drops=2, policies=policies)
    assert t.policies == policies
    rows = {(r["radio.p_dl_dbm"], r["policy"]): r for r in t.rows}
    for p_dl in (10, 30):
        built_in, user = rows[(p_dl, "all_dl")], rows[(p_dl, "own_policies:AllDL")]
        for key in ("goodput_tokens_per_s", "goodput_low", "goodput_high", "adaptive_gain_pct", "mean_draft_len"):
            assert user[key] == built_in[key], key
        assert user["adaptive_gain_low"] == built_in["adaptive_gain_low"]
        # negative control: the threshold rule's γ = 4 everywhere gives another row
        assert rows[(p_dl, "own_policies:Threshold")]["goodput_tokens_per_s"] != built_in["goodput_tokens_per_s"]
        assert rows[(p_dl, "own_policies:Threshold")]["mean_draft_len"] == 4.0


class WrongModes:
    """Valid γ, but a mode for every device, rejected or not."""

    def draft_lengths(self, view):
        return [2] * len(view.devices)

    def modes(self, view, rejected):
        return {d: "dl" for d in view.devices}


def test_a_hostile_policy_is_a_one_line_error_on_the_model(examples, small_plan):
    nan = r"^policy Hostile, round 0: draft length of device 0 must be an integer in \[0, 20\] \(got nan\)$"
    with pytest.raises(ConfigError, match=nan):
        ms.evaluate(small_plan, rounds=10, policy="own_policies:Hostile")
    with pytest.raises(ConfigError, match=nan):
        ms.plan(small_plan.scenario, policy="own_policies:Hostile")
    with pytest.raises(ConfigError, match=nan):
        ms.sweep(small_plan.scenario, over={"radio.p_dl_dbm": [20]}, drops=2, policies=["own_policies:Hostile"])
    with pytest.raises(
        ConfigError, match=r"^policy WrongModes, round \d+: modes: device\(s\) \[.*\] were not rejected"
    ):
        ms.evaluate(small_plan, rounds=50, policy=WrongModes())
    with pytest.raises(ConfigError, match="unknown value 'all_up'"):
        ms.evaluate(small_plan, rounds=10, policy="all_up")
    # negative control: the same protocol, answered well, runs
    assert ms.evaluate(small_plan, rounds=10, policy="own_policies:Threshold").result.rounds == 10


def test_the_bandit_is_deterministic_for_a_seed_and_learns(examples, small_plan):
    a = ms.evaluate(small_plan, rounds=300, policy="own_policies:Bandit", seed=7)
    b = ms.evaluate(small_plan, rounds=300, policy="own_policies:Bandit", seed=7)
    assert _same_rounds(a, b) and a.goodput_tokens_per_s == b.goodput_tokens_per_s
    g = a.rounds.draft_len
    # it tries arms 1, 2, … in its first rounds (it counted each), then settles on some
    assert g[0].tolist() == [1] * 4 and g[1].tolist() == [2] * 4
    assert len({tuple(x) for x in g[-50:]}) < len({tuple(x) for x in g[:50]})
    # negative control: another seed draws other acceptances, so the bandit chooses otherwise
    c = ms.evaluate(small_plan, rounds=300, policy="own_policies:Bandit", seed=8)
    assert not np.array_equal(c.rounds.draft_len, g)


def test_a_demo_of_adaptive_and_a_user_policy_alone_is_a_comparison():
    from multispin.experiments.demo import DemoConfig

    assert DemoConfig.make(policies=("own_policies:Threshold", "adaptive")).policies == (
        "adaptive",
        "own_policies:Threshold",
    )
    with pytest.raises(ConfigError, match="at least one other"):  # negative control: adaptive alone
        DemoConfig.make(policies=("adaptive",))


def test_demo_refuses_a_built_in_name_or_a_missing_module_as_own_policy_in_one_line(tmp_path, capsys):
    for spec, says in (
        ("all_dl", "error: --policy: 'all_dl': demo compares the built-in policies anyway"),
        ("no_such_module_x:A", "error: policy: cannot import 'no_such_module_x'"),
    ):
        with pytest.raises(SystemExit) as stop:
            main(["demo", "--pair", "tiny", "--policy", spec, "--out", str(tmp_path)])
        err = capsys.readouterr().err
        assert stop.value.code == 2 and err.startswith(says) and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "summary.json").exists()


@pytest.mark.integration
def test_the_demo_pairs_a_user_policy_with_adaptive_and_a_user_all_dl_gives_all_dl_tokens(examples, tmp_path):
    from multispin.experiments.demo import DemoConfig, run_demo
    from multispin.experiments.testbed import TestbedConfig, run_testbed

    config = DemoConfig.make(
        pair="tiny",
        devices=3,
        rounds=4,
        max_new_tokens=16,
        n_saa=40,
        policies=("adaptive", "all_dl", "own_policies:AllDL", "own_policies:Threshold"),
        out=tmp_path / "demo",
    )
    point = run_demo(config).points[0]
    built_in, user = point.runs["all_dl"].results[0], point.runs["own_policies:AllDL"].results[0]
    assert user.texts == built_in.texts
    assert [r.tokens for r in user.rounds] == [r.tokens for r in built_in.rounds]
    verdicts = {c.b: c for c in point.comparisons}
    assert verdicts["own_policies:AllDL"].pct == verdicts["all_dl"].pct  # the same pairing with adaptive
    rows = {r.policy: r for r in point.rows}
    assert np.isnan(rows["own_policies:AllDL"].forecast_tokens_per_s)
    # negative control: the threshold rule drafts other γ, so other tokens
    other = point.runs["own_policies:Threshold"].results[0]
    assert [r.gamma for r in other.rounds] != [r.gamma for r in built_in.rounds]
    # the bandit in the testbed: it sees the last round (accepted tokens and latency), so it moves
    # to its second arm in round 1; without that feedback it would stay at γ = 1
    bandit = run_testbed(
        TestbedConfig.make(
            pair="tiny", devices=3, rounds=3, max_new_tokens=16, runner="thread", n_saa=40,
            user_policy="own_policies:Bandit",
        )
    )  # fmt: skip
    gammas = [sorted(r.gamma.values()) for r in bandit.rounds]
    assert gammas[0] == [1, 1, 1] and gammas[1] == [2, 2, 2]


def test_optimize_plays_a_user_policy_beside_the_plan(examples):
    args = ["optimize", "--devices", "3", "--n-saa", "40", "--json", "--policy"]
    doc = json.loads(CliRunner().invoke(app, [*args, "own_policies:AllDL"]).stdout)
    assert doc["user_policy"]["goodput_tokens_per_s"] == doc["baselines"]["all_dl"]
    # negative control: the threshold rule is another figure; without --policy no key at all
    other = json.loads(CliRunner().invoke(app, [*args, "own_policies:Threshold"]).stdout)
    assert other["user_policy"]["goodput_tokens_per_s"] != doc["baselines"]["all_dl"]
    assert "user_policy" not in json.loads(CliRunner().invoke(app, args[:-1]).stdout)
