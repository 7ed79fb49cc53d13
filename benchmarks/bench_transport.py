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
per round, handshakes and warm-up included, model compute included, the server's counted from
after the device processes were forked; two checkouts doing the same rounds with the same seeds
do the same model work, so their difference is the framework's).

On a machine with fewer cores than devices the devices' drafting is time-sliced: a device's
measured draft time then includes waiting for a core, which this benchmark counts as compute
(as a device with its own chip would not wait). Read the K = 32 rows with that in mind.

Framework CPU (Markov rows, "srv fw", "dev fw", "fw cpu"): the wall-clock overhead above is what
this machine shows, but with more device processes than cores it also holds the time each device
process waits for a core (for its drafting, and for its own message handling) and the time the
server waits for one: with K = 8 device processes on 2 cores the devices alone burn several times
the server's CPU each round, so the round's wall time is set by the cores, not by the framework.
A real device has its own chip. So the framework's own cost is also reported as CPU time, which
time-slicing does not inflate: "srv fw" = the server process's CPU per round minus the CPU of its
model compute (the engine's verify, UL corrections and DL p_j encoding, timed with
time.thread_time around those calls), i.e. the server's messaging, validation, scheduling and
bookkeeping, which is serial and on every round's critical path; "dev fw" = one device process's
CPU per round minus its drafting and DL-correction CPU, averaged over the devices (each device's
own messaging, on its own chip and in parallel with the others); "fw cpu" = srv fw + dev fw,
the framework CPU on a round's critical path when every device has its own core, and "fw share"
= fw cpu / (fw cpu + compute ms). Not in it: the loopback transport's latency (a few wake-ups
of tens of µs per round), and any queueing behind other devices' messages at the server. Both
views stay in the table; neither replaces the other.

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

import torch  # noqa: TID253 (the benchmark runs the tiny torch pair)

from multispin.models.base import LoadedPair
from multispin.models.synthetic import MarkovBatchedLM, MarkovSequenceLM, make_tables
from multispin.models.tiny import load_tiny_pair  # noqa: TID253 (as torch above)
from multispin.runtime.net.device import DeviceClient
from multispin.runtime.net.launcher import DeviceSetup, ServerHooks, free_port, run_local_testbed
from multispin.runtime.net.server import EdgeServer
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.round.engine import PolicyPair
from multispin.runtime.round.local import RandomMode, UniformDraftLength
from multispin.runtime.round.roles import DraftDevice
from multispin.runtime.wire.messages import PROTOCOL_VERSION
from multispin.runtime.wire.records import RoundEvent

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
        "rounds": len(ev),
        "wall_ms": 1e3 * mean(wall),
        "draft_ms": 1e3 * mean(draft),
        "verify_ms": 1e3 * mean(verify),
        "compute_ms": 1e3 * mean(compute),
        "overhead_ms": 1e3 * mean(overhead),
        "overhead_p90_ms": 1e3 * sorted(overhead)[int(0.9 * (len(overhead) - 1))],
        "overhead_share": sum(overhead) / max(sum(wall), 1e-12),
        "period_ms": 1e3 * period,
        "period_overhead_ms": 1e3 * (period - mean(compute)),
        "ratio": sum(overhead) / max(sum(compute), 1e-12),
        "kB_per_round": (mean(up) + mean(down)) / 1e3,
    }


def bench_tiny(k: int, rounds: int) -> dict[str, float]:
    seen = _Rounds()
    summary = run_local_testbed(
        load_tiny_pair(),
        ServerConfig.make(
            max_new_tokens=100_000,
            rounds=rounds + WARMUP,
            round_timeout_s=300,
            join_timeout_s=180,
            max_prompt_tokens=4096,
        ),
        DeviceSetup(k, runner="fork", threads=1),
        policy=PolicyPair(UniformDraftLength(GAMMA), RandomMode(0)),
        hooks=ServerHooks(on_round=seen),
        secret=SECRET,
        timeout_s=1800,
    )
    assert summary.consistent, "device tokens differ from the server's records"
    return summarise(seen)


class _ThreadCPU:
    """CPU time (time.thread_time) spent in the wrapped calls: the model compute, told apart from
    the framework's CPU around it."""

    def __init__(self) -> None:
        self.s = 0.0

    def wrap(self, fn):
        def timed(*args, **kwargs):
            t0 = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.s += time.thread_time() - t0

        return timed


def _markov_device(endpoint: str, k: int, draft_table, report) -> None:
    torch.set_num_threads(1)
    compute = _ThreadCPU()
    # the class is patched in this forked process only
    DraftDevice.draft = compute.wrap(DraftDevice.draft)  # drafting and DL correction: the device's
    DraftDevice.correct_locally = compute.wrap(DraftDevice.correct_locally)  # model compute
    DeviceClient(endpoint, k, SECRET, MarkovSequenceLM(draft_table), [1, 2, 3 + k % 7]).run()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    report.put((ru.ru_utime + ru.ru_stime, compute.s))
    os._exit(0)


