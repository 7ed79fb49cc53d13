"""`multispin sweep --objective` and the sweep's per-device service columns: the sum's
numbers are main's, a non-sum objective changes the plans where it should, the per-chunk cache
tells objectives apart, and the service columns are the plan's per-device goodputs and joules."""

from __future__ import annotations

import json

import numpy as np
import pytest

import multispin as ms
from multispin.errors import ConfigError

GRID = {"radio.p_dl_dbm": [10, 30]}
SMALL = dict(devices=4, n_saa=40)
POLICIES = ["adaptive", "all_ul", "all_dl", "random", "best_uniform"]

# adaptive's and all_dl's mean goodput at P^dl = 10 and 30 dBm, as main (8ed93c1, before the
# objective) printed them: `multispin sweep --over radio.p_dl_dbm=10,30 --devices 4 --n-saa 40
# --drops 3 --policies adaptive,all_ul,all_dl,random,best_uniform --json`
MAIN_SUM = {
    (10, "adaptive"): 89.32005681228213,
    (30, "adaptive"): 119.03331236738877,
    (10, "all_dl"): 86.81069129674124,
    (30, "all_dl"): 119.03291473397626,
}


def _pinned(table) -> dict:
    return {
        (r["radio.p_dl_dbm"], r["policy"]): r["goodput_tokens_per_s"]
        for r in table.rows
        if (r["radio.p_dl_dbm"], r["policy"]) in MAIN_SUM
    }


@pytest.fixture(scope="module")
def sum_table():
    return ms.sweep(ms.scenario(**SMALL), over=GRID, drops=3, policies=POLICIES)


def test_the_sum_is_mains_and_the_default(sum_table):
    """Negative control: the max-min objective's plans give other goodputs, so the pin can fail."""
    assert _pinned(sum_table) == pytest.approx(MAIN_SUM, rel=1e-12)
    assert sum_table.objective == "sum" and json.loads(sum_table.to_json())["objective"] == "sum"
    explicit = ms.sweep(ms.scenario(**SMALL), over=GRID, drops=3, policies=POLICIES, objective="sum")
    assert explicit.to_json() == sum_table.to_json()
    fair = ms.sweep(ms.scenario(**SMALL), over=GRID, drops=3, policies=["adaptive", "all_dl"], objective="max-min")
    assert _pinned(fair) != pytest.approx(MAIN_SUM, rel=1e-12)


def test_service_columns_are_the_plans_per_device_goodputs_and_joules():
    """On one drop: Σ_k G_k of the service columns is the goodput column (the same plan and modes),
    Jain's index is experiments.service's, and energy per token is the energy objective's joules
    over the tokens at that γ. Negative control: all-DL's columns are not adaptive's on this drop."""
    from multispin.experiments.reproduce.drop import run_drop
    from multispin.experiments.service import jain_index
    from multispin.optimize.objectives import EnergyModel, ObjectiveSearch
    from multispin.optimize.plan import plan
    from multispin.system import World

    sc = ms.scenario(devices=6, n_saa=60, fields={"radio.p_dl_dbm": 10})
    row = run_drop(sc.to_dict(), {"modes": True, "service": True})
    world = World(sc)
    inst, u = world.instance(0), world.saa_uniforms(0)
    from multispin.optimize.baselines import baselines

    b = baselines(inst, u, world.mode_uniforms(0), draft_lengths=False)
    gamma = plan(inst, uniforms=u, extra_starts={n: dp.draft_len for n, dp in b.items()}).draft_len
    s = ObjectiveSearch(inst, u, "energy", EnergyModel.of(sc)).policy_modes_score(gamma)
    assert float(np.sum(s.device_goodput)) == pytest.approx(row["goodput"], rel=1e-9)
    assert row["goodput_worst"] == pytest.approx(float(np.min(s.device_goodput)), rel=1e-12)
    assert row["jain"] == pytest.approx(jain_index(s.device_goodput), rel=1e-12)
    assert row["energy_per_token_j"] == pytest.approx(s.e_energy_j / float(np.sum(s.expected_tokens)), rel=1e-12)
    assert 0 < row["energy_per_token_j"] < 10 and 1 / 6 <= row["jain"] <= 1
    for name in ("all_ul", "all_dl", "random"):  # each mode baseline: its own Σ_k G_k is its goodput
        g = b[name].draft_len
        mu = world.mode_uniforms(0) if name == "random" else None
        sb = ObjectiveSearch(inst, u, "energy", EnergyModel.of(sc), name, mode_uniforms=mu).policy_modes_score(g)
        assert float(np.sum(sb.device_goodput)) == pytest.approx(row[f"goodput_{name}"], rel=1e-9), name
    assert row["goodput_worst_all_dl"] != pytest.approx(row["goodput_worst"])
    # p95 TPOT: per sample and device, the round's T_comp + T_comm over 1 + the accepted drafts
    from multispin.optimize.goodput import t_comp_s
    from multispin.optimize.reactive import t_comm_batch

    for name, g, modes in (("", gamma, "optimal"), ("_all_ul", b["all_ul"].draft_len, "all_ul")):
        accepted = [(u[:, k, None] < inst.survival[k, 1 : g[k] + 1][None, :]).sum(axis=1) for k in range(len(g))]
        tokens = 1 + np.stack(accepted, axis=1)
        t = float(t_comp_s(inst, g)) + t_comm_batch(u > inst.survival[np.arange(len(g)), g], inst, modes, "equal")
        assert row[f"tpot_p95_s{name}"] == pytest.approx(np.percentile(t[:, None] / tokens, 95), rel=1e-12), name
        # negative controls: the median, or the round without its airtime, is another number
        assert row[f"tpot_p95_s{name}"] != pytest.approx(np.percentile(t[:, None] / tokens, 50)), name
        assert row[f"tpot_p95_s{name}"] != pytest.approx(np.percentile(t_comp_s(inst, g) / tokens, 95)), name


