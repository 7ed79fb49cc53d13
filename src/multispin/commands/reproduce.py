"""`multispin reproduce`: the paper's figures with 95% confidence bands, a calibration study and a
checked-claims report (report.md), from one command."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Optional

import typer

from multispin.cli import app


@app.command()
def reproduce(
    quick: bool = typer.Option(False, "--quick", help="fewer drops and points, N_SAA 200 (a few minutes; CI)"),
    out: Path = typer.Option(Path("reproduce-out"), "--out", help="output directory (CSVs, PNGs, report.md, cache/)"),
    workers: Optional[int] = typer.Option(None, "--workers", help="worker processes (default: all cores)"),
    preset: str = typer.Option("all", "--preset", help="model pair: paper-qwen, paper-r1 or all"),
    seed: int = typer.Option(0, "--seed", help="base seed of every drop"),
    drops: Optional[int] = typer.Option(None, "--drops",
                                        help="drops per point (default 100; 4 with --quick; calibration 30)"),
    n_saa: Optional[int] = typer.Option(None, "--n-saa", help="SAA samples per drop (default: the scenario's, "
                                                               "200 with --quick)"),
    noise_figure_db: Optional[float] = typer.Option(None, "--noise-figure-db",
                                                    help="noise figure (dB); default: the calibrated 22 dB"),
    figure: Optional[list[str]] = typer.Option(None, "--figure", help="only these figures (repeat), e.g. fig2"),
    no_cache: bool = typer.Option(False, "--no-cache", help="recompute every point, ignore OUT/cache"),
    no_progress: bool = typer.Option(False, "--no-progress", help="no progress bar on stderr"),
    report_only: bool = typer.Option(False, "--report-only",
                                     help="redraw the PNGs and rewrite claims and report.md from OUT's CSVs"),
) -> None:
    """Reproduce the paper: per figure a CSV and a PNG, and report.md with the checked claims."""
    from multispin.experiments.reproduce.config import RunConfig, default_workers
    from multispin.experiments.reproduce.pipeline import rebuild_report
    from multispin.experiments.reproduce.pipeline import reproduce as run

    cfg = RunConfig(out=out, quick=quick, preset=preset, seed=seed, workers=workers or default_workers(),
                    drops=drops, n_saa=n_saa, noise_figure_db=noise_figure_db,
                    figures=tuple(figure) if figure else None, use_cache=not no_cache, progress=not no_progress)
    command = "multispin " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    res = rebuild_report(cfg) if report_only else run(cfg, command)
    n_pass = sum(c.status == "PASS" for c in res.claims)
    n_fail = sum(c.status == "FAIL" for c in res.claims)
    typer.echo(f"{res.report}: {n_pass} claims PASS, {n_fail} FAIL ({res.wall_s:.0f} s)")
    for c in res.claims:
        typer.echo(f"  {c.status:4}  {c.id:8} {c.claim}")