def bench_markov(k: int, rounds: int, vocab: int = 64) -> dict[str, float]:
    target, draft = make_tables(vocab, seed=0, scale=1.5, draft_noise=1.0)
    pair = LoadedPair(name="markov", tokenizer=None, target=None, drafts={}, vocab_size=vocab)
    port = free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    ctx = multiprocessing.get_context("fork")
    report = ctx.SimpleQueue()  # (process CPU, compute CPU) of each device, at its end
    procs = [ctx.Process(target=_markov_device, args=(endpoint, d, draft, report), daemon=True) for d in range(k)]
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    for p in procs:  # fork before the server thread exists
        p.start()
    # the server's clock starts after the forks: forking K device processes out of this one (a
    # process with torch loaded: 4-6 ms of this process's CPU per device) is the benchmark's own
    # set-up, not the server's; counted, it was ~1 ms per round of "srv fw" at K = 32, 200 rounds
    cpu0 = resource.getrusage(resource.RUSAGE_SELF), children0
    seen = _Rounds()
    config = ServerConfig.make(
        port=port, expected_devices=k, rounds=rounds + WARMUP, max_new_tokens=100_000, seed=0, round_timeout_s=300
    )
    server = EdgeServer(
        config,
        pair,
        SECRET,
        policy=PolicyPair(UniformDraftLength(GAMMA), RandomMode(0)),
        on_round=seen,
        target_lm=MarkovBatchedLM(target),
    )
    compute = _ThreadCPU()  # the server's model compute, on the server's thread
    for name in ("verify", "correct_remotely", "p_payload"):
        setattr(server.engine, name, compute.wrap(getattr(server.engine, name)))
    box = {}
    th = threading.Thread(target=lambda: box.setdefault("s", server.run()))
    th.start()
    th.join()
    for p in procs:
        p.join(30)
    assert all(r.digest_match for r in box["s"].devices.values())
    cpu1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    used = [(b.ru_utime + b.ru_stime) - (a.ru_utime + a.ru_stime) for a, b in zip(cpu0, cpu1)]
    devices = [report.get() for _ in range(k)]
    n = len(seen.events)
    srv_fw = 1e3 * (used[0] - compute.s) / n
    dev_fw = 1e3 * statistics.fmean(cpu - comp for cpu, comp in devices) / n
    row = {
        **summarise(seen),
        "server_cpu_ms": 1e3 * used[0] / n,
        "devices_cpu_ms": 1e3 * used[1] / n,
        "cpu_ms": 1e3 * sum(used) / n,
        "server_fw_cpu_ms": srv_fw,
        "device_fw_cpu_ms": dev_fw,
        "fw_cpu_ms": srv_fw + dev_fw,
    }
    row["fw_share"] = row["fw_cpu_ms"] / max(row["fw_cpu_ms"] + row["compute_ms"], 1e-12)
    return row


def table(title: str, rows: list[tuple[int, dict[str, float]]]) -> None:
    print(f"\n{title}")
    head = (
        f"{'K':>3} {'rounds':>6} {'wall ms':>9} {'period ms':>9} {'draft ms':>9} {'verify ms':>9} "
        f"{'compute ms':>10} {'overhead ms':>11} {'p90 ms':>7} {'of wall':>7} {'overhead/compute':>16} "
        f"{'kB/round':>8}"
        + (
            f" {'cpu ms':>7} {'srv fw':>7} {'dev fw':>7} {'fw cpu':>7} {'fw share':>8}"
            if "cpu_ms" in rows[0][1]
            else ""
        )
    )
    print(head)
    print("-" * len(head))
    for k, r in rows:
        print(
            f"{k:>3} {r['rounds']:>6} {r['wall_ms']:>9.2f} {r['period_ms']:>9.2f} {r['draft_ms']:>9.2f} "
            f"{r['verify_ms']:>9.2f} {r['compute_ms']:>10.2f} {r['overhead_ms']:>11.2f} "
            f"{r['overhead_p90_ms']:>7.2f} {r['overhead_share']:>7.1%} {r['ratio']:>16.3f} "
            f"{r['kB_per_round']:>8.1f}"
            + (
                f" {r['cpu_ms']:>7.2f} {r['server_fw_cpu_ms']:>7.2f} "
                f"{r['device_fw_cpu_ms']:>7.2f} {r['fw_cpu_ms']:>7.2f} "
                f"{r['fw_share']:>8.1%}"
                if "cpu_ms" in r
                else ""
            )
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--no-markov", action="store_true")
    ap.add_argument("--no-tiny", action="store_true")
    ap.add_argument("--json", action="store_true", help="one JSON line per row instead of the tables")
    args = ap.parse_args()
    torch.set_num_threads(1)
    benches = []
    if not args.no_tiny:
        load_tiny_pair()  # build once, before forking
        benches.append(
            ("tiny", "tiny pair (2-layer Qwen2, V = 256): framework overhead vs model compute per round", bench_tiny)
        )
    if not args.no_markov:
        benches.append(
            ("markov", "synthetic Markov models (compute < 1 ms): the framework's own cost per round", bench_markov)
        )
    if not args.json:
        print(
            f"bench_transport: protocol {PROTOCOL_VERSION}, γ = {GAMMA}, mixed UL/DL, devices = "
            f"forked processes, {os.cpu_count()} CPU cores, {args.rounds} rounds after {WARMUP} warm-up"
        )
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