def _drop(objective: str) -> dict:
    from multispin.experiments.reproduce.drop import run_drop

    # seed 0, K = 6, P^dl = 10 dBm: the sum plan stops one device drafting (γ = 0), the worst device
    sc = ms.scenario(devices=6, n_saa=60, fields={"radio.p_dl_dbm": 10, "optimizer.objective": objective})
    return run_drop(sc.to_dict(), {"modes": True, "service": True})


def test_a_fair_objective_lifts_the_device_the_sum_starves():
    """proportional-fair and max-min: the worst device gets more than under the sum's plan, at a cost
    in sum goodput (never above the sum's, the sum's optimum on the same samples). Negative control:
    the sum objective's own drop has a device at γ = 0 and a lower worst device."""
    s, pf, mm = _drop("sum"), _drop("proportional-fair"), _drop("max-min")
    assert s["frac_no_draft"] > 0  # the premise: the sum starves a device here
    assert pf["frac_no_draft"] == 0 and pf["goodput_worst"] > s["goodput_worst"] * 1.2
    assert mm["goodput_worst"] >= pf["goodput_worst"] > s["goodput_worst"]
    for o in (pf, mm):
        assert o["goodput_sum_objective"] == pytest.approx(s["goodput"], rel=1e-12)
        assert o["goodput"] <= s["goodput"] * (1 + 1e-9)
        assert o["jain"] > s["jain"]


def test_the_energy_objective_spends_fewer_joules_per_token_than_the_sum():
    s, e = _drop("sum"), _drop("energy")
    assert e["energy_per_token_j"] < s["energy_per_token_j"]
    assert e["goodput"] <= s["goodput"] * (1 + 1e-9)


def _same(a, b) -> bool:
    return json.loads(a.to_json())["rows"] == json.loads(b.to_json())["rows"]


def test_the_cache_tells_objectives_apart(tmp_path, monkeypatch):
    """A max-min sweep over a folder that holds the sum's drops computes its own. Negative control: a
    cache key blind to the objective hands the max-min sweep the sum's stale drops, which the same
    check catches."""
    from multispin.experiments.reproduce import config

    kw = dict(over=GRID, drops=2, policies=["adaptive", "all_dl"])
    fresh = ms.sweep(ms.scenario(**SMALL), objective="max-min", **kw)
    ms.sweep(ms.scenario(**SMALL), out=tmp_path / "a", **kw)
    assert _same(ms.sweep(ms.scenario(**SMALL), objective="max-min", out=tmp_path / "a", **kw), fresh)
    # the energy weight, too: w = 0 and w = 50 are different drops
    w0 = ms.sweep(ms.scenario(**SMALL), objective="energy", energy_weight=0.0, out=tmp_path / "a", **kw)
    w50 = ms.sweep(ms.scenario(**SMALL), objective="energy", energy_weight=50.0, out=tmp_path / "a", **kw)
    assert _same(w50, ms.sweep(ms.scenario(**SMALL), objective="energy", energy_weight=50.0, **kw))
    assert not _same(w0, w50)

    real = config.Point.cache_key

    def blind(self, base_seed, start, stop, scenario=None):
        sc = dict(scenario if scenario is not None else self.scenario_dict())
        sc["optimizer"] = {k: v for k, v in sc["optimizer"].items() if k != "objective"}
        return real(self, base_seed, start, stop, sc)

    monkeypatch.setattr(config.Point, "cache_key", blind)
    ms.sweep(ms.scenario(**SMALL), out=tmp_path / "b", **kw)
    stale = ms.sweep(ms.scenario(**SMALL), objective="max-min", out=tmp_path / "b", **kw)
    assert not _same(stale, fresh)


def test_what_a_non_sum_objective_refuses():
    sc = ms.scenario(**SMALL)
    for kwargs, start in [
        (dict(objective="fairest"), "objective: unknown value 'fairest'"),
        (dict(objective="max-min", policies=["adaptive", "greedy_paper"]), "policies: greedy_paper: plan the sum"),
        (
            dict(objective="proportional-fair", over={"channel.speed_kmh": [0, 30]}),
            "objective: 'proportional-fair' plans on the known channel",
        ),
    ]:
        with pytest.raises(ConfigError) as exc:
            ms.sweep(sc, **{"over": GRID, "drops": 2, **kwargs})
        assert str(exc.value).startswith(start), str(exc.value)


