"""What a flood of keyed but silent connections costs `multispin serve` at a small descriptor limit.

The attack: N ZeroMQ DEALERs holding one device's valid CurveZMQ key connect to a
`serve --pair tiny --keys KEYS/server --devices 2` started under `ulimit -n 256`, and never send
a frame. Each row starts a fresh server, opens the flood, waits ``--warmup`` seconds, then reads
the server's CPU time (utime + stime of /proc/PID/stat, and of each thread under
/proc/PID/task) over ``--window`` seconds, and after a SIGTERM the server's own counts from its
log's shutdown record: the connections it cut (handshake deadline passed, too many connections)
and the ones it refused (every other cause: the key's quota of silent connections, a handshake
that failed, a key not allowed), over the whole run (flood, warm-up and window): a flood that
churns cuts thousands, one that stopped about one per DEALER.

CPU time is what the server consumed, not wall time, so other work on the machine inflates it
little; but a loaded machine slows the flood's reconnects too, so the counts are the robust
figure and the CPU share the one an operator feels. Linux only (/proc).

The control: `--serve-args "--max-silent-per-key 0"` turns the quota off (the server as it was
before it had one).

Run: .venv/bin/python benchmarks/bench_silent_flood.py [--dealers 0 200 300] [--window 30]
     [--warmup 5] [--serve-args "--max-silent-per-key 0"] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import zmq

from multispin.runtime.net.launcher import free_port
from multispin.runtime.security.keys import create_keyring, curve_client, load_device_keys

_TICKS = os.sysconf("SC_CLK_TCK")
_CUTS = ("handshake deadline passed", "too many connections")


def _cpu_s(stat_path: str) -> float:
    """utime + stime of one /proc stat file, in seconds (fields after the parenthesised name)."""
    with open(stat_path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _threads(pid: int) -> dict[str, float]:
    """CPU seconds per thread, keyed by thread name and id."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            out[f"{name}:{tid}"] = _cpu_s(f"/proc/{pid}/task/{tid}/stat")
        except OSError:  # the thread ended meanwhile
            continue
    return out


def _start_server(keys: Path, log: Path, port: int, serve_args: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "multispin", "serve", "--pair", "tiny", "--keys", str(keys / "server")]
    cmd += ["--devices", "2", "--port", str(port), "--no-journal", "--join-timeout", "3600", "--threads", "1"]
    cmd += ["--log", str(log), *serve_args]
    server = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)),
    )
    deadline = time.monotonic() + 120
    while not (log.exists() and '"event":"start"' in log.read_text()):
        if server.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"serve did not start: {server.communicate()[1][-2000:]}")
        time.sleep(0.1)
    return server


def _flood(ctx: zmq.Context, keys: Path, port: int, n: int) -> list[zmq.Socket]:
    device = load_device_keys(keys / "device-0", 0)
    flood = []
    for _ in range(n):
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        curve_client(s, device)
        s.connect(f"tcp://127.0.0.1:{port}")
        flood.append(s)
    return flood


def measure(n: int, window_s: float, warmup_s: float, serve_args: list[str]) -> dict:
    """One row: a fresh server, ``n`` silent keyed DEALERs, the server's CPU and counts."""
    with tempfile.TemporaryDirectory(prefix="silent-flood-") as tmp:
        keys, log, port = Path(tmp) / "keys", Path(tmp) / "server.jsonl", free_port()
        create_keyring(keys, [0, 1])
        server = _start_server(keys, log, port, serve_args)
        ctx = zmq.Context()
        try:
            started = time.monotonic()
            flood = _flood(ctx, keys, port, n)
            time.sleep(warmup_s)
            cpu0, threads0, t0 = _cpu_s(f"/proc/{server.pid}/stat"), _threads(server.pid), time.monotonic()
            time.sleep(window_s)
            cpu1, threads1, t1 = _cpu_s(f"/proc/{server.pid}/stat"), _threads(server.pid), time.monotonic()
            ran_s = time.monotonic() - started
            for s in flood:
                s.close()
            server.send_signal(signal.SIGTERM)
            server.wait(60)
        finally:
            ctx.destroy(linger=0)
            if server.poll() is None:
                server.kill()
        shutdown = next(json.loads(ln) for ln in log.read_text().splitlines() if '"event":"shutdown"' in ln)
    refusals = shutdown.get("refusals", {})
    busiest = sorted(((threads1[k] - threads0.get(k, 0.0), k) for k in threads1), reverse=True)[:4]
    return {
        "dealers": n,
        "cpu_core": round((cpu1 - cpu0) / (t1 - t0), 3),
        "cuts": sum(refusals.get(c, 0) for c in _CUTS),
        "refused": sum(v for k, v in refusals.items() if k not in _CUTS),
        "seconds": round(ran_s, 1),
        "refusals": refusals,
        "threads": {k: round(v / (t1 - t0), 3) for v, k in busiest if v > 0},
        "loadavg": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dealers", type=int, nargs="+", default=[0, 200, 300])
    ap.add_argument("--window", type=float, default=30.0, help="seconds of CPU time measured")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds between the flood and the window")
    ap.add_argument("--serve-args", default="", help="more `serve` flags, one string")
    ap.add_argument("--json", action="store_true", help="one JSON line per row")
    args = ap.parse_args(argv)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # the flood's own sockets
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if not args.json:
        print(f"serve args: {args.serve_args or '(defaults)'}; window {args.window:.0f} s after {args.warmup:.0f} s")
        print(f"{'dealers':>8} {'cpu (cores)':>12} {'cuts':>7} {'refused':>8} {'run s':>6}  busiest threads (cores)")
    for n in args.dealers:
        row = measure(n, args.window, args.warmup, shlex.split(args.serve_args))
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            threads = ", ".join(f"{k.split(':')[0]} {v:.2f}" for k, v in row["threads"].items())
            print(
                f"{n:>8} {row['cpu_core']:>12.3f} {row['cuts']:>7} {row['refused']:>8} {row['seconds']:>6.0f}  {threads}",
                flush=True,
            )


if __name__ == "__main__":
    main()
