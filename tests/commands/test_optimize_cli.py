"""`multispin optimize`: table and JSON output, config files, one-line errors."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from multispin import cli


def _run(args):
    return CliRunner().invoke(cli.app, args)


def test_json_report_has_the_documented_fields():
    res = _run(
        [
            "optimize",
            "--scenario",
            "paper-qwen",
            "--devices",
            "6",
            "--pdl-dbm",
            "16",
            "--seed",
            "0",
            "--n-saa",
            "300",
            "--json",
        ]
    )
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    assert r["goodput_tokens_per_s"] > 0
    assert set(r["baselines"]) == {"all_ul", "all_dl", "random", "best_uniform", "computation_only", "greedy_paper"}
    assert all(r["goodput_tokens_per_s"] >= g * (1 - 1e-9) for g in r["baselines"].values())
    assert len(r["devices"]) == 6
    for d in r["devices"]:
        for key in (
            "alpha",
            "draft_latency_s",
            "channel_gain",
            "draft_len",
            "distance_m",
            "rejection_prob",
            "ul_latency_s",
            "ul_share",
        ):
            assert key in d
        assert 0 <= d["draft_len"] <= 20 and 0 < d["alpha"] < 1
    assert r["bandwidth_hz"] == 10e6 and r["p_ul_dbm"] == 10.0 and r["p_dl_dbm"] == 16.0
    assert r["noise_psd_dbm_per_hz"] == -174.0 and r["noise_figure_db"] == 7.0
    assert r["payload_bits"] == 34_816 and r["n_saa"] == 300
    assert (r["t_ver0_s"], r["t_ver1_s"]) == pytest.approx((0.0428, 0.0076))
    assert r["acceptance_assumed"] is True
    assert r["g_max_tokens_per_s"] >= r["goodput_tokens_per_s"]
    c = r["certificate"]
    assert c["best_baseline_tokens_per_s"] == max(r["baselines"].values())
    assert c["best_baseline"] in r["baselines"] and c["gain_over_best_baseline_pct"] >= -1e-9
    assert c["upper_bound_tokens_per_s"] >= r["g_max_tokens_per_s"] * (1 - 1e-12)
    assert c["gap_to_upper_bound_pct"] == pytest.approx(
        100 * (1 - r["goodput_tokens_per_s"] / c["upper_bound_tokens_per_s"])
    )
    # the communication-aware bound: above the plan, never above the free-communication bound
    assert r["goodput_tokens_per_s"] <= c["communication_bound_tokens_per_s"] <= c["upper_bound_tokens_per_s"]
    assert c["gap_to_communication_bound_pct"] == pytest.approx(
        100 * (1 - r["goodput_tokens_per_s"] / c["communication_bound_tokens_per_s"])
    )
    assert c["bound_method"] == "single_device+table" and c["proven_optimal"] is False


def test_certified_policy_reports_proven_optimal():
    res = _run(["optimize", "--devices", "4", "--pdl-dbm", "22", "--n-saa", "200", "--draft-policy", "certified"])
    assert res.exit_code == 0, res.output
    assert "communication-aware bound" in res.stdout and "proven optimal" in res.stdout
    res = _run(
        ["optimize", "--devices", "4", "--pdl-dbm", "22", "--n-saa", "200", "--draft-policy", "certified", "--json"]
    )
    c = json.loads(res.stdout)["certificate"]
    assert c["proven_optimal"] is True and c["gap_to_communication_bound_pct"] == pytest.approx(0.0, abs=1e-6)


def test_table_output_and_config_file(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text("preset: paper-r1\ndevices:\n  count: 4\noptimizer:\n  n_saa: 200\n")
    res = _run(["optimize", "--scenario", str(cfg), "--no-baselines"])
    assert res.exit_code == 0, res.output
    assert "paper-r1" in res.stdout and "G (tokens/s)" in res.stdout and "T_comp" in res.stdout
    prof = tmp_path / "acc.json"
    prof.write_text(json.dumps({"tasks": {"humaneval": 0.9, "gsm8k": 0.85, "mt_bench": 0.8, "ifeval": 0.83}}))
    res = _run(["optimize", "--scenario", str(cfg), "--acceptance-profile", str(prof), "--json", "--no-baselines"])
    r = json.loads(res.stdout)
    assert r["acceptance_assumed"] is False and {d["alpha"] for d in r["devices"]} <= {0.9, 0.85, 0.8, 0.83}
    comp = tmp_path / "compute.json"
    comp.write_text(
        json.dumps(
            {"t_ver0_s": 0.02, "t_ver1_s": 0.003, "t_ver_tok_s": 0.0005, "draft_latency_s_per_token": {"d": 0.005}}
        )
    )
    res = _run(["optimize", "--scenario", str(cfg), "--compute-profile", str(comp), "--json", "--no-baselines"])
    r = json.loads(res.stdout)
    assert (r["t_ver0_s"], r["t_ver1_s"], r["t_ver_tok_s"]) == (0.02, 0.003, 0.0005)
    assert all(0.005 <= d["draft_latency_s"] <= 0.005 * 1.15 for d in r["devices"])


def test_optimized_split_from_the_command_line():
    res = _run(["optimize", "--devices", "4", "--n-saa", "100", "--split", "optimized", "--json", "--no-baselines"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["bandwidth_split"] == "optimized"


@pytest.mark.parametrize(
    "args, start",
    [
        (
            ["--scenario", "gpt-4"],
            "error: --scenario: unknown preset 'gpt-4' (allowed: paper-qwen, paper-r1, "
            "paper-qwen-cell-edge, smollm2-cpu, measured-smollm2-a100, measured-smollm2-host, "
            "or a .yaml/.yml/.toml/.json file)",
        ),
        (["--scenario", "paper-qwn"], "error: --scenario: unknown preset 'paper-qwn' (did you mean paper-qwen?)"),
        (["--devices", "0"], "error: --devices: Input should be greater than or equal to 1 (got '0')"),
        (["--pdl-dbm", "99"], "error: --pdl-dbm [radio.p_dl_dbm]: must be in [-60, 70] dBm (got 99.0)"),
        (["--split", "half"], "error: --split: 'half' is not one of 'equal', 'optimized'"),
        (["--draft-policy", "magic"], "error: --draft-policy: 'magic' is not one of 'greedy', 'greedy_paper'"),
        # --policy plays your own policy; a draft-length search under it (its old name) is pointed on
        (
            ["--policy", "certified"],
            "error: policy: 'certified': a user policy is module:attr (e.g. mypolicies:Threshold); 'certified' is a draft-length search: --draft-policy certified",
        ),
    ],
)
def test_user_mistakes_are_one_line_and_exit_2(monkeypatch, capsys, args, start):
    monkeypatch.setattr(sys, "argv", ["multispin", "optimize", *args])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(start), err
