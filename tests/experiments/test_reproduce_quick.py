"""`multispin reproduce --quick` end to end: every CSV, PNG and the report, columns documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from multispin.cli import app
from multispin.experiments.reproduce.columns import doc_for, read_csv
from multispin.experiments.reproduce.pipeline import FIGURE_NAMES


@pytest.mark.slow
def test_quick_run_writes_every_csv_png_and_the_report(tmp_path):
    out = tmp_path / "quick"
    res = CliRunner().invoke(app, ["reproduce", "--quick", "--out", str(out), "--workers", "2", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "claims PASS" in res.output
    # the docs quote this run's claim lines (docs/examples/reproduce.md): they must be current
    page = (Path(__file__).resolve().parents[2] / "docs" / "examples" / "reproduce.md").read_text()
    quoted = page.split("test_reproduce_quick.py -->\n```text\n", 1)[1].split("```", 1)[0].splitlines()
    printed = {ln.rstrip() for ln in res.output.splitlines()}
    stale = [ln for ln in quoted[2:] if ln.rstrip() not in printed]  # past the command and its timed line
    assert len(quoted) > 10 and not stale, stale[:3]
    report = (out / "report.md").read_text()
    for name in FIGURE_NAMES:
        csv_path, png = out / f"{name}.csv", out / f"{name}.png"
        assert csv_path.stat().st_size > 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"![{name}]({name}.png)" in report
        rows = read_csv(csv_path)
        assert rows and all(r["n_drops"] >= 2 for r in rows)
        header = csv_path.read_text().splitlines()[0].split(",")
        for col in header:
            assert doc_for(col), f"{name}.csv: column {col} has no documentation"
            base = re.sub(r"_(lo|hi|n)$", "", col) if doc_for(col).startswith(("lower", "upper", "number")) else col
            assert f"`{base}`" in report, f"{name}.csv: column {col} is not documented in report.md"
    for study in ("pdl", "users", "resources", "extensions", "identification"):
        assert (out / "drops" / f"{study}.csv").exists()
    claims = read_csv(out / "claims.csv")
    assert {c["status"] for c in claims} <= {"PASS", "FAIL", "INCONCLUSIVE", "N/A"}
    assert next(c for c in claims if str(c["id"]) == "8")["status"] == "N/A"  # reduced grids by design
    assert "## Checked claims" in report and "## Identification" in report and "## Assumptions" in report
    assert "N_SAA** = 1000" in report  # one N_SAA everywhere, --quick included
    settings = read_csv(out / "fig7_identification_settings.csv")
    assert len(settings) >= 3 and all(s["claim_5"] in ("PASS", "FAIL", "INCONCLUSIVE") for s in settings)
    assert "![fig7_identification](fig7_identification.png)" in report
    for c in claims:
        assert f"**{c['status']}**" in report

    # --report-only rebuilds the figure tables from drops/*.csv, PNGs, claims and the report, with the
    # same bytes and verdicts
    tables = {name: (out / f"{name}.csv").read_bytes() for name in FIGURE_NAMES}
    (out / "report.md").unlink()
    res = CliRunner().invoke(app, ["reproduce", "--out", str(out), "--report-only", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert read_csv(out / "claims.csv") == claims and (out / "report.md").exists()
    assert {name: (out / f"{name}.csv").read_bytes() for name in FIGURE_NAMES} == tables
