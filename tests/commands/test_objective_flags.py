"""--objective and --energy-weight: one list of objectives, one-line errors."""

from __future__ import annotations

from typer.testing import CliRunner


def test_the_cli_lists_the_optimisers_objectives():
    from multispin.commands import _flag_groups
    from multispin.optimize import objectives
    from multispin.vocabulary import OBJECTIVES

    assert _flag_groups.OBJECTIVES is OBJECTIVES and objectives.OBJECTIVES is OBJECTIVES


def test_a_bad_objective_is_one_line_naming_the_flag_and_the_values(multispin):
    for verb in ("optimize", "testbed", "demo"):
        res = multispin(verb, "--objective", "fairest")
        assert res.code == 2 and res.err == (
            "error: --objective: 'fairest' is not one of 'sum', 'proportional-fair', 'max-min', 'energy'\n"
        ), (verb, res.err)


def test_optimize_reports_the_objectives_plan_beside_the_sums():
    import json

    from multispin.cli import app

    res = CliRunner().invoke(
        app,
        [
            "optimize",
            "--devices",
            "3",
            "--n-saa",
            "64",
            "--pul-dbm",
            "0",
            "--pdl-dbm",
            "10",
            "--objective",
            "max-min",
            "--no-baselines",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output.splitlines()[-1])
    o = doc["objective"]
    assert o["name"] == "max-min" and len(o["draft_len"]) == 3
    assert o["worst_device_goodput_tokens_per_s"] >= o["sum_plan_worst_device_goodput_tokens_per_s"] - 1e-9
    assert o["goodput_tokens_per_s"] <= doc["goodput_tokens_per_s"] + 1e-9
