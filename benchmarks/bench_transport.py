"""Framework overhead of the networked testbed per round, next to the model compute it carries.

Per round the server logs its wall time and the model compute on the round's critical path:
the slowest device's drafting time (measured on the device, reported in DRAFT), the one batched
verify, the server-side corrections and the slowest device-side (DL) correction. Overhead =
round wall time - that compute: msgpack encoding/decoding and validation, ZeroMQ transport over
127.0.0.1, the server's scheduling and bookkeeping (digests, logs), and the devices' wake-ups.

Table 1: the tiny pair (2-layer Qwen2, float64, V = 256), γ = 4 for every device, mixed UL/DL,
devices as forked processes (one DEALER socket and one draft KV cache each), K = 1, 8, 32.
Table 2: the same protocol on synthetic Markov "models" (a fraction of a millisecond of compute),
so the round wall time is mostly framework: its absolute cost per round.

Since protocol 2 a round's PLANs ride in the last round's COMMITs and its wall time starts when
they left, so consecutive rounds tile the run; "period" is the time between consecutive rounds'
ends as this process saw them, the measure that holds for any protocol version (run this file
with PYTHONPATH pointing at another checkout's src/ to measure that one: the benchmark uses only
the loops' public API). Overhead = wall − compute, in ms and as a share of the wall time.

Wall times on a machine that other work loads swing by several times; the CPU time the run
consumed does not (Markov rows: "cpu ms" = the server process's and the device processes' CPU
per round, handshakes and warm-up included, model compute included; two checkouts doing the same
rounds with the same seeds do the same model work, so their difference is the framework's).

On a machine with fewer cores than devices the devices' drafting is time-sliced: a device's
measured draft time then includes waiting for a core, which this benchmark counts as compute
(as a device with its own chip would not wait). Read the K = 32 rows with that in mind.

Run: .venv/bin/python benchmarks/bench_transport.py [--rounds 30] [--devices 1 8 32] [--no-tiny]
     [--no-markov] [--json]   (--json: one JSON line per row instead of the tables)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import threading
import time

import torch

from multispin.models.base import LoadedPair
from multispin.models.synthetic import MarkovBatchedLM, MarkovSequenceLM, make_tables
from multispin.models.tiny import load_tiny_pair
from multispin.runtime.net.device import DeviceClient
from multispin.runtime.net.launcher import free_port, run_local_testbed
from multispin.runtime.round.local import RandomMode, UniformDraftLength
from multispin.runtime.wire.records import RoundEvent
from multispin.runtime.net.server import EdgeServer, ServerConfig

SECRET = "bench-transport-secret"
GAMMA = 4
WARMUP = 3


class _Rounds:
    """The server's `on_round` hook: every `RoundEvent` and when it came."""

    def __init__(self) -> None:
        self.events: list[RoundEvent] = []
        self.ends: list[float] = []

    def __call__(self, event: RoundEvent) -> None:
        self.events.append(event)
        self.ends.append(time.perf_counter())


def summarise(rounds: _Rounds) -> dict[str, float]:
    events = rounds.events
    ev = events[WARMUP:] or events
    first = WARMUP - 1 if len(events) > WARMUP else 0
    period = (rounds.ends[-1] - rounds.ends[first]) / max(1, len(rounds.ends) - 1 - first)
    wall = [e.round_wall_s for e in ev]
    compute = [e.model_compute_s for e in ev]
    overhead = [w - c for w, c in zip(wall, compute)]
    verify = [e.verify_s for e in ev]
    draft = [max(e.draft_compute_s.values(), default=0.0) for e in ev]
    up = [sum(e.wire_bytes_up.values()) for e in ev]
    down = [sum(e.wire_bytes_down.values()) for e in ev]
    mean = statistics.fmean
    return {
        "rounds": len(ev), "wall_ms": 1e3 * mean(wall), "draft_ms": 1e3 * mean(draft),
        "verify_ms": 1e3 * mean(verify), "compute_ms": 1e3 * mean(compute),
        "overhead_ms": 1e3 * mean(overhead), "overhead_p90_ms": 1e3 * sorted(overhead)[int(0.9 * (len(overhead) - 1))],
        "overhead_share": sum(overhead) / max(sum(wall), 1e-12),
        "period_ms": 1e3 * period, "period_overhead_ms": 1e3 * (period - mean(compute)),
        "ratio": sum(overhead) / max(sum(compute), 1e-12),
        "kB_per_round": (mean(up) + mean(down)) / 1e3,
    }