def test_the_cli_objective_flags(multispin):
    """Bad input is one line naming the flag and the allowed values, exit 2; a good one prints the
    service columns and the objective in the title. Negative control: the sum's table has no
    'objective max-min' in its title."""
    res = multispin("sweep", "--over", "radio.p_dl_dbm=10", "--objective", "fairest")
    assert res.code == 2 and res.err == (
        "error: --objective: 'fairest' is not one of 'sum', 'proportional-fair', 'max-min', 'energy'\n"
    ), res.err
    res = multispin("sweep", "--over", "radio.p_dl_dbm=10", "--objective", "max-min", "--policies", "best_uniform")
    assert res.code == 2 and res.err.count("\n") == 1 and res.err.startswith("error: --policies: best_uniform")
    res = multispin("sweep", "--over", "radio.p_dl_dbm=10", "--energy-weight", "-1")
    assert res.code == 2 and res.err.count("\n") == 1 and "--energy-weight" in res.err, res.err
    args = ["sweep", "--over", "radio.p_dl_dbm=10", "--devices", "3", "--n-saa", "30", "--drops", "2", "--no-progress"]
    res = multispin(*args, "--objective", "max-min")
    assert res.code == 0, res.err
    assert "objective max-min" in res.out and "worst G [95%]" in res.out and "Jain [95%]" in res.out
    res = multispin(*args)
    assert res.code == 0 and "objective sum" in res.out and "objective max-min" not in res.out


def test_service_intervals_are_the_reproduce_statistics_of_the_same_drops(sum_table):
    """Each service figure is reproduce's bootstrap mean of the drops' column, and adaptive's change
    its paired ratio of means (stats.py), as goodput's. Negative control: the unpaired ratio of
    all-DL's drops against adaptive's drops in another order differs."""
    from multispin.experiments.intervals import bootstrap_mean_ci, ratio_of_means_ci
    from multispin.experiments.reproduce.config import RunConfig
    from multispin.experiments.reproduce.runner import run_points
    from multispin.experiments.sweep import check_policies, grid_points

    sc = ms.scenario(**SMALL)
    points = grid_points(sc, GRID, check_policies(POLICIES))
    rows = run_points([(p, 3) for p in points], RunConfig(seed=sc.seed, drops=3, use_cache=False, progress=False))
    drops = rows[(points[0].study, points[0].id)]
    got = next(r for r in sum_table.rows if r["radio.p_dl_dbm"] == 10 and r["policy"] == "all_dl")
    for key, column, short in [
        ("worst_device_goodput_tokens_per_s", "goodput_worst", "worst"),
        ("jain_index", "jain", "jain"),
        ("energy_per_token_j", "energy_per_token_j", "energy_per_token"),
        ("tpot_p95_s", "tpot_p95_s", "tpot_p95"),
    ]:
        mean, lo, hi, _ = bootstrap_mean_ci(r[f"{column}_all_dl"] for r in drops)
        assert (got[key], got[f"{key}_low"], got[f"{key}_high"]) == pytest.approx((mean, lo, hi)), key
        paired = ratio_of_means_ci([r[column] for r in drops], [r[f"{column}_all_dl"] for r in drops])
        assert (got[f"adaptive_{short}_pct"], got[f"adaptive_{short}_low"], got[f"adaptive_{short}_high"]) == (
            pytest.approx(paired)
        ), key
    shuffled = ratio_of_means_ci([r["goodput_worst"] for r in drops[::-1]], [r["goodput_worst_all_dl"] for r in drops])
    assert (got["adaptive_worst_low"], got["adaptive_worst_high"]) != pytest.approx(shuffled[1:])


def test_a_scenario_files_objective_and_energy_model_are_used(multispin, tmp_path):
    """Before, sweep refused optimizer.objective and energy.* in a scenario file; now the file's
    objective plans the sweep (as --objective does) and its energy model sets the joules. Negative
    control: the same file without them is the sum, with other joules per token."""
    args = ["sweep", "--over", "radio.p_dl_dbm=10", "--devices", "3", "--n-saa", "30", "--drops", "2"]
    args += ["--policies", "adaptive", "--json", "--no-progress"]
    path = tmp_path / "fair.yaml"
    path.write_text("preset: paper-qwen\noptimizer.objective: max-min\nenergy.draft_power_w: 8.0\n")
    res = multispin(*args, "--scenario", str(path))
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    flag = multispin(*args, "--objective", "max-min", "--set", "energy.draft_power_w=8.0")
    assert flag.code == 0, flag.err
    assert doc["objective"] == "max-min" and doc["rows"] == json.loads(flag.out)["rows"]
    plain = json.loads(multispin(*args).out)
    assert plain["objective"] == "sum"
    assert plain["rows"][0]["energy_per_token_j"] != pytest.approx(doc["rows"][0]["energy_per_token_j"])
