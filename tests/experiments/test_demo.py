"""The main job on the tiny pair (no download): steady state, target-only through the same loop,
goodput recomputed from the logs, paired verdicts, the CLI with --json and --sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from multispin.cli import app
from multispin.experiments import testbed as testbed_module
from multispin.experiments.demo import DemoConfig, run_demo
from multispin.experiments.testbed import TestbedConfig, build_scenario, run_testbed
from multispin.models.prompts import device_prompt_queues, encode_prompt
from multispin.models.registry import resolve_pair
from multispin.runtime.net.launcher import DeviceSetup, LocalTestbed
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.round.engine import PolicyPair
from multispin.runtime.round.local import FixedLink, UniformDraftLength
from multispin.vocabulary import DEMO_POLICIES

# real sockets, processes or models: `make test-fast` leaves these out
pytestmark = pytest.mark.integration


def test_steady_state_every_round_runs_every_device_and_next_prompts_start_from_their_own_context():
    pair = resolve_pair("tiny")
    k, rounds = 3, 14
    queues = device_prompt_queues(["chat", "code", "chat"], rounds, seed=2, source="builtin")
    bed = LocalTestbed(
        pair,
        ServerConfig.make(max_new_tokens=3, rounds=rounds, seed=2),
        DeviceSetup(k, prompt_queues=queues, runner="thread"),
        policy=PolicyPair(UniformDraftLength(2), FixedLink("dl")),
    )
    bed.start()
    summary = bed.wait(120)
    events = summary.server.events
    assert len(events) == rounds
    for ev in events:  # no device ever out of work: every round verifies one job of every device
        assert sorted(d % k for d in ev.gammas) == list(range(k))
    records = summary.server.devices
    later = [d for d in records if d >= k]
    assert len(later) >= k, "every device went on to a second prompt"
    for d, rec in records.items():
        prompt = encode_prompt(pair, queues[d % k][d // k])
        assert rec.tokens[: rec.num_prompt] == prompt  # its own prompt, not its predecessor's text
        assert summary.devices[d]["tokens"] == rec.tokens  # the device's text is the server's record
    assert summary.consistent
    for d in records:  # a job's successor starts only after it finished
        if d + k in records:
            assert records[d].finished


def _rows(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_target_only_runs_through_the_loop_at_gamma_zero_and_matches_the_formula(tmp_path):
    cfg = TestbedConfig.make(
        pair="tiny", devices=4, rounds=6, max_new_tokens=5, policy="target_only", runner="thread", out=tmp_path
    )
    res = run_testbed(cfg)
    rows = _rows(tmp_path / "rounds.jsonl")
    assert len(rows) == 6 and all(g == 0 for r in rows for g in r["gamma"].values())
    assert all(r["comm_latency_s"] == 0 and not r["modes"] for r in rows)
    c = build_scenario(cfg).compute  # paper-qwen: T_ver^tok = 0, so T_comp(0) = T_ver^0 + K·T_ver^1
    assert c.t_ver_tok_s == 0
    assert res.summary.goodput_tokens_per_s == pytest.approx(4 / (c.t_ver0_s + 4 * c.t_ver1_s), rel=1e-9, abs=0)
    assert res.summary.figures.steady_state and res.summary.integrity.consistent


SET_UP_STEPS = ("build_scenario", "payload_choice", "prior_alpha")
SET_UP_CALLS: dict[str, int] = {}  # what tiny_demo's run called of SET_UP_STEPS


@pytest.fixture(scope="module")
def tiny_demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    config = DemoConfig.make(pair="tiny", devices=3, rounds=8, max_new_tokens=6, out=out, seed=3)
    with pytest.MonkeyPatch.context() as mp:
        calls = _count_calls(mp, testbed_module, SET_UP_STEPS)
        result = run_demo(config, resolve_pair("tiny"))
    SET_UP_CALLS.update(calls)
    return result, out


def _count_calls(mp, module, names) -> dict[str, int]:
    """Count the calls of ``module``'s functions ``names`` (the counts fill in as they run)."""
    calls = dict.fromkeys(names, 0)

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    for name in names:
        mp.setattr(module, name, counted(name, getattr(module, name)))
    return calls


def test_each_run_is_set_up_once(tiny_demo):
    """Each testbed run builds its scenario, payload and measured α once, and the demo its own
    set-up once (before: the payload twice per run, the scenario twice more per policy for the
    service figures, and the demo's set-up twice)."""
    runs = len(DEMO_POLICIES)  # one seed, no sweep
    assert SET_UP_CALLS == dict.fromkeys(SET_UP_STEPS, runs + 1)


