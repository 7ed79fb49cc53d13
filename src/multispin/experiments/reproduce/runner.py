"""Run studies: drops in chunks on an executor (process pool or Ray: executor.py), a per-chunk cache,
a progress bar.

Work unit: one chunk of drops of one point. Its result is cached as
``OUT/cache/<study>/<key>.json``, ``key`` a hash of the point's full scenario, its options, the
base seed, the drop range and the code version (`.drop.code_version`), so an interrupted
run resumes where it stopped and a changed configuration or optimiser recomputes. Every drop's
seed depends only on (base seed, study, point, drop index), and rows are sorted by drop, so the
results do not depend on the number of workers or on the order in which chunks finish.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from multispin.datafile import read_json_object
from multispin.errors import Interrupted
from multispin.experiments.reproduce.config import Point, RunConfig, drop_seed
from multispin.experiments.reproduce.drop import run_chunk
from multispin.experiments.reproduce.executor import run_calls
from multispin.experiments.reproduce.studies import cost_estimate
from multispin.progress import Step, step_progress

CHUNK_DROPS = 10


@dataclass
class _Task:
    point: Point
    scenario: dict[str, Any]
    start: int
    stop: int
    key: str
    path: Path

    def seeds(self, base_seed: int) -> list[tuple[int, int]]:
        return [(i, drop_seed(base_seed, self.point.study, self.point.label, i)) for i in range(self.start, self.stop)]


def _read_cache(path: Path, key: str) -> tuple[list[dict], float] | None:
    try:
        data = read_json_object(path)
    except (OSError, ValueError):  # a damaged chunk (the loader's ConfigError too) is computed again
        return None
    if data.get("key") != key or not isinstance(data.get("rows"), list):
        return None
    return data["rows"], float(data.get("cpu_s", 0.0))


def cache_cpu_seconds(out: Path) -> float:
    """CPU seconds recorded by every chunk in ``OUT/cache`` (the cost of the drops stored there)."""
    total = 0.0
    for f in Path(out).joinpath("cache").glob("*/*.json"):
        try:
            total += float(read_json_object(f).get("cpu_s", 0.0))
        except (OSError, ValueError, TypeError):
            pass
    return total


class RunStats:
    """CPU seconds of the drops of the last `run_points` call (computed now or read from the cache)."""

    cpu_s: float = 0.0


def _timed_chunk(scenario: dict[str, Any], options: dict[str, Any], seeds: list[tuple[int, int]]):
    """run_chunk and its CPU seconds (kept in the cache file only, never in a CSV)."""
    t0 = time.process_time()
    rows = run_chunk(scenario, options, seeds)
    return rows, time.process_time() - t0


def _write_cache(task: _Task, rows: list[dict], seconds: float) -> None:
    task.path.parent.mkdir(parents=True, exist_ok=True)
    tmp = task.path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(
        json.dumps(
            {
                "key": task.key,
                "study": task.point.study,
                "point": task.point.params,
                "drops": [task.start, task.stop],
                "cpu_s": round(seconds, 3),
                "rows": rows,
            }
        )
    )
    os.replace(tmp, task.path)


def run_points(jobs: list[tuple[Point, int]], cfg: RunConfig) -> dict[tuple[str, str], list[dict]]:
    """Every drop of every ``(point, drops)``; returns rows sorted by drop, keyed by (study, point id)."""
    cache_dir = Path(cfg.out) / "cache"
    tasks: list[_Task] = []
    for point, drops in jobs:
        scenario = point.scenario_dict()
        for start in range(0, drops, CHUNK_DROPS):
            stop = min(drops, start + CHUNK_DROPS)
            key = point.cache_key(cfg.seed, start, stop, scenario)
            tasks.append(_Task(point, scenario, start, stop, key, cache_dir / point.study / f"{key[:32]}.json"))
    results: dict[int, list[dict]] = {}
    todo: list[int] = []
    RunStats.cpu_s = 0.0
    for i, t in enumerate(tasks):
        hit = _read_cache(t.path, t.key) if cfg.use_cache else None
        if hit is not None and len(hit[0]) == t.stop - t.start:
            results[i] = hit[0]
            RunStats.cpu_s += hit[1]
        else:
            todo.append(i)
    todo.sort(key=lambda i: -cost_estimate(tasks[i].point))

    studies = list(dict.fromkeys(p.study for p, _ in jobs))
    total = {s: sum(t.stop - t.start for t in tasks if t.point.study == s) for s in studies}
    done = {s: sum(len(r) for i, r in results.items() if tasks[i].point.study == s) for s in studies}
    with step_progress(enabled=cfg.progress) as progress:
        for s in studies:
            progress(Step(s, done[s], total[s], "drops"))

        def finish(i: int, res) -> None:
            rows, seconds = res
            results[i] = rows
            RunStats.cpu_s += seconds
            if cfg.use_cache:
                _write_cache(tasks[i], rows, seconds)
            study = tasks[i].point.study
            done[study] += len(rows)
            progress(Step(study, done[study], total[study], "drops"))

        calls = {i: (tasks[i].scenario, tasks[i].point.options, tasks[i].seeds(cfg.seed)) for i in todo}
        try:
            for i, res in run_calls(_timed_chunk, calls, cfg.executor, cfg.workers, cfg.address):
                finish(i, res)
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the finished chunks are in the cache
            resume = "rerun the same command to resume" if cfg.use_cache else "nothing was cached (--no-cache)"
            raise Interrupted.after(
                exc, f"interrupted after {sum(done.values())} of {sum(total.values())} drops; {resume}"
            ) from None

    out: dict[tuple[str, str], list[dict]] = {}
    for i, t in enumerate(tasks):
        out.setdefault((t.point.study, t.point.id), []).extend(results[i])
    for rows in out.values():
        rows.sort(key=lambda r: r["drop"])
    return out
