"""`demo --objectives` (experiments/objective_comparison.py): adaptive under each objective on the
same seeds, compared with the sum objective; the reported differences recomputed from rounds.jsonl."""

from __future__ import annotations

import json
import re

import pytest

from multispin.experiments.demo import DemoConfig
from multispin.experiments.objective_comparison import compare_objectives
from multispin.models.registry import resolve_pair


def _goodput(path) -> float:
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    tokens = sum(sum(r["tokens_gained"].values()) for r in rows)
    return tokens / sum(r["comp_latency_s"] + r["comm_latency_s"] for r in rows)


def test_each_objective_is_compared_with_the_sum_on_the_same_seeds(tmp_path):
    cfg = DemoConfig.make(
        pair="tiny", devices=3, rounds=6, max_new_tokens=6, out=tmp_path, seed=2, p_ul_dbm=0.0, p_dl_dbm=10.0
    )
    res = compare_objectives(cfg, resolve_pair("tiny"), objectives=("proportional-fair",))
    assert list(res.runs) == ["sum", "proportional-fair"]
    g = {o: _goodput(tmp_path / "objectives" / o / "seed-2" / "rounds.jsonl") for o in res.runs}
    d = res.goodput["proportional-fair"]
    assert (d.a, d.b) == ("proportional-fair", "sum")
    assert d.pct.estimate == pytest.approx(100 * (g["proportional-fair"] / g["sum"] - 1), rel=1e-9, abs=1e-9)
    svc = {o: r.service() for o, r in res.runs.items()}
    jain = next(x for x in res.service["proportional-fair"] if x.metric == "jain_index")
    want = 100 * (svc["proportional-fair"]["jain_index"] / svc["sum"]["jain_index"] - 1)
    assert jain.pct is not None and jain.pct.estimate == pytest.approx(want, rel=1e-9, abs=1e-9)
    saved = json.loads((tmp_path / "objectives" / "summary.json").read_text())
    assert saved["schema"] == "multispin.demo-objectives"
    assert [o["objective"] for o in saved["objectives"]] == ["sum", "proportional-fair"]
    assert saved["objectives"][0]["vs_sum"] is None and saved["objectives"][1]["vs_sum"]["b"] == "sum"


@pytest.mark.integration  # twelve testbed runs over real sockets (23 CPU-s): `make test`, not test-fast
def test_demo_objectives_on_the_cli_prints_every_objective_against_the_sum(tmp_path):
    from typer.testing import CliRunner

    from multispin.cli import app

    args = ["demo", "--pair", "tiny", "--devices", "2", "--rounds", "4", "--max-new-tokens", "6"]
    res = CliRunner().invoke(app, [*args, "--objectives", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    for o in ("proportional-fair", "max-min", "energy"):
        assert f"{o} vs sum: " in res.output and f"adaptive, {o} objective: " in res.output
    assert "p95 TPOT" in res.output and "indicative" in res.output
    assert "what each device gets, per objective" in res.output and re.search(r"┃\s+objective\s+┃", res.output)
    saved = json.loads((tmp_path / "objectives" / "summary.json").read_text())
    assert [o["objective"] for o in saved["objectives"]] == ["sum", "proportional-fair", "max-min", "energy"]
    # without the flag nothing of it runs: test_demo.py's CLI test checks that on its plain demo


def test_with_a_pdl_sweep_every_point_compares_the_objectives_at_its_own_power(tmp_path):
    from multispin.experiments.demo import SWEEP_OFFSETS_DB
    from multispin.experiments.objective_comparison import compare_objectives_at_points

    cfg = DemoConfig.make(
        pair="tiny", devices=2, rounds=3, max_new_tokens=4, out=tmp_path, seed=1, p_ul_dbm=0.0, sweep="pdl"
    )
    points = compare_objectives_at_points(cfg, resolve_pair("tiny"), objectives=("max-min",))
    assert [c.pdl_offset_db for c in points] == list(SWEEP_OFFSETS_DB)
    for c in points:
        assert c.p_dl_dbm == pytest.approx(0.0 + c.pdl_offset_db)
        assert list(c.runs) == ["sum", "max-min"] and c.goodput["max-min"].b == "sum"
        # each objective ran at the point's P^dl, in the point's folder
        for r in c.runs.values():
            assert r.results[0].config.p_dl_dbm == pytest.approx(c.p_dl_dbm)
        folder = tmp_path / "objectives" / f"pdl+{c.pdl_offset_db:g}dB"
        assert (folder / "max-min" / "seed-1" / "rounds.jsonl").exists()
        saved = json.loads((folder / "summary.json").read_text())
        assert saved["pdl_offset_db"] == c.pdl_offset_db and saved["p_dl_dbm"] == pytest.approx(c.p_dl_dbm)
    # negative control: the points differ in what the radio gives (a P^dl that was ignored would not)
    assert len({round(c.runs["sum"].log.goodput, 9) for c in points}) > 1
    # what `demo --objectives --sweep pdl` prints: one block per point, headed by its power
    from rich.console import Console

    from multispin.commands._service_tables import print_objectives

    con = Console(record=True, width=200)
    for c in points:
        print_objectives(con, c)
    text = con.export_text()
    for offset in SWEEP_OFFSETS_DB:
        assert f"objectives at P^dl = P^ul + {offset:g} dB" in text
    # the goodput verdict opens each block's comparison (the service verdicts under it are indented)
    assert sum(line.startswith("max-min vs sum: ") for line in text.splitlines()) == len(SWEEP_OFFSETS_DB)


def test_without_a_sweep_one_comparison_at_the_demo_power(tmp_path):
    from multispin.experiments.objective_comparison import compare_objectives_at_points

    cfg = DemoConfig.make(pair="tiny", devices=2, rounds=2, max_new_tokens=4, out=tmp_path, p_dl_dbm=12.0)
    (only,) = compare_objectives_at_points(cfg, resolve_pair("tiny"), objectives=("energy",))
    assert only.pdl_offset_db is None and only.p_dl_dbm == 12.0
    assert (tmp_path / "objectives" / "energy" / "seed-0" / "rounds.jsonl").exists()


@pytest.mark.slow
def test_demo_objectives_with_a_pdl_sweep_on_the_cli_reports_every_point(tmp_path):
    from typer.testing import CliRunner

    from multispin.cli import app

    args = ["demo", "--pair", "tiny", "--devices", "2", "--rounds", "2", "--max-new-tokens", "4", "--sweep", "pdl"]
    js = CliRunner().invoke(app, [*args, "--objectives", "--json", "--out", str(tmp_path)])
    assert js.exit_code == 0, js.output
    doc = json.loads(js.stdout.strip().splitlines()[-1])
    assert [c["pdl_offset_db"] for c in doc["objectives"]] == [0, 6, 12, 18]
    assert [c["p_dl_dbm"] for c in doc["objectives"]] == [p["p_dl_dbm"] for p in doc["points"]]
    assert all([o["objective"] for o in c["objectives"]][0] == "sum" for c in doc["objectives"])
