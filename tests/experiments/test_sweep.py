"""multispin.sweep / plot / `multispin sweep`: a user's study over a grid with
95% intervals, on the drops, cache and statistics of `multispin reproduce`, paired on common
random numbers across policies and grid points; the CLI prints what the API returns."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import multispin as ms
from multispin.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
GRID = {"radio.p_dl_dbm": [10, 30]}
SMALL = dict(devices=4, n_saa=40)


@pytest.fixture(scope="module")
def table():
    return ms.sweep(ms.scenario(**SMALL), over=GRID, drops=4, policies=["adaptive", "all_ul", "all_dl"])


def test_rows_per_point_and_policy_with_intervals(table):
    assert [(r["radio.p_dl_dbm"], r["policy"]) for r in table.rows] == [
        (10, "adaptive"),
        (10, "all_ul"),
        (10, "all_dl"),
        (30, "adaptive"),
        (30, "all_ul"),
        (30, "all_dl"),
    ]
    for r in table.rows:
        assert r["n_drops"] == 4
        assert r["goodput_low"] <= r["goodput_tokens_per_s"] <= r["goodput_high"]
        if r["policy"] == "adaptive":
            assert r["adaptive_gain_pct"] is None
        else:  # the shipped search starts from every baseline's γ: never below one on a drop
            assert r["adaptive_gain_low"] <= r["adaptive_gain_pct"] <= r["adaptive_gain_high"]
            assert r["adaptive_gain_pct"] >= -1e-9


def test_intervals_are_the_reproduce_statistics_of_the_same_drops(table):
    """The rows are reproduce's per-point summaries of reproduce's drops (stats.py), not a copy."""
    from multispin.experiments.intervals import bootstrap_mean_ci, ratio_of_means_ci
    from multispin.experiments.reproduce.config import RunConfig
    from multispin.experiments.reproduce.runner import run_points
    from multispin.experiments.sweep import check_policies, grid_points

    sc = ms.scenario(**SMALL)
    points = grid_points(sc, GRID, check_policies(["adaptive", "all_ul", "all_dl"]))
    rows = run_points([(p, 4) for p in points], RunConfig(seed=sc.seed, drops=4, use_cache=False, progress=False))
    drops = rows[(points[1].study, points[1].id)]
    mean, lo, hi, n = bootstrap_mean_ci(r["goodput_all_ul"] for r in drops)
    got = next(r for r in table.rows if r["radio.p_dl_dbm"] == 30 and r["policy"] == "all_ul")
    assert (got["goodput_tokens_per_s"], got["goodput_low"], got["goodput_high"]) == pytest.approx((mean, lo, hi))
    gain = ratio_of_means_ci([r["goodput"] for r in drops], [r["goodput_all_ul"] for r in drops])
    assert (got["adaptive_gain_pct"], got["adaptive_gain_low"], got["adaptive_gain_high"]) == pytest.approx(gain)


def test_every_point_sees_the_same_drops(table):
    """Common random numbers across the grid: all-UL never uses P^dl, so with the same drops its
    goodput is the same at every P^dl. Negative control: points seeded by their own values (the
    default of a reproduce point) see other drops, and all-UL then differs between them."""
    from multispin.experiments.reproduce.config import RunConfig
    from multispin.experiments.reproduce.runner import run_points
    from multispin.experiments.sweep import grid_points

    ul = [r for r in table.rows if r["policy"] == "all_ul"]
    assert ul[0]["goodput_tokens_per_s"] == ul[1]["goodput_tokens_per_s"]
    own = [dataclasses.replace(p, seed_params=None) for p in grid_points(ms.scenario(**SMALL), GRID, ["all_ul"])]
    rows = run_points([(p, 4) for p in own], RunConfig(drops=4, use_cache=False, progress=False))
    means = [np.mean([r["goodput_all_ul"] for r in rows[(p.study, p.id)]]) for p in own]
    assert means[0] != means[1]


def test_same_seed_same_table_and_the_cache_resumes(table, tmp_path):
    again = ms.sweep(ms.scenario(**SMALL), over=GRID, drops=4, policies=["adaptive", "all_ul", "all_dl"], out=tmp_path)
    assert again.to_json() == table.to_json()
    assert list((tmp_path / "cache" / "sweep").glob("*.json"))
    cached = ms.sweep(ms.scenario(**SMALL), over=GRID, drops=4, policies=["adaptive", "all_ul", "all_dl"], out=tmp_path)
    assert cached.to_json() == table.to_json()
    other = ms.sweep(ms.scenario(**SMALL), over=GRID, drops=4, policies=["adaptive", "all_ul", "all_dl"], seed=7)
    assert other.to_json() != table.to_json()


def test_bad_sweeps_are_one_config_error():
    sc = ms.scenario(**SMALL)
    for kwargs, start in [
        (dict(over={}), "over:"),
        (dict(over={"radio.p_dl_dbm": []}), "over: radio.p_dl_dbm"),
        (dict(over={"radio.p_dl_dbm": [999]}), "radio.p_dl_dbm: must be in"),
        (dict(over=GRID, policies=["target_only"]), "policies: unknown policy 'target_only'"),
        (dict(over=GRID, drops=1), "drops: must be in [2, 100000]"),
        (dict(over={"seed": [1, 2]}), "over: seed: cannot be swept"),
    ]:
        with pytest.raises(ConfigError) as exc:
            ms.sweep(sc, **{"drops": 2, **kwargs})
        assert str(exc.value).startswith(start), str(exc.value)


def test_plot_draws_one_line_per_policy(table, tmp_path):
    fig = ms.plot(table)
    assert [ln.get_label() for ln in fig.axes[0].get_lines()] == ["adaptive", "all_ul", "all_dl"]
    ms.plot(table, tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 5000
    with pytest.raises(ConfigError):
        ms.plot(table, field="radio.p_ul_dbm")


def test_plot_draws_each_service_metric_and_names_the_allowed_ones(table, tmp_path):
    from multispin.experiments.sweep import PLOT_METRICS

    adaptive = sorted((r for r in table.rows if r["policy"] == "adaptive"), key=lambda r: r["radio.p_dl_dbm"])
    drawn = {}
    for metric, (key, *_) in PLOT_METRICS.items():
        fig = ms.plot(table, metric=metric)
        line = fig.axes[0].get_lines()[0]
        assert line.get_label() == "adaptive"
        drawn[metric] = list(line.get_ydata())
        assert drawn[metric] == pytest.approx([r[key] for r in adaptive]), metric
    assert set(drawn) == {"goodput", "worst_device_goodput", "jain_index", "tpot_p95", "energy_per_token"}
    # negative control: each metric draws its own numbers, not goodput's again
    assert all(drawn[m] != pytest.approx(drawn["goodput"]) for m in drawn if m != "goodput")
    ms.plot(table, tmp_path / "jain.png", metric="jain_index")
    assert (tmp_path / "jain.png").stat().st_size > 5000
    with pytest.raises(ConfigError) as exc:
        ms.plot(table, metric="p99")
    assert str(exc.value) == (
        "metric: 'p99' is not one of goodput, worst_device_goodput, jain_index, tpot_p95, energy_per_token"
    )


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run(
        [sys.executable, "-m", "multispin", *args], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT
    )


def test_the_cli_prints_what_the_api_returns(table, tmp_path):
    args = [
        "sweep",
        "--devices",
        "4",
        "--n-saa",
        "40",
        "--over",
        "radio.p_dl_dbm=10,30",
        "--drops",
        "4",
        "--policies",
        "adaptive,all_ul,all_dl",
        "--no-progress",
    ]
    res = _cli(*args, "--json", "--plot", str(tmp_path / "s.png"))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == json.loads(table.to_json())
    assert (tmp_path / "s.png").exists() and f"figure: {tmp_path / 's.png'}" in res.stderr
    res = _cli(*args)
    assert res.returncode == 0 and "adaptive vs [95%]" in res.stdout
    ul30 = next(r for r in table.rows if r["radio.p_dl_dbm"] == 30 and r["policy"] == "all_ul")
    assert f"{ul30['goodput_tokens_per_s']:.1f} [{ul30['goodput_low']:.1f}, {ul30['goodput_high']:.1f}]" in res.stdout
    res = _cli("sweep", "--over", "radio.p_dl_dbm=10", "--policies", "all_ul,nope")
    assert res.returncode == 2 and res.stderr.startswith("error: --policies: unknown policy 'nope'")


def test_set_holds_a_field_fixed():
    res = _cli(
        "sweep",
        "--devices",
        "3",
        "--n-saa",
        "30",
        "--set",
        "radio.bandwidth_hz=5e6",
        "--over",
        "radio.p_dl_dbm=20",
        "--drops",
        "2",
        "--policies",
        "adaptive",
        "--json",
        "--no-progress",
    )
    assert res.returncode == 0, res.stderr
    want = ms.sweep(
        ms.scenario(devices=3, n_saa=30, fields={"radio.bandwidth_hz": 5e6}),
        over={"radio.p_dl_dbm": [20]},
        drops=2,
        policies=["adaptive"],
    )
    assert json.loads(res.stdout) == json.loads(want.to_json())


def test_an_interrupted_sweep_says_how_far_it_got_and_how_to_resume(monkeypatch, tmp_path):
    from multispin.errors import Interrupted
    from multispin.experiments.reproduce import runner

    def stop(*args, **kwargs):
        raise KeyboardInterrupt
        yield  # a generator, as run_calls is

    monkeypatch.setattr(runner, "run_calls", stop)
    with pytest.raises(Interrupted) as exc:
        ms.sweep(ms.scenario(**SMALL), over=GRID, drops=2)
    assert str(exc.value) == "interrupted after 0 of 4 drops; nothing was kept (give --out to resume)"
    with pytest.raises(Interrupted) as exc:
        ms.sweep(ms.scenario(**SMALL), over=GRID, drops=2, out=tmp_path)
    assert str(exc.value) == "interrupted after 0 of 4 drops; rerun the same command to resume"


def test_the_help_lists_every_sweep_policy():
    from multispin.commands.sweep import POLICY_NAMES
    from multispin.experiments.sweep import SWEEP_POLICIES

    assert POLICY_NAMES.split(", ") == list(SWEEP_POLICIES)
