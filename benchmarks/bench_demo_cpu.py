"""CPU seconds of `multispin demo`, by phase: where the demo's time goes on a host whose wall time
is noise (other jobs share the cores), and what a change saves.

Runs the demo in this process (`experiments.demo.run_demo`, serial seeds, pool runner: what
`make demo` runs) and reports CPU seconds, not wall time:

- set-up: loading the pair and the demo's set-up (`demo_setup`) in this process;
- per testbed run (one policy × seed): this process's CPU over the run (server thread: verify and
  the planner; then the run's summary and forecast), split into the planner's calls (thread CPU
  of `ScenarioPlanner.plan/modes/observe`) and the summary (`summarise_run`: forecast, model
  predictions), and the device pool process's CPU (reaped children, `RUSAGE_CHILDREN`), with the
  pool's own set-up before its first draft batch (`DevicePool.run` until the first batch);
- the rest: the demo's summary and intervals after the runs.

With ``--profile DIR`` every thread of both processes runs under cProfile and DIR gets
``main.pstats`` and ``pool-N.pstats`` (read with ``python -m pstats``).

Wall time on 2 idle cores is estimated from CPU seconds: the demo runs one process at a time on
the critical path except while the pool drafts and the server verifies in turn, so its wall time
is about CPU / parallelism, with the parallelism measured on an idle run (docs/examples/demo.md:
946 CPU-s in 9 min 23 s, 1.68).

Figures (2026-12-07, this project's 2-core host under other agents' load, so CPU seconds carry
some spinning; smollm2-135m, K = 20, 20 rounds, `--policies adaptive all_ul all_dl`, run with and
then without `--no-prefill-store`):

    run        CPU-s (server + pool)    pool prefills CPU-s    pool prefill tokens
               store     fresh          store     fresh
    adaptive   167.4     156.4          23.5      22.2         5,505
    all_ul     154.9     162.2           3.9      21.2         5,278
    all_dl     134.2     154.7           3.0      21.9         5,240
    set-up      13.2      13.2;  total 469.8 against 486.5 CPU-s

The two demos' results: the same tokens, texts and counts; float fields within 1.7e-5 relative
(`compare_demo_outputs.py --rtol 1e-4`), as between two fresh runs (9.4e-6 at K = 4).

Run: PYTHONPATH=src .venv/bin/python benchmarks/bench_demo_cpu.py [--pair smollm2-135m]
     [--devices 20] [--rounds 20] [--policies ...] [--out DIR] [--profile DIR] [--json FILE]
     [--no-prefill-store]
(defaults: the default demo's settings; --no-prefill-store: the demo as before the shared prompt
prefills, `models.prefill_store`, for a before/after on the same code; compare the two --out
folders with benchmarks/compare_demo_outputs.py)
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from multispin.experiments import demo
from multispin.experiments import testbed as tb
from multispin.models.placement import place_pair
from multispin.models.registry import resolve_pair
from multispin.runtime.net import launcher, pool
from multispin.runtime.round.planner import ScenarioPlanner

IDLE_PARALLELISM = 946 / 563  # the default demo on 2 idle cores before (CPU-s / wall s)


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class ThreadCPU:
    """Thread CPU seconds spent inside the wrapped callables (any thread)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._lock = threading.Lock()

    def wrap(self, owner: Any, name: str) -> None:
        inner = getattr(owner, name)
        meter = self

        def timed(*args, **kwargs):
            t0 = time.thread_time()
            try:
                return inner(*args, **kwargs)
            finally:
                with meter._lock:
                    meter.seconds += time.thread_time() - t0

        setattr(owner, name, timed)


class ThreadProfiles:
    """cProfile in every thread started after `install` (and the calling thread)."""

    def __init__(self) -> None:
        self.profiles: list[cProfile.Profile] = []

    def _start(self, *_: Any) -> None:
        p = cProfile.Profile()
        self.profiles.append(p)
        p.enable()  # replaces this hook for the thread

    def install(self) -> None:
        threading.setprofile(self._start)
        self._start()

    def dump(self, path: Path) -> None:
        for p in self.profiles:
            p.disable()
        stats = pstats.Stats(self.profiles[0])
        for p in self.profiles[1:]:
            try:
                stats.add(p)
            except (TypeError, ValueError):  # a thread that never ran a profiled call
                pass
        stats.dump_stats(str(path))


def instrument(profile_dir: Path | None) -> dict[str, Any]:
    """Wrap the demo's phases; returns the meters."""

    planner = ThreadCPU()
    for name in ("plan", "modes", "observe"):
        planner.wrap(ScenarioPlanner, name)
    summary = ThreadCPU()
    summary.wrap(tb, "summarise_run")

    meters_in_child: dict[str, float] = {}
    pool_run: Callable = pool.DevicePool.run
    first_batch = pool.DraftBatcher._run_batch
    body = launcher._fork_pool_main
    pool_report = Path(tempfile.mkdtemp(prefix="bench-demo-pool-"))
    runs = [0]

    def timed_pool_run(self):
        self._bench_t0 = time.process_time()
        return pool_run(self)

    def timed_batch(self):
        if not getattr(self, "_bench_first", False):
            self._bench_first = True
            (pool_report / f"setup-{runs[0]}.txt").write_text(str(time.process_time() - _POOL[0]._bench_t0))
        return first_batch(self)

    _POOL: list = []

    def pool_init_spy(self, *a, **k):
        _POOL[:] = [self]
        return init(self, *a, **k)

    init = pool.DevicePool.__init__
    pool.DevicePool.__init__ = pool_init_spy
    pool.DevicePool.run = timed_pool_run
    pool.DraftBatcher._run_batch = timed_batch

    def profiled_body(*args):
        profiles = ThreadProfiles() if profile_dir else None
        if profiles:
            profiles.install()
        real_exit = os._exit
        mine = {k: 0.0 for k in meters_in_child}
        meters_in_child.update(mine)  # the parent's counts so far are not this process's

        def exit_after_dump(code):
            (pool_report / f"forwards-{runs[0]}.json").write_text(json.dumps(meters_in_child))
            if profiles and profile_dir:
                profiles.dump(profile_dir / f"pool-{runs[0]}.pstats")
            real_exit(code)

        os._exit = exit_after_dump
        return body(*args)

    launcher._fork_pool_main = profiled_body
    forwards = forward_meters()
    meters_in_child = forwards
    return {"planner": planner, "summary": summary, "pool_report": pool_report, "runs": runs, "forwards": forwards}


