"""Runner of `multispin reproduce`: seeds, statistics, determinism across worker counts, the cache."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from multispin.experiments.intervals import mean_ci
from multispin.experiments.reproduce import fig_resources, runner
from multispin.experiments.reproduce.config import RunConfig, drop_seed
from multispin.experiments.reproduce.pipeline import export_figures
from multispin.experiments.reproduce.stats import summarise_drops


def _cfg(out: Path, **kw) -> RunConfig:
    base = dict(
        out=out,
        quick=True,
        preset="paper-qwen",
        seed=3,
        workers=1,
        drops=2,
        n_saa=40,
        progress=False,
        figures=(fig_resources.NAME,),
    )
    base.update(kw)
    return RunConfig(**base)


def _csvs(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*.csv"))}


def test_drop_seeds_are_stable_and_distinct():
    a = drop_seed(0, "pdl", '{"pdl_ratio":4}', 0)
    assert a == drop_seed(0, "pdl", '{"pdl_ratio":4}', 0)
    others = {
        drop_seed(0, "pdl", '{"pdl_ratio":4}', 1),
        drop_seed(1, "pdl", '{"pdl_ratio":4}', 0),
        drop_seed(0, "users", '{"pdl_ratio":4}', 0),
        drop_seed(0, "pdl", '{"pdl_ratio":16}', 0),
    }
    assert a not in others and len(others) == 4
    assert 0 <= a < 2**63


def test_mean_ci_and_summary():
    m, lo, hi, n = mean_ci([1.0, 2.0, 3.0, float("nan")])
    assert (m, n) == (2.0, 3)
    assert lo == pytest.approx(2.0 - 4.302652729911275 / math.sqrt(3)) and hi == pytest.approx(2 * m - lo)
    row = summarise_drops(
        {"preset": "x"},
        [{"drop": 0, "goodput": 1.0, "dl_fraction": float("nan")}, {"drop": 1, "goodput": 3.0, "dl_fraction": 0.5}],
    )
    assert row["n_drops"] == 2 and row["goodput"] == 2.0 and row["dl_fraction_n"] == 1
    assert "drop" not in row


def test_non_negative_metrics_get_intervals_that_stay_non_negative():
    from multispin.experiments.intervals import bootstrap_mean_ci

    # γ̄ over 4 drops where one device set drafts: the t interval reaches below 0, the bootstrap does not
    gammas = [0.0, 0.0, 0.0, 4.4]
    assert mean_ci(gammas)[1] < 0
    m, lo, hi, n = bootstrap_mean_ci(gammas)
    assert (m, n) == (1.1, 4) and 0.0 <= lo <= m <= hi <= 4.4
    assert bootstrap_mean_ci(gammas) == (m, lo, hi, n)  # seeded: the same bytes every run
    assert bootstrap_mean_ci([2.0, 2.0, 2.0]) == (2.0, 2.0, 2.0, 3)
    # at many drops it agrees with the t interval
    v = np.random.default_rng(1).exponential(3.0, 200)
    _, tlo, thi, _ = mean_ci(v)
    _, blo, bhi, _ = bootstrap_mean_ci(v)
    assert blo == pytest.approx(tlo, abs=0.15) and bhi == pytest.approx(thi, abs=0.15)
    row = summarise_drops(
        {},
        [
            {"drop": i, "gamma_mean": g, "frac_no_draft": f, "gain_vs_all_ul_pct": p}
            for i, (g, f, p) in enumerate(zip(gammas, [1.0, 1.0, 1.0, 0.2], [-5.0, 1.0, 2.0, 30.0]))
        ],
    )
    assert row["gamma_mean_lo"] >= 0 and 0 <= row["frac_no_draft_lo"] <= row["frac_no_draft_hi"] <= 1
    assert row["gain_vs_all_ul_pct_lo"] == mean_ci([-5.0, 1.0, 2.0, 30.0])[1]  # signed: Student t


def test_same_seed_same_csvs_whatever_the_worker_count(tmp_path):
    export_figures(_cfg(tmp_path / "w1", workers=1, use_cache=False), [fig_resources])
    export_figures(_cfg(tmp_path / "w2", workers=2, use_cache=False), [fig_resources])
    a, b = _csvs(tmp_path / "w1"), _csvs(tmp_path / "w2")
    assert set(a) == {"drops/resources.csv", f"{fig_resources.NAME}.csv", "settings.csv"}
    assert a == b
    export_figures(_cfg(tmp_path / "s4", seed=4, use_cache=False), [fig_resources])
    assert _csvs(tmp_path / "s4")[f"{fig_resources.NAME}.csv"] != a[f"{fig_resources.NAME}.csv"]


def test_cache_resumes_and_a_changed_config_recomputes(tmp_path, monkeypatch):
    out = tmp_path / "run"
    export_figures(_cfg(out), [fig_resources])
    first = _csvs(out)
    files = sorted((out / "cache" / "resources").glob("*.json"))
    assert files

    calls = []
    real = runner.run_chunk

    def counting(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(runner, "run_chunk", counting)
    export_figures(_cfg(out), [fig_resources])
    assert calls == [] and _csvs(out) == first  # everything from the cache

    files[0].unlink()  # an interrupted run: one chunk missing
    export_figures(_cfg(out), [fig_resources])
    assert calls == [1] and _csvs(out) == first

    calls.clear()
    export_figures(_cfg(out, n_saa=41), [fig_resources])  # another configuration: every chunk recomputed
    assert len(calls) == len(files)


def test_one_figure_runs_through_the_command_and_redraws_from_its_csv(tmp_path):
    """One way to run one figure: `multispin reproduce --figure NAME` (CSV and PNG), and
    `--report-only` redraws the PNG from the CSV without recomputing."""
    from typer.testing import CliRunner

    from multispin.cli import app

    out = tmp_path / "fig4"
    args = [
        "reproduce",
        "--figure",
        fig_resources.NAME,
        "--out",
        str(out),
        "--quick",
        "--scenario",
        "paper-qwen",
        "--workers",
        "1",
        "--drops",
        "2",
        "--n-saa",
        "40",
        "--no-progress",
    ]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    csv, png = out / f"{fig_resources.NAME}.csv", out / f"{fig_resources.NAME}.png"
    assert csv.exists() and png.read_bytes()[:4] == b"\x89PNG"
    png.unlink()
    csv_bytes = csv.read_bytes()
    r = CliRunner().invoke(app, args + ["--report-only"])
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:4] == b"\x89PNG" and csv.read_bytes() == csv_bytes
