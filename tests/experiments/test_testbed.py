"""The testbed with the optimiser in the loop, on the tiny pair (no download)."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from multispin.cli import app
from multispin.errors import ConfigError
from multispin.experiments.testbed import TestbedConfig, run_testbed
from multispin.speculative.codecs import make_codec

# real sockets, processes or models: `make test-fast` leaves these out
pytestmark = pytest.mark.integration

ROW_KEYS = {
    "round",
    "gamma",
    "rejected",
    "modes",
    "power_w",
    "bandwidth_hz",
    "payload_bits",
    "uplink_bits",
    "downlink_bits",
    "tokens_gained",
    "comp_latency_s",
    "comm_latency_s",
}


@pytest.mark.parametrize("policy", ["adaptive", "all_dl"])
def test_virtual_clock_run_logs_every_round(tmp_path, policy):
    cfg = TestbedConfig.make(
        pair="tiny", devices=3, rounds=5, max_new_tokens=200, policy=policy, runner="thread", out=tmp_path
    )
    res = run_testbed(cfg)
    lines = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert len(lines) == 5 == res.summary.figures.rounds
    assert all(ROW_KEYS <= set(row) for row in lines)
    assert res.summary.integrity.records_match
    assert res.summary.goodput_tokens_per_s > 0
    moved = [m for row in lines for m in row["modes"].values()]
    if policy == "all_dl":
        assert set(moved) <= {"dl"}
    # every moved distribution is charged airtime, and only then
    for row in lines:
        assert (row["comm_latency_s"] > 0) == bool(row["modes"])
        for d in row["modes"]:
            assert row["power_w"][d] > 0 and row["bandwidth_hz"][d] > 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["policy"] == policy and set(summary["texts"]) == {"0", "1", "2"}
    # the acceptance-conditioned goodput, recomputed from the rows: every committing device has
    # its E[tokens | draft], never above γ + 1, and the ratio uses the realised goodput's clock
    for row in lines:
        assert set(row["expected_tokens"]) == set(row["tokens_gained"])
        assert all(0 < e <= row["gamma"][d] + 1 for d, e in row["expected_tokens"].items())
    time_s = sum(row["comp_latency_s"] + row["comm_latency_s"] for row in lines)
    expected = sum(sum(row["expected_tokens"].values()) for row in lines)
    assert summary["acceptance_conditioned_goodput_tokens_per_s"] == pytest.approx(expected / time_s, rel=1e-12)
    # and with T_comm replaced by E[T_comm | the round's drafts] too (0 only when nobody could be rejected)
    comp = sum(row["comp_latency_s"] for row in lines)
    cond_comm = [row["conditioned_comm_latency_s"] for row in lines]
    assert all(c >= 0 and (c > 0 or row["comm_latency_s"] == 0) for c, row in zip(cond_comm, lines))
    assert summary["outcome_conditioned_goodput_tokens_per_s"] == pytest.approx(expected / (comp + sum(cond_comm)))
    # the run folder says how to rebuild its model (its seed), and where its plans sat beside the forecast's
    assert summary["config"]["seed"] == 0 and summary["config"]["policy"] == policy
    assert math.isfinite(summary["estimate_minus_prior_mean"]) and summary["estimate_minus_prior_sd"] >= 0
    forecast_round_s = summary["forecast_t_comp_s"] + summary["forecast_t_comm_s"]
    assert summary["forecast_tokens_per_round"] / forecast_round_s == pytest.approx(summary["forecast_tokens_per_s"])


def test_wall_clock_includes_emulated_airtime(tmp_path):
    cfg = TestbedConfig.make(
        pair="tiny",
        devices=2,
        rounds=3,
        max_new_tokens=100,
        clock="wall",
        runner="thread",
        out=tmp_path,
        p_dl_dbm=-20.0,
    )
    res = run_testbed(cfg)
    rows = res.rounds
    airtime = sum(r.comm_latency_s for r in rows)
    compute = sum(r.round_wall_s for r in rows)
    assert res.summary.goodput_tokens_per_s == pytest.approx(res.summary.figures.tokens / (compute + airtime))


def test_bad_testbed_values_are_one_line_errors():
    with pytest.raises(ConfigError, match="policy"):
        TestbedConfig.make(policy="greedy")
    with pytest.raises(ConfigError, match="clock"):
        TestbedConfig.make(clock="sundial")


def test_devices_plan_with_the_measured_acceptance_of_their_draft_and_task():
    from multispin.acceptance.shipped import device_alpha
    from multispin.experiments.testbed import build_scenario, payload_choice, with_measured_acceptance
    from multispin.system.channel import World

    config = TestbedConfig.make(devices=3)
    base = build_scenario(config)
    sampling = payload_choice(config, 49_152).sampling  # the default policy: T = 1, top-k 1024
    drafts, tasks = ["q4g64", "q3g32", "q5g64"], ["chat", "code", "code"]
    scenario, all_measured = with_measured_acceptance(base, "smollm2-135m", drafts, tasks, sampling)
    assert all_measured
    # the α a run's verdicts see (acceptance.shrinkage.shrunk_alpha), not the teacher-forced one
    expected = [device_alpha("smollm2-135m", d, t, sampling, kind="planned") for d, t in zip(drafts, tasks)]
    assert World(scenario).drop.alpha.tolist() == pytest.approx(expected)
    assert expected != [device_alpha("smollm2-135m", d, t, sampling) for d, t in zip(drafts, tasks)]
    # chat devices get ShareGPT's α, code devices HumanEval's: the prompt sets they are given
    assert expected[0] == device_alpha("smollm2-135m", "q4g64", "sharegpt", sampling, kind="planned")
    assert expected[1] == device_alpha("smollm2-135m", "q3g32", "humaneval", sampling, kind="planned")
    # a policy nobody measured (T = 0.5) keeps the scenario's own rates, as does a pair without profiles
    other = sampling.model_copy(update={"temperature": 0.5})
    for pair, policy in (("smollm2-135m", other), ("tiny", sampling)):
        same, measured = with_measured_acceptance(base, pair, drafts, tasks, policy)
        assert same is base and not measured


# ---- the clock charges the airtime of what the system sent ----

AIRTIME_RUN = dict(
    pair="tiny",
    devices=4,
    rounds=6,
    max_new_tokens=200,
    policy="random",
    runner="thread",
    ul_codec="dense-fp16",
    dl_codec="sparse:v_eff=64,q=32",
    top_k=64,
    p_dl_dbm=20.0,
)


def _airtime_errors(rows: list[dict], noise_psd_w_per_hz: float) -> list[float]:
    """Per round: |charged T_comm − max airtime of the logged correction bits| / T_comm, the airtime
    recomputed here from the Shannon rate B·log2(1 + P·h/(N0·B)) of each moved device's logged
    power, bandwidth and gain (the bits as the server's record logs them)."""
    errors = []
    for row in rows:
        airtime = [
            row["correction_bits"][d]
            / (b * math.log2(1 + row["power_w"][d] * row["gain"][d] / (noise_psd_w_per_hz * b)))
            for d, b in row["bandwidth_hz"].items()
        ]
        expected = max(airtime, default=0.0)
        errors.append(abs(row["comm_latency_s"] - expected) / max(expected, 1e-300))
    return errors


def _codec_bits_check(rows: list[dict]) -> None:
    """The logged correction bits are the codec's own size plus one token id (V = 256: 8 bits)."""
    ul, dl = make_codec(AIRTIME_RUN["ul_codec"]).bits(256), make_codec(AIRTIME_RUN["dl_codec"]).bits(256)
    assert ul != dl  # S^ul ≠ S^dl in this run
    for row in rows:
        for d, mode in row["modes"].items():
            assert row["correction_bits"][d] == (ul if mode == "ul" else dl) + 8


def test_charged_comm_latency_is_the_airtime_of_the_logged_bits(tmp_path):
    res = run_testbed(TestbedConfig.make(**AIRTIME_RUN, out=tmp_path))
    rows = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    moved = [m for row in rows for m in row["modes"].values()]
    assert {"ul", "dl"} <= set(moved)  # mixed modes, so both codecs' bits are charged
    _codec_bits_check(rows)
    assert max(_airtime_errors(rows, res.summary.noise_psd_w_per_hz)) < 1e-9
    assert res.summary.payload.detail["ul_distribution_bits"] == 4096
    assert res.summary.bits.charged > 0


def test_airtime_check_catches_charging_the_scenario_payload(tmp_path, monkeypatch):
    """Negative control: a clock that charges the scenario's payload model (the paper's 34,816
    bits) instead of the bits the codecs moved fails the same check."""
    from multispin.runtime.round.clock import ScenarioClock

    monkeypatch.setattr(ScenarioClock, "_charged_bits", lambda self, record: self.scenario.payload.payload_bits)
    res = run_testbed(TestbedConfig.make(**AIRTIME_RUN, out=tmp_path))
    rows = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    _codec_bits_check(rows)  # the wire is unchanged; only the clock is wrong
    assert max(_airtime_errors(rows, res.summary.noise_psd_w_per_hz)) > 0.5


def test_an_approximate_codec_is_announced_first_and_in_the_summary(tmp_path):
    res = CliRunner().invoke(
        app,
        [
            "testbed",
            "--pair",
            "tiny",
            "--devices",
            "2",
            "--rounds",
            "2",
            "--runner",
            "thread",
            "--top-k",
            "0",
            "--dl-codec",
            "sparse:v_eff=16,q=16",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    first = res.output.strip().splitlines()[0]
    assert first.startswith("APPROXIMATE") and "sparse-v16-q16" in first
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["exact"] is False and summary["payload_headline"].startswith("APPROXIMATE")
    assert summary["payload"]["exactness"]["ul"]["exact"] and not summary["payload"]["exactness"]["dl"]["exact"]


def test_the_default_is_exact_and_says_so(tmp_path):
    cfg = TestbedConfig.make(pair="tiny", devices=2, rounds=2, runner="thread", out=tmp_path)
    res = run_testbed(cfg)
    pay = res.summary.payload.detail
    assert res.summary.payload.exact and pay["default"]
    assert "exact in UL and DL mode" in res.summary.payload.headline
    assert pay["sampling"]["top_k"] == 256 and pay["ul_codec"] == pay["dl_codec"] == "sparse-v256-q32"  # V = 256
    # an all-UL run needs only the UL codec to be exact
    ul_only = TestbedConfig.make(pair="tiny", policy="all_ul", top_k=0, dl_codec="sparse:v_eff=4,q=16")
    from multispin.experiments.testbed import payload_choice

    assert (
        payload_choice(ul_only, 256).exact
        and not payload_choice(ul_only.model_copy(update={"policy": "adaptive"}), 256).exact
    )


def test_no_forecast_leaves_the_model_out_and_the_run_as_it_was(tmp_path):
    """`--no-forecast`: the same rounds and texts, no forecast and no predictions in the summary,
    "—" in their columns; with the flag left alone (the control) the model is there."""
    args = ["testbed", "--pair", "tiny", "--devices", "2", "--rounds", "3", "--runner", "thread"]
    runs = {}
    for name, flag in (("with", []), ("without", ["--no-forecast"])):
        res = CliRunner().invoke(app, [*args, *flag, "--out", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
        runs[name] = (res.output, json.loads((tmp_path / name / "summary.json").read_text()))
    (with_out, with_doc), (without_out, without_doc) = runs["with"], runs["without"]
    assert with_doc["texts"] == without_doc["texts"] and with_doc["goodput_tokens_per_s"] > 0
    assert without_doc["goodput_tokens_per_s"] == with_doc["goodput_tokens_per_s"]
    assert with_doc["forecast_tokens_per_s"] > 0 and without_doc["forecast_tokens_per_s"] is None
    assert _model_cells(without_out) == ["—", "—", "—"]
    assert "—" not in _model_cells(with_out)


def _model_cells(output: str) -> list[str]:
    """The forecast, model and MC cells of the goodput table's row."""
    row = next(line for line in output.splitlines() if line.startswith("│ adaptive"))
    return [c.strip() for c in row.split("│")][3:6]