def forward_meters() -> dict[str, float]:
    """Process CPU (torch's intra-op threads included) of the batched models' forwards, by kind: a prompt's prefill alone (one new
    sequence, nothing cached) and every other forward; the pool process writes its own at exit."""

    from multispin.models import hf  # noqa: PLC0415  (imports torch)

    seconds = {"prefill_alone_cpu_s": 0.0, "prefill_alone_tokens": 0, "other_forward_cpu_s": 0.0}
    inner = hf.HFBatchedLM._extend_batch

    def timed(self, new_tokens, last):
        alone = len(new_tokens) == 1 and all(self._len.get(s, 0) == 0 for s in new_tokens)
        t0 = time.process_time()
        try:
            return inner(self, new_tokens, last)
        finally:
            if alone:
                seconds["prefill_alone_cpu_s"] += time.process_time() - t0
                seconds["prefill_alone_tokens"] += sum(len(t) for t in new_tokens.values())
            else:
                seconds["other_forward_cpu_s"] += time.process_time() - t0

    hf.HFBatchedLM._extend_batch = timed
    return seconds


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", default="smollm2-135m")
    ap.add_argument("--devices", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--policies", nargs="+", default=None)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--profile", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--no-prefill-store", action="store_true", help="every pool prefills its prompts itself (the demo before)"
    )
    args = ap.parse_args(argv)

    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    profiles = ThreadProfiles() if args.profile else None
    if profiles:
        profiles.install()
    w_start = time.perf_counter()  # CPU seconds count from the process's start: imports are set-up too

    meters = instrument(args.profile)
    if args.no_prefill_store:
        demo.shared_prompt_prefills = lambda pair: contextlib.nullcontext()
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-demo-"))
    given = {k: v for k, v in (("devices", args.devices), ("rounds", args.rounds)) if v is not None}
    if args.policies:
        given["policies"] = tuple(args.policies)
    config = demo.DemoConfig.make(pair=args.pair, out=out, **given)
    pair = place_pair(resolve_pair(config.pair), "cpu", drafts=False)
    setup = demo.demo_setup(config, pair)
    setup_s = time.process_time()

    rows: list[dict] = []
    real_run = demo.run_testbed

    def measured_run(tb, **kw):
        meters["runs"][0] += 1
        main0, kids0 = time.process_time(), children_cpu_s()
        plan0, sum0, w0 = meters["planner"].seconds, meters["summary"].seconds, time.perf_counter()
        fwd0 = dict(meters["forwards"])
        result = real_run(tb, **kw)
        pool_setup = meters["pool_report"] / f"setup-{meters['runs'][0]}.txt"
        pool_fwd = meters["pool_report"] / f"forwards-{meters['runs'][0]}.json"
        rows.append(
            {
                "policy": tb.policy,
                "seed": tb.seed,
                "main_cpu_s": time.process_time() - main0,
                "planner_cpu_s": meters["planner"].seconds - plan0,
                "summary_cpu_s": meters["summary"].seconds - sum0,
                "pool_cpu_s": children_cpu_s() - kids0,
                "pool_setup_cpu_s": float(pool_setup.read_text()) if pool_setup.exists() else None,
                "wall_s": time.perf_counter() - w0,
                "server": {k: v - fwd0[k] for k, v in meters["forwards"].items()},
                "pool": json.loads(pool_fwd.read_text()) if pool_fwd.exists() else None,
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        return result

    demo.run_testbed = measured_run
    result = demo.run_demo(config, pair, None, setup)
    total_main = time.process_time()
    total = total_main + children_cpu_s()
    wall = time.perf_counter() - w_start
    doc = {
        "prefill_store": not args.no_prefill_store,
        "config": {
            "pair": config.pair,
            "devices": config.devices,
            "rounds": config.rounds,
            "policies": config.policies,
        },
        "setup_cpu_s": setup_s,
        "runs": rows,
        "rest_cpu_s": total_main - setup_s - sum(r["main_cpu_s"] for r in rows),
        "total_cpu_s": total,
        "wall_s": wall,
        "estimated_idle_2core_wall_s": total / IDLE_PARALLELISM,
        "goodput": {r.policy: r.goodput.estimate for r in result.points[0].rows},
    }
    if profiles and args.profile:
        profiles.dump(args.profile / "main.pstats")
    text = json.dumps(doc, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)
    return doc


if __name__ == "__main__":
    main()
