"""ms.plan(verify=...) and `multispin optimize --verify`: the three-way plan, its coupled share,
its baselines and the label of the assumed coupled α."""

import json

from typer.testing import CliRunner

import multispin as ms
from multispin.cli import app
from multispin.system.coupled_alpha import ASSUMPTION

SMALL = dict(devices=6, n_saa=100)


def test_three_way_plan_beats_adaptive_and_all_coupled_and_stays_under_its_bound():
    p = ms.plan(ms.scenario(**SMALL), verify="choose")
    g = p.goodput_tokens_per_s
    assert g >= p.baselines["adaptive"] * (1 - 1e-12) and g >= p.baselines["all_coupled"] * (1 - 1e-12)
    assert g <= p.certificate.upper_bound_tokens_per_s
    doc = p.to_dict()
    assert doc["coupled_alpha"] == ASSUMPTION and doc["verify"] == "choose"
    assert doc["coupled_share"] == sum(d["coupled"] for d in doc["devices"]) / 6
    # the default is the paper's plan: no coupled device, no assumption
    plain = ms.plan(ms.scenario(**SMALL)).to_dict()
    assert plain["coupled_alpha"] is None and plain["coupled_share"] == 0.0
    assert plain["goodput_tokens_per_s"] == doc["baselines"]["adaptive"]


def test_cli_verify_prints_the_share_and_the_assumption_and_refuses_bad_values():
    runner = CliRunner()
    res = runner.invoke(app, ["optimize", "--devices", "4", "--n-saa", "50", "--verify", "choose", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["verify"] == "choose" and doc["coupled_alpha"] == ASSUMPTION
    res = runner.invoke(app, ["optimize", "--devices", "4", "--n-saa", "50", "--verify", "choose"])
    assert res.exit_code == 0 and "coupled share" in res.output and "ASSUMED" in res.output
    bad = runner.invoke(app, ["optimize", "--verify", "neither"])
    assert bad.exit_code == 2 and "neither" in bad.output and "Traceback" not in bad.output