def test_reported_goodput_of_each_policy_is_recomputed_from_rounds_jsonl(tiny_demo):
    result, out = tiny_demo
    point = result.points[0]
    recomputed = {}
    for policy in DEMO_POLICIES:
        rows = _rows(out / "seed-3" / policy / "rounds.jsonl")
        assert len(rows) == 8
        tokens = sum(sum(r["tokens_gained"].values()) for r in rows)
        latency = sum(r["comp_latency_s"] + r["comm_latency_s"] for r in rows)
        recomputed[policy] = tokens / latency
    for row in point.rows:
        assert row.goodput.estimate == pytest.approx(recomputed[row.policy], rel=1e-9, abs=0)
        assert row.figures.steady_state and row.records_match
        if row.policy != "target_only":
            want = 100 * (recomputed[row.policy] / recomputed["target_only"] - 1)
            assert row.vs_target_only is not None
            assert row.vs_target_only.pct.estimate == pytest.approx(want, rel=1e-9, abs=1e-12)
    first = point.comparisons[0]  # the lead against the best baseline first
    assert first.b == point.best_baseline
    assert first.significant == (not first.pct.low <= 0 <= first.pct.high)
    # the service differences' estimates are the summary's service metrics, paired on the same rounds
    svc = {r.policy: r.service for r in point.rows}
    a, b = svc[point.lead], svc[point.best_baseline]
    by = {c.metric: c.pct.estimate for c in point.service_comparisons}
    for metric, key in (("worst_device_goodput", "worst_device_goodput_tokens_per_s"), ("jain_index", "jain_index")):
        assert by[metric] == pytest.approx(100 * (a[key] / b[key] - 1), rel=1e-9, abs=1e-9)
    assert by["energy_per_token"] == pytest.approx(
        100 * (a["energy_per_token_j"] / b["energy_per_token_j"] - 1), rel=1e-9, abs=1e-9
    )
    summary = json.loads((out / "summary.json").read_text())
    assert (
        summary["schema"] == "multispin.demo-summary" and summary["points"][0]["policies"][0]["policy"] == "three_way"
    )


def test_the_demo_runs_every_device_on_the_pairs_default_draft(tiny_demo):
    result, _ = tiny_demo
    pair = resolve_pair("tiny")
    assert result.setup.drafts == [pair.default_draft] * 3
    assert sorted(set(result.setup.tasks)) == ["chat", "code"]


def _columns_and_caption(text: str) -> tuple[list[str], str]:
    """The demo table's column names and its caption (words only) from the printed output."""
    lines = text.splitlines()
    header = next(ln for ln in lines if ln.startswith("┃"))
    bottom = next(i for i, ln in enumerate(lines) if ln.startswith("└"))
    caption = []
    for ln in lines[bottom + 1 :]:
        if ln.startswith("three_way vs "):
            break
        caption.append(ln)
    return [c.strip() for c in header.strip("┃").split("┃")], " ".join(" ".join(caption).split())


def test_demo_cli_prints_setup_table_verdicts_and_writes_json_and_png(tmp_path):
    res = CliRunner().invoke(
        app,
        ["demo", "--pair", "tiny", "--devices", "2", "--rounds", "6", "--max-new-tokens", "8", "--out", str(tmp_path)],
    )
    assert res.exit_code == 0, res.output
    lines = res.stdout.strip().splitlines()
    assert lines[0].startswith("devices: ") and "α" in lines[0]
    assert any(x.startswith("payload: T=1, top-k 256; sparse-v256-q32 both links") for x in lines[:6])
    assert "three_way vs " in res.output and "95% interval" in res.output
    # docs/examples/demo.md quotes a real default run: its columns and caption are today's (the
    # widths, and so the caption's line breaks, follow the numbers)
    page = (Path(__file__).resolve().parents[2] / "docs" / "examples" / "demo.md").read_text()
    quoted = page.split("tests/experiments/test_demo.py -->\n```text\n", 1)[1].split("```", 1)[0]
    assert _columns_and_caption(quoted) == _columns_and_caption(res.stdout)
    assert (tmp_path / "demo.png").stat().st_size > 10_000
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert [r["policy"] for r in doc["points"][0]["policies"]] == list(DEMO_POLICIES)
    # without --objectives nothing of the objective comparison runs (test_objective_comparison.py
    # checks what the flag adds)
    assert " vs sum: " not in res.output and not (tmp_path / "objectives").exists()
    js = CliRunner().invoke(
        app,
        [
            "demo",
            "--pair",
            "tiny",
            "--devices",
            "2",
            "--rounds",
            "4",
            "--max-new-tokens",
            "8",
            "--out",
            str(tmp_path / "j"),
            "--json",
        ],
    )
    assert js.exit_code == 0, js.output
    doc = json.loads(js.stdout.strip().splitlines()[-1])
    assert doc["schema"] == "multispin.demo-summary" and doc["multispin_version"]


def test_demo_sweep_runs_every_power_and_plots(tmp_path):
    res = CliRunner().invoke(
        app,
        [
            "demo",
            "--pair",
            "tiny",
            "--devices",
            "2",
            "--rounds",
            "4",
            "--max-new-tokens",
            "6",
            "--sweep",
            "pdl",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "summary.json").read_text())
    offsets = [p["pdl_over_pul_db"] for p in doc["points"]]
    assert offsets == [0, 6, 12, 18]
    p_ul = doc["points"][0]["p_dl_dbm"]
    assert [p["p_dl_dbm"] - p_ul for p in doc["points"]] == offsets
    assert (tmp_path / "demo-sweep.png").stat().st_size > 10_000
    # target-only moves nothing over the air: one run stands for every power
    to = [next(r for r in p["policies"] if r["policy"] == "target_only") for p in doc["points"]]
    assert len({r["goodput_tokens_per_s"]["estimate"] for r in to}) == 1
