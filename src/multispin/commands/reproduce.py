"""`multispin reproduce`: the paper's figures with 95% confidence bands, an identification study of the unpublished settings and a
checked-claims report (report.md), from one command."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Literal

import typer

from multispin.commands._app import app
from multispin.commands._checks import FORCE_HELP, check_reproduce_out
from multispin.commands._interrupt import reported_interrupt
from multispin.commands._options import (
    LogLevel,
    choice_option,
    log_level_option,
    noise_figure_option,
    pick_scenario,
    setup_logging,
)
from multispin.experiments.reproduce.config import reproducible_presets

# A full run's drops took 29 CPU-minutes on this project's 2-core host, figure 9 about 2 more
# (README, "Reproducing");
# the wall time is about that over the worker count on idle cores, more on a busy host.
FULL_RUN_CPU_MINUTES = 31


def full_run_line(workers: int, out: Path, figures: list[str] | None) -> str:
    """What a run without --quick will take and where it writes, said before it starts."""
    what = f"figure(s) {', '.join(figures)}: part of" if figures else "the full reproduction:"
    return (
        f"{what} about {FULL_RUN_CPU_MINUTES} CPU-minutes of drops, ≈ {FULL_RUN_CPU_MINUTES / workers:.0f} min "
        f"on {workers} idle core(s), longer on a busy host (--quick: a few minutes); output in {out}/ "
        f"(report.md); Ctrl-C stops it and the same command resumes"
    )


@app.command()
def reproduce(
    quick: bool = typer.Option(False, "--quick", help="fewer drops and points, N_SAA 200 (a few minutes; CI)"),
    out: Path = typer.Option(
        Path("reproduce-out"), "--out", metavar="DIR", help="output directory (CSVs, PNGs, report.md, cache/)"
    ),
    workers: int | None = typer.Option(
        None, "--workers", min=1, metavar="INT", show_default="all cores", help="worker processes (at least 1)"
    ),
    executor: Literal["local", "ray"] = typer.Option(
        "local",
        "--executor",
        help="where the chunks of drops run: local (process pool) or ray (needs the "
        "cluster extra: pip install 'multispin[cluster]'); same seed, same CSVs",
    ),
    address: str | None = typer.Option(
        None,
        "--address",
        metavar="ADDR",
        show_default="a local Ray instance",
        help="Ray cluster to join with --executor ray (e.g. ray://head:10001)",
    ),
    scenario: str | None = choice_option(
        None,
        reproducible_presets(),
        "--scenario",
        show_default="all",
        help="scenario(s) of the per-pair figures: paper-qwen, paper-r1, all (both), or a preset on measured "
        "acceptance (docs/acceptance.md)",
    ),
    seed: int = typer.Option(0, "--seed", min=0, metavar="INT", help="base seed of every drop"),
    drops: int | None = typer.Option(
        None,
        "--drops",
        min=1,
        metavar="INT",
        show_default="100; 4 with --quick; identification 6 (2 with --quick); capacity 20 (4 with --quick)",
        help="drops per point",
    ),
    n_saa: int | None = typer.Option(
        None,
        "--n-saa",
        min=1,
        metavar="INT",
        show_default="the scenario's (1000), --quick too",
        help="SAA samples per drop",
    ),
    noise_figure_db: float | None = noise_figure_option(default_shown="the presets' 7 dB"),
    figure: list[str] | None = typer.Option(
        None, "--figure", metavar="NAME", show_default="all", help="only these figures (repeat), e.g. fig2"
    ),
    no_cache: bool = typer.Option(False, "--no-cache", help="recompute every point, ignore OUT/cache"),
    no_progress: bool = typer.Option(False, "--no-progress", help="no progress bar on stderr"),
    compare_with: Path | None = typer.Option(
        None,
        "--compare-with",
        metavar="DIR",
        help="another run's OUT: the report sets its claim verdicts beside this run's (e.g. measured vs assumed acceptance)",
    ),
    report_only: bool = typer.Option(
        False, "--report-only", help="redraw the PNGs and rewrite claims and report.md from OUT's CSVs"
    ),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP + " (the same settings resume without it)"),
    log_level: LogLevel = log_level_option(),
) -> None:
    """Reproduce the paper: per figure a CSV and a PNG, and report.md with the checked claims."""
    setup_logging(log_level)
    from multispin.experiments.reproduce.config import RunConfig, default_workers
    from multispin.experiments.reproduce.pipeline import figure_modules, rebuild_report
    from multispin.experiments.reproduce.pipeline import reproduce as run

    cfg = RunConfig(
        out=out,
        quick=quick,
        preset=pick_scenario(scenario, default="all"),
        seed=seed,
        workers=workers or default_workers(),
        drops=drops,
        n_saa=n_saa,
        noise_figure_db=noise_figure_db,
        figures=tuple(figure) if figure else None,
        use_cache=not no_cache,
        progress=not no_progress,
        executor=executor,
        address=address,
        compare_with=compare_with,
    )
    command = "multispin " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    figure_modules(cfg.figures)  # an unknown figure is the one line, before any banner
    if not report_only:
        check_reproduce_out(out, force, cfg.to_dict())
    if not quick and not report_only:
        out.mkdir(parents=True, exist_ok=True)  # an unwritable --out is the one line, not this one
        typer.echo(full_run_line(cfg.workers, out, figure), err=True)
    with reported_interrupt():
        res = rebuild_report(cfg) if report_only else run(cfg, command)
    counts = {st: sum(c.status == st for c in res.claims) for st in ("PASS", "FAIL", "INCONCLUSIVE", "N/A")}
    typer.echo(
        f"{res.report}: {counts['PASS']} claims PASS, {counts['FAIL']} FAIL, "
        f"{counts['INCONCLUSIVE']} INCONCLUSIVE, {counts['N/A']} N/A ({res.wall_s:.0f} s)"
    )
    for c in res.claims:
        typer.echo(f"  {c.status:12}  {c.id:9} {c.claim}")