def bench_tiny(k: int, rounds: int) -> dict[str, float]:
    seen = _Rounds()
    summary = run_local_testbed(
        load_tiny_pair(), k, max_new_tokens=100_000, rounds=rounds + WARMUP,
        draft_lengths=UniformDraftLength(GAMMA), modes=RandomMode(0), secret=SECRET,
        device_runner="fork", threads=1, round_timeout_s=300, on_round=seen,
        server_options={"max_prompt_tokens": 4096}, timeout_s=1800)
    assert summary.consistent, "device tokens differ from the server's records"
    return summarise(seen)


def _markov_device(endpoint: str, k: int, draft_table) -> None:
    torch.set_num_threads(1)
    DeviceClient(endpoint, k, SECRET, MarkovSequenceLM(draft_table), [1, 2, 3 + k % 7]).run()
    os._exit(0)


def bench_markov(k: int, rounds: int, vocab: int = 64) -> dict[str, float]:
    target, draft = make_tables(vocab, seed=0, scale=1.5, draft_noise=1.0)
    pair = LoadedPair(name="markov", tokenizer=None, target=None, drafts={}, vocab_size=vocab)
    port = free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_markov_device, args=(endpoint, d, draft), daemon=True) for d in range(k)]
    cpu0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    for p in procs:  # fork before the server thread exists
        p.start()
    seen = _Rounds()
    config = ServerConfig.make(port=port, expected_devices=k, rounds=rounds + WARMUP,
                               max_new_tokens=100_000, seed=0, round_timeout_s=300)
    server = EdgeServer(config, pair, SECRET, draft_lengths=UniformDraftLength(GAMMA),
                        modes=RandomMode(0), on_round=seen, target_lm=MarkovBatchedLM(target))
    box = {}
    th = threading.Thread(target=lambda: box.setdefault("s", server.run()))
    th.start()
    th.join()
    for p in procs:
        p.join(30)
    assert all(r.digest_match for r in box["s"].devices.values())
    cpu1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    used = [(b.ru_utime + b.ru_stime) - (a.ru_utime + a.ru_stime) for a, b in zip(cpu0, cpu1)]
    n = len(seen.events)
    return {**summarise(seen), "server_cpu_ms": 1e3 * used[0] / n, "devices_cpu_ms": 1e3 * used[1] / n,
            "cpu_ms": 1e3 * sum(used) / n}


def table(title: str, rows: list[tuple[int, dict[str, float]]]) -> None:
    print(f"\n{title}")
    head = (f"{'K':>3} {'rounds':>6} {'wall ms':>9} {'period ms':>9} {'draft ms':>9} {'verify ms':>9} "
            f"{'compute ms':>10} {'overhead ms':>11} {'p90 ms':>7} {'of wall':>7} {'overhead/compute':>16} "
            f"{'kB/round':>8}" + (f" {'cpu ms':>7}" if "cpu_ms" in rows[0][1] else ""))
    print(head)
    print("-" * len(head))
    for k, r in rows:
        print(f"{k:>3} {r['rounds']:>6} {r['wall_ms']:>9.2f} {r['period_ms']:>9.2f} {r['draft_ms']:>9.2f} "
              f"{r['verify_ms']:>9.2f} {r['compute_ms']:>10.2f} {r['overhead_ms']:>11.2f} "
              f"{r['overhead_p90_ms']:>7.2f} {r['overhead_share']:>7.1%} {r['ratio']:>16.3f} "
              f"{r['kB_per_round']:>8.1f}" + (f" {r['cpu_ms']:>7.2f}" if "cpu_ms" in r else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--no-markov", action="store_true")
    ap.add_argument("--no-tiny", action="store_true")
    ap.add_argument("--json", action="store_true", help="one JSON line per row instead of the tables")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from multispin.runtime.wire.messages import PROTOCOL_VERSION

    benches = []
    if not args.no_tiny:
        load_tiny_pair()  # build once, before forking
        benches.append(("tiny", "tiny pair (2-layer Qwen2, V = 256): framework overhead vs model "
                        "compute per round", bench_tiny))
    if not args.no_markov:
        benches.append(("markov", "synthetic Markov models (compute < 1 ms): the framework's own "
                        "cost per round", bench_markov))
    if not args.json:
        print(f"bench_transport: protocol {PROTOCOL_VERSION}, γ = {GAMMA}, mixed UL/DL, devices = "
              f"forked processes, {os.cpu_count()} CPU cores, {args.rounds} rounds after {WARMUP} warm-up")
    t0 = time.perf_counter()
    for name, title, bench in benches:
        rows = [(k, bench(k, args.rounds)) for k in args.devices]
        if args.json:
            for k, r in rows:
                print(json.dumps({"bench": name, "protocol": PROTOCOL_VERSION, "K": k, **r}), flush=True)
        else:
            table(title, rows)
    if not args.json:
        print(f"\n({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
