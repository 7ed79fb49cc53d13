"""The whole reproduction: run the studies the chosen figures need, write CSVs, PNGs, claims, report.

Layout of OUT:

- ``<figure>.csv`` and ``<figure>.png`` per figure (the CSV is what the PNG plots: one row per
  point, mean and 95% CI over drops of every metric);
- ``drops/<study>.csv``: every drop's raw numbers;
- ``fig7_identification_settings.csv``: one row per identification setting with every claim's status;
- ``settings.csv``: the run's defaults (read by the defaults claim); ``claims.csv``: the checked claims;
- ``report.md``; ``run.json`` (command, wall time, workers); ``cache/``: per-chunk results.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from multispin._version import source_version
from multispin.datafile import read_json_object
from multispin.errors import ConfigError
from multispin.experiments.reproduce import (
    fig_bound,
    fig_capacity,
    fig_channel_knowledge,
    fig_draft_schemes,
    fig_extensions,
    fig_mode_split,
    fig_resources,
    fig_users,
    identification,
)
from multispin.experiments.reproduce.claims import check_dir
from multispin.experiments.reproduce.columns import DROP_DOCS, PARAM_DOCS, ordered_columns, read_csv, write_csv
from multispin.experiments.reproduce.config import RunConfig, code_version
from multispin.experiments.reproduce.report import write_report
from multispin.experiments.reproduce.runner import RunStats, cache_cpu_seconds, run_points
from multispin.experiments.reproduce.stats import summarise_drops, with_drop_gains
from multispin.experiments.reproduce.studies import (
    PDL_RATIOS_FULL,
    PDL_RATIOS_QUICK,
    POINTS,
    USERS_RATIOS,
    drops_for,
    identification_drops,
)
from multispin.jsonout import versioned
from multispin.system import get_preset

FIGURES: tuple[ModuleType, ...] = (
    fig_mode_split,
    fig_users,
    fig_draft_schemes,
    fig_resources,
    fig_extensions,
    fig_bound,
    identification,
    fig_channel_knowledge,
    fig_capacity,
)
FIGURE_NAMES = tuple(m.NAME for m in FIGURES)
STUDY_PARAMS = {
    "pdl": ("preset", "pdl_ratio"),
    "users": ("preset", "pdl_ratio", "devices", "n_saa"),
    "resources": ("preset", "sweep", "bandwidth_mhz", "radius_m"),
    "extensions": ("preset", "pdl_ratio"),
    "identification": identification.PARAMS,
    "csi": fig_channel_knowledge.PARAMS,
    "capacity": ("preset", "pdl_ratio"),
}


def figure_modules(names: tuple[str, ...] | None) -> list[ModuleType]:

    if not names:
        return list(FIGURES)
    bad = [n for n in names if n not in FIGURE_NAMES and not any(n == m.NAME.split("_")[0] for m in FIGURES)]
    if bad:
        raise ConfigError(f"figures: unknown figure(s) {', '.join(bad)} (allowed: {', '.join(FIGURE_NAMES)})")
    return [m for m in FIGURES if m.NAME in names or m.NAME.split("_")[0] in names]


def run_studies(cfg: RunConfig, studies: list[str]) -> dict[str, list[dict]]:
    """Summaries per study (one dict per point); also writes ``drops/<study>.csv``."""

    jobs = []
    points = {}
    for s in studies:
        pts = POINTS[s](cfg)
        points[s] = pts
        jobs += [(p, drops_for(p, cfg)) for p in pts]
    rows = run_points(jobs, cfg)
    summaries: dict[str, list[dict]] = {}
    out = Path(cfg.out)
    for s in studies:
        params = STUDY_PARAMS[s]
        summaries[s] = [summarise_drops(p.params, rows[(s, p.id)]) for p in points[s]]
        # each drop with the per-drop gains, which the summary computes (stats.with_drop_gains)
        raw = [{**p.params, **with_drop_gains(r)} for p in points[s] for r in rows[(s, p.id)]]
        cols = [c for c in params] + ["drop", "drop_seed"]
        cols += sorted({k for r in raw for k in r} - set(cols))
        write_csv(out / "drops" / f"{s}.csv", raw, cols)
    return summaries


def settings(cfg: RunConfig) -> dict[str, Any]:
    """The run's defaults, as the defaults claim checks them (settings.csv)."""

    sc = get_preset(cfg.main_preset)
    acc = sc.tasks.acceptance
    ratios = sorted(set(PDL_RATIOS_QUICK if cfg.quick else PDL_RATIOS_FULL) | set(USERS_RATIOS))
    return {
        "presets": " ".join(cfg.presets),
        "devices": sc.devices.count,
        "bandwidth_mhz": sc.radio.bandwidth_hz / 1e6,
        "p_ul_dbm": sc.radio.p_ul_dbm,
        "pdl_ratios": " ".join(str(r) for r in ratios),
        "acceptance_min": min(acc.values()),
        "acceptance_max": max(acc.values()),
        "tasks": len(acc),
        "acceptance_assumed": sc.tasks.assumed,
        "n_saa": cfg.n_saa_for(sc.optimizer.n_saa),
        "noise_figure_db": cfg.noise_figure,
        "drops_per_point": cfg.drops_per_point,
        "identification_drops_per_point": identification_drops(cfg),
        "gamma_max": sc.optimizer.gamma_max,
        "payload_bits": sc.payload.payload_bits,
        "count_signalling_bits": sc.payload.count_signalling_bits,
        "seed": cfg.seed,
        "quick": cfg.quick,
        "code_version": code_version(),  # what the cached drops depend on
        "source_version": source_version(),  # git describe of the checkout, or the package version
    }


