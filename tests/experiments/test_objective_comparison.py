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
    # without the flag nothing of it runs
    res = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "plain")])
    assert res.exit_code == 0 and " vs sum: " not in res.output
    assert not (tmp_path / "plain" / "objectives").exists()
