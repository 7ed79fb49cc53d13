"""The memory of a process that runs testbed run after run, as `multispin demo --study` does: its RSS
after loading the pair and after each run (the demo's configuration: K = 20, 20 rounds, adaptive,
seeds 1, 2, …). Real-model runs: about 1.5 minutes each on 2 cores; do not run it beside another
real-model job (a K = 20 run's forked server and pool peak near 10 GB).

  python tools/study_memory.py 3              # as shipped: each run hands its freed heap back
  python tools/study_memory.py 3 --keep-heap  # the control: without the release
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

from multispin.experiments import testbed
from multispin.experiments.demo import DemoConfig
from multispin.models.registry import resolve_pair


def rss_gb() -> float:
    return int(Path(f"/proc/{os.getpid()}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def main(runs: int, keep_heap: bool) -> None:
    if keep_heap:
        testbed.release_freed_heap = lambda: False
    with TemporaryDirectory() as tmp:
        config = DemoConfig(seed=1, out=Path(tmp))
        pair = resolve_pair(config.pair)
        print(f"after loading {config.pair}: {rss_gb():.2f} GB", flush=True)
        kept = []  # the study keeps every run's result
        for seed in range(1, runs + 1):
            started = time.time()
            kept.append(testbed.run_testbed(config.testbed("adaptive", seed, None, Path(tmp) / str(seed)), pair=pair))
            print(f"after run {seed} ({time.time() - started:.0f} s): {rss_gb():.2f} GB", flush=True)


if __name__ == "__main__":
    runs, *flags = sys.argv[1:] or ["3"]
    if not runs.isdigit() or int(runs) < 1 or set(flags) - {"--keep-heap"}:
        print("usage: python tools/study_memory.py RUNS [--keep-heap] (RUNS: a whole number ≥ 1)", file=sys.stderr)
        sys.exit(2)
    main(int(runs), "--keep-heap" in flags)
