"""Runner of `multispin reproduce`: seeds, statistics, determinism across worker counts, the cache."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from multispin.experiments.reproduce import fig_resources, runner
from multispin.experiments.reproduce.config import RunConfig, drop_seed
from multispin.experiments.reproduce.pipeline import export_figures
from multispin.experiments.reproduce.stats import mean_ci, summarise


def _cfg(out: Path, **kw) -> RunConfig:
    base = dict(out=out, quick=True, preset="paper-qwen", seed=3, workers=1, drops=2, n_saa=40, progress=False,
                figures=(fig_resources.NAME,))
    base.update(kw)
    return RunConfig(**base)


def _csvs(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*.csv"))}


def test_drop_seeds_are_stable_and_distinct():
    a = drop_seed(0, "pdl", '{"pdl_ratio":4}', 0)
    assert a == drop_seed(0, "pdl", '{"pdl_ratio":4}', 0)
    others = {drop_seed(0, "pdl", '{"pdl_ratio":4}', 1), drop_seed(1, "pdl", '{"pdl_ratio":4}', 0),
              drop_seed(0, "users", '{"pdl_ratio":4}', 0), drop_seed(0, "pdl", '{"pdl_ratio":16}', 0)}
    assert a not in others and len(others) == 4
    assert 0 <= a < 2**63


def test_mean_ci_and_summary():
    m, lo, hi, n = mean_ci([1.0, 2.0, 3.0, float("nan")])
    assert (m, n) == (2.0, 3)
    assert lo == pytest.approx(2.0 - 4.302652729911275 / math.sqrt(3)) and hi == pytest.approx(2 * m - lo)
    row = summarise({"preset": "x"}, [{"drop": 0, "goodput": 1.0, "dl_fraction": float("nan")},
                                      {"drop": 1, "goodput": 3.0, "dl_fraction": 0.5}])
    assert row["n_drops"] == 2 and row["goodput"] == 2.0 and row["dl_fraction_n"] == 1
    assert "drop" not in row


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


def test_one_figure_script_exports_and_plots(tmp_path):
    from multispin.experiments.reproduce._figure import figure_main

    out = tmp_path / "fig4"
    args = ["--out", str(out), "--quick", "--preset", "paper-qwen", "--workers", "1", "--drops", "2", "--n-saa", "40",
            "--no-progress"]
    assert figure_main(fig_resources, args + ["--export"]) == 0
    assert (out / f"{fig_resources.NAME}.csv").exists() and not (out / f"{fig_resources.NAME}.png").exists()
    assert figure_main(fig_resources, args + ["--plot"]) == 0
    assert (out / f"{fig_resources.NAME}.png").read_bytes()[:4] == b"\x89PNG"
