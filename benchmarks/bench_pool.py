"""Device pools against one process per device: the networked testbed's rounds per second, CPU per
round and peak memory at K = 8, 20, 64.

Each configuration is one `multispin testbed` run as a subprocess (virtual clock, steady state,
the defaults of `TestbedConfig` but a round timeout of 30 min:
every device has work in every round), with devices as forked processes (`--runner fork`, one
process and one draft model per device) or as one pool (`--runner pool`, every device in one
process, drafting in batched forwards). While it runs, this script samples the run's process tree
(the testbed process, which holds the server, and its device processes) every 0.2 s:

- rounds/s: measured rounds over the wall time between the end of the warm-up rounds and the end
  of the last measured round (rounds.jsonl is written as each round ends);
- CPU per round: the tree's user + system CPU over the same window, per round (server and devices
  together: what the rounds cost this host, model compute included);
- same texts: whether the run's texts equal the first runner's at that K (same seed);
- peak ΣPSS: the largest sum of the tree's proportional set sizes (/proc/PID/smaps_rollup) seen
  during the run, setup included (shared pages counted once: the forked devices share the
  parent's pages until they write them).

On a host with fewer cores than device processes the fork runner's devices wait for a core, and
the wall time shows it; the CPU column does not. Linux only (/proc).

Run: .venv/bin/python benchmarks/bench_pool.py [--pair smollm2-135m] [--devices 8 20 64]
     [--tiny-above 20] [--rounds 10] [--warmup 2] [--runners pool fork] [--json] [--texts DIR]
     [--max-pss-gb GB] [--reserve-gb 2]
(--tiny-above K: configurations with more than K devices use the tiny pair; the table says which.
A configuration whose process tree passes --max-pss-gb, or that leaves the host less than
--reserve-gb available, is stopped and reported as not fitting, with the rounds it had done.)

Figures (2026-12-04 evening, one invocation on this project's 2-core, 23 GB host with nothing
else running, smollm2-135m at every K: `bench_pool.py --devices 8 20 64 --tiny-above 64 --rounds 4
--warmup 1 --json --reserve-gb 1.5`; the pool drafts on its process's torch threads, two here;
same texts and records in every row):

    K   runner  rounds/s  CPU s/round  peak ΣPSS GB
    8   pool    0.461     2.18         4.29
    8   fork    0.365     3.92         4.10
    20  pool    0.165     6.43         5.88
    20  fork    0.121     12.89        5.49
    64  pool    0.0308    33.4         14.63
    64  fork    0.0296    57.6         11.43

A pool drafts on 56% of the CPU per round of 8 device processes, 50% of 20 and 58% of 64, and is
26-36% faster in wall time at K = 8 and 20; at K = 64 the two are level in wall time (4%), the
pool's one process being the bottleneck where 64 processes keep both cores busy. The pool holds
more memory at K = 64 (14.6 GB against 11.4): its padded batch's KV cache grows with the longest
sequence, and the forked devices share the parent's weights until they write them. From K = 20
to 64 the pool's CPU per round grows 5.2× for 3.2× the devices (the batch's attention and its
padding grow with K). The morning's figures, taken at load 13-20 with the pool on one thread, had
the same CPU columns within 10% (8: 2.02/3.18, 20: 5.94/12.36, 64 pool: 30.4).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                kids += [int(x) for x in fh.read().split()]
    except OSError:
        pass
    return kids


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += _children(p)
    return out


def _cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
    except OSError:
        return 0.0


def _pss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _mem_available_gb() -> float:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024 / 1e9
    return float("inf")


def _rounds_done(path: Path) -> int:
    try:
        with open(path) as fh:
            return sum(1 for _ in fh)
    except OSError:
        return 0


# `multispin testbed` with a round timeout for a loaded host: a speed benchmark should not drop a
# device (a pool drafts its K prefills of round 0 one after another in one process)
_RUN = """
import json, sys
from multispin.experiments.testbed import TestbedConfig, run_testbed
res = run_testbed(TestbedConfig.make(**json.loads(sys.argv[1])))
print(json.dumps({"consistent": res.summary.integrity.consistent, "digests_match": res.summary.integrity.digests_match}))
"""


def measure(
    pair: str,
    devices: int,
    runner: str,
    rounds: int,
    warmup: int,
    timeout_s: float = 3600,
    round_timeout_s: float = 1800.0,
    max_pss_gb: float | None = None,
    reserve_gb: float = 2.0,
) -> dict:
    """One testbed run of warmup + rounds (+ 5, so that the processes are alive at the last
    measured round's end) rounds; its rounds/s, CPU per round and peak ΣPSS."""
    out = Path(tempfile.mkdtemp(prefix="bench-pool-"))
    config = dict(
        pair=pair,
        devices=devices,
        rounds=warmup + rounds + 5,
        runner=runner,
        clock="virtual",
        out=str(out),
        round_timeout_s=round_timeout_s,
    )
    cmd = [sys.executable, "-c", _RUN, json.dumps(config)]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak, marks, over_cap = 0, {}, ""
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        tree = _tree(proc.pid)
        peak = max(peak, sum(_pss_bytes(p) for p in tree))
        # a host without swap has the kernel kill whatever it picks (another job's process, too):
        # stop the run ourselves first, and say what it had reached
        if max_pss_gb is not None and peak > max_pss_gb * 1e9:
            over_cap = f"ΣPSS over --max-pss-gb {max_pss_gb:g}"
        elif _mem_available_gb() < reserve_gb:
            over_cap = f"the host's MemAvailable under --reserve-gb {reserve_gb:g} at ΣPSS {peak / 1e9:.1f} GB"
        if over_cap:
            for p in reversed(tree):
                try:
                    os.kill(p, 9)
                except OSError:
                    pass
            break
        done = _rounds_done(out / "rounds.jsonl")
        # one mark per poll: a window whose both ends fell in one poll measured nothing (no time,
        # no CPU), so its end waits for the next poll, where it counts the rounds really done
        if warmup not in marks and done >= warmup:
            marks[warmup] = (time.perf_counter(), sum(_cpu_s(p) for p in tree), done)
        elif warmup in marks and len(marks) == 1 and done >= warmup + rounds:
            marks[warmup + rounds] = (time.perf_counter(), sum(_cpu_s(p) for p in tree), done)
        time.sleep(0.05)
    if proc.poll() is None:
        proc.kill()
    stdout, stderr = proc.communicate()
    total_s = time.perf_counter() - started
    if over_cap:
        reached = f"{_rounds_done(out / 'rounds.jsonl')} rounds done"
        return {"pair": pair, "devices": devices, "runner": runner, "error": [f"stopped: {over_cap} ({reached})"]}
    if proc.returncode != 0 or len(marks) < 2:
        return {"pair": pair, "devices": devices, "runner": runner, "error": stderr.strip().splitlines()[-1:]}
    summary = json.loads(stdout.strip().splitlines()[-1])
    texts = json.loads((out / "summary.json").read_text())["texts"]
    (t0, c0, n0), (t1, c1, n1) = marks[warmup], marks[warmup + rounds]
    return {
        "pair": pair,
        "devices": devices,
        "runner": runner,
        "rounds": n1 - n0,
        "rounds_per_s": (n1 - n0) / (t1 - t0),
        "cpu_s_per_round": (c1 - c0) / (n1 - n0),
        "peak_pss_gb": peak / 1e9,
        "wall_s": total_s,
        "consistent": summary.get("consistent"),
        "digests_match": summary.get("digests_match"),
        "texts": texts,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", default="smollm2-135m")
    ap.add_argument("--devices", type=int, nargs="+", default=[8, 20, 64])
    ap.add_argument("--tiny-above", type=int, default=20, help="more devices than this: the tiny pair")
    ap.add_argument("--rounds", type=int, default=10, help="measured rounds per configuration")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--runners", nargs="+", default=["pool", "fork"], choices=["pool", "fork", "thread", "subprocess"])
    ap.add_argument("--max-pss-gb", type=float, help="stop a configuration whose process tree's ΣPSS passes this (GB)")
    ap.add_argument(
        "--reserve-gb",
        type=float,
        default=2.0,
        help="stop a configuration when the host's MemAvailable falls below this",
    )
    ap.add_argument("--json", action="store_true", help="one JSON line per configuration")
    ap.add_argument("--texts", type=Path, metavar="DIR", help="also write each run's texts to DIR/PAIR-K-RUNNER.json")
    args = ap.parse_args(argv)
    rows = []
    for k in args.devices:
        pair = "tiny" if k > args.tiny_above else args.pair
        for runner in args.runners:
            row = measure(
                pair, k, runner, args.rounds, args.warmup, max_pss_gb=args.max_pss_gb, reserve_gb=args.reserve_gb
            )
            first = next((r for r in rows if r["devices"] == k and "texts" in r), None)
            if "texts" in row:  # same seed, so the same texts whatever the runner (float32: see pool.py)
                row["texts_equal_first_runner"] = first is None or first["texts"] == row["texts"]
            rows.append(row)
            if args.texts and "texts" in row:
                args.texts.mkdir(parents=True, exist_ok=True)
                (args.texts / f"{pair}-{k}-{runner}.json").write_text(json.dumps(row["texts"]))
            if args.json:
                print(json.dumps({key: v for key, v in row.items() if key != "texts"}), flush=True)
    if not args.json:
        print(
            f"{'pair':<14}{'K':>4} {'runner':<8}{'rounds/s':>10}{'CPU s/round':>13}{'peak ΣPSS GB':>14}"
            f"{'run s':>8}  ok    same texts"
        )
        for r in rows:
            if "error" in r:
                print(f"{r['pair']:<14}{r['devices']:>4} {r['runner']:<8} error: {r['error']}")
                continue
            print(
                f"{r['pair']:<14}{r['devices']:>4} {r['runner']:<8}{r['rounds_per_s']:>10.2f}"
                f"{r['cpu_s_per_round']:>13.2f}{r['peak_pss_gb']:>14.2f}{r['wall_s']:>8.0f}  "
                f"{str(r['consistent'] and r['digests_match']):<6}{r['texts_equal_first_runner']}"
            )
    return 0 if all("error" not in r and r["consistent"] and r["digests_match"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