def summaries_from_drops(out: Path, studies: list[str]) -> dict[str, list[dict]]:
    """The per-point summaries again from ``drops/<study>.csv`` (the drops' raw numbers), in the order
    the points were written: the same tables the run wrote, recomputed without computing a drop."""
    summaries: dict[str, list[dict]] = {}
    for s in studies:
        path = out / "drops" / f"{s}.csv"
        if not path.exists():
            continue
        params = STUDY_PARAMS[s]
        groups: dict[tuple, list[dict]] = {}
        for r in read_csv(path):
            # an empty cell is a metric the drop did not compute (e.g. no mode baselines at that ratio)
            groups.setdefault(tuple(r.get(k) for k in params), []).append(
                {k: v for k, v in r.items() if k not in params and v is not None}
            )
        summaries[s] = [summarise_drops(dict(zip(params, key)), rows) for key, rows in groups.items()]
    return summaries


def write_tables(out: Path, modules: list[ModuleType], summaries: dict[str, list[dict]]) -> None:
    """Each figure's CSV (and the identification settings table) from the study summaries."""
    for m in modules:
        if not all(s in summaries for s in m.STUDIES):
            continue
        rows = m.table(summaries)
        write_csv(out / f"{m.NAME}.csv", rows, ordered_columns(m.PARAMS, rows))
        if m is identification:
            st = identification.settings_table(rows)
            write_csv(out / identification.SETTINGS_CSV, st, list(identification.SETTINGS_DOCS))


def export_figures(cfg: RunConfig, modules: list[ModuleType]) -> dict[str, list[dict]]:
    """Compute the studies of ``modules`` and write their CSVs (and settings.csv)."""
    studies = list(dict.fromkeys(s for m in modules for s in m.STUDIES))
    summaries = run_studies(cfg, studies)
    out = Path(cfg.out)
    write_tables(out, modules, summaries)
    s = settings(cfg)
    write_csv(out / "settings.csv", [{"key": k, "value": v} for k, v in s.items()], ["key", "value"])
    return summaries


def plot_figure(module: ModuleType, out: Path) -> Path:
    rows = read_csv(Path(out) / f"{module.NAME}.csv")
    png = Path(out) / f"{module.NAME}.png"
    module.plot(rows, png)
    return png


@dataclass
class ReproduceResult:
    out: Path
    wall_s: float
    claims: list
    report: Path


def reproduce(cfg: RunConfig, command: str = "") -> ReproduceResult:
    """Run everything, write every CSV and PNG, check the claims, write report.md."""

    t0 = time.perf_counter()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    modules = figure_modules(cfg.figures)
    export_figures(cfg, modules)
    for m in modules:
        plot_figure(m, out)
    claims = check_dir(out)
    write_csv(
        out / "claims.csv", [c.to_dict() for c in claims], ["id", "claim", "criterion", "measured", "status", "source"]
    )
    wall = time.perf_counter() - t0

    cpu = round(RunStats.cpu_s, 1)

    run = versioned(
        {"command": command, "wall_s": round(wall, 1), "cpu_s": cpu, "config": cfg.to_dict()}, "reproduce-run"
    )
    (out / "run.json").write_text(json.dumps(run, indent=2))
    report = write_report(out, cfg, modules, claims, wall, command, cpu)
    return ReproduceResult(out, wall, claims, report)


def rebuild_report(cfg: RunConfig) -> ReproduceResult:
    """Figure tables, plots, claims and report.md again from the drops already in ``cfg.out``
    (``drops/<study>.csv``; no drop is computed), so a changed figure or checker applies to a
    finished run; the wall time and command are those of the run recorded in ``run.json``."""

    out = Path(cfg.out)
    try:
        run = read_json_object(out / "run.json")
    except (OSError, ValueError):  # the loader's ConfigError is a ValueError
        raise ConfigError(f"out: {out} has no run.json; run `multispin reproduce --out {out}` first") from None
    c = run.get("config", {})
    cfg = RunConfig(
        out=out,
        quick=bool(c.get("quick", cfg.quick)),
        preset=c.get("preset", cfg.preset),
        seed=int(c.get("seed", cfg.seed)),
        workers=int(c.get("workers", cfg.workers)),
        drops=c.get("drops", cfg.drops),
        n_saa=c.get("n_saa", cfg.n_saa),
        noise_figure_db=c.get("noise_figure_db", cfg.noise_figure_db),
        figures=cfg.figures or (tuple(c["figures"]) if c.get("figures") else None),
    )
    wanted = figure_modules(cfg.figures)
    write_tables(out, wanted, summaries_from_drops(out, list(dict.fromkeys(s for m in wanted for s in m.STUDIES))))
    modules = [m for m in wanted if (out / f"{m.NAME}.csv").exists()]
    for m in modules:
        plot_figure(m, out)
    claims = check_dir(out)
    write_csv(
        out / "claims.csv", [c.to_dict() for c in claims], ["id", "claim", "criterion", "measured", "status", "source"]
    )
    wall = float(run.get("wall_s", 0.0))

    cpu = float(run["cpu_s"]) if "cpu_s" in run else cache_cpu_seconds(out)
    report = write_report(out, cfg, modules, claims, wall, run.get("command", ""), cpu)
    return ReproduceResult(out, wall, claims, report)


__all__ = [
    "rebuild_report",
    "FIGURES",
    "FIGURE_NAMES",
    "PARAM_DOCS",
    "DROP_DOCS",
    "reproduce",
    "export_figures",
    "plot_figure",
]
