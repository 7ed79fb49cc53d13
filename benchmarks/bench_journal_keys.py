"""Cost of the issue-12 building blocks on their own, before they are wired into the server.

Table 1, the journal: one `commit_round` per round (K devices, a few tokens each) with
synchronous=FULL (what the server uses: one fsync of the WAL per round) and, for the ratio,
synchronous=NORMAL (no fsync per commit; not durable across power loss); then `recover()` of
the whole journal (the restart cost). Depends on the disk: run it on the disk the journal uses.

Table 2, CurveZMQ: one round of messages over 127.0.0.1, K DEALERs each sending a draft-sized
message and getting a verdict-sized reply from one ROUTER, plain and with CURVE (per-device keys,
an authenticator restricted to the allowed keys); the ratio is the encryption's cost per round.

Run: .venv/bin/python benchmarks/bench_journal_keys.py [--rounds 200] [--devices 8 32]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import zmq

from multispin.runtime.security.keys import (
    AllowedKeys,
    create_device_keys,
    create_server_keys,
    curve_client,
    curve_server,
    load_device_keys,
    load_server_keys,
)
from multispin.runtime.store.journal import DeviceRound, Journal, SessionRecord


def journal_ms(k: int, rounds: int, synchronous: str, root: Path) -> tuple[float, float]:
    path = root / f"j-{k}-{synchronous}.db"
    with Journal(path) as j:
        j._db.execute(f"PRAGMA synchronous = {synchronous}")
        for d in range(k):
            j.open_session(
                SessionRecord(d, f"key{d}", tuple(range(64)), {"temperature": 1.0}, "dense-fp32", "dense-fp32", 0)
            )
        times = []
        for r in range(rounds):
            entry = {d: DeviceRound(tuple(range(r % 5 + 1)), 4, ("ul", "dl", None)[d % 3], 4096) for d in range(k)}
            t0 = time.perf_counter()
            j.commit_round(r, entry)
            times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    with Journal(path, readonly=True) as j:
        rec = j.recover()
    recover_ms = (time.perf_counter() - t0) * 1e3
    assert rec.next_round == rounds
    return statistics.median(times) * 1e3, recover_ms


def zmq_round_ms(k: int, rounds: int, curve: bool, root: Path) -> float:
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    auth = None
    if curve:
        auth = curve_server(router, load_server_keys(root / "server"), AllowedKeys(root / "server" / "allowed"))
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealers = []
    for d in range(k):
        s = ctx.socket(zmq.DEALER)
        if curve:
            curve_client(s, load_device_keys(root / f"dev{d}", d))
        s.connect(f"tcp://127.0.0.1:{port}")
        dealers.append(s)
    draft, verdict = b"\x01" * 4096, b"\x02" * 64  # 4 token ids + q-hat values; a verdict
    times = []
    for r in range(rounds + 5):
        t0 = time.perf_counter()
        for s in dealers:
            s.send(draft)
        ids = [router.recv_multipart()[0] for _ in dealers]
        for i in ids:
            router.send_multipart([i, verdict])
        for s in dealers:
            s.recv()
        if r >= 5:  # the first rounds include the handshakes
            times.append(time.perf_counter() - t0)
    for s in dealers:
        s.close(linger=0)
    router.close(linger=0)
    if auth is not None:
        auth.stop()
    ctx.term()
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--devices", type=int, nargs="+", default=[8, 32])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        root = Path(tmp)
        print("journal: median ms per commit_round, recover() ms for the whole journal")
        print(f"{'K':>4} {'FULL ms':>9} {'NORMAL ms':>10} {'FULL/NORMAL':>12} {'recover ms':>11}")
        for k in args.devices:
            full, rec_ms = journal_ms(k, args.rounds, "FULL", root)
            normal, _ = journal_ms(k, args.rounds, "NORMAL", root)
            print(f"{k:>4} {full:>9.3f} {normal:>10.3f} {full / normal:>12.2f} {rec_ms:>11.2f}")
        create_server_keys(root / "server")
        for d in range(max(args.devices)):
            create_device_keys(root / f"dev{d}", d, allow=root / "server")
        print("\nCurveZMQ: median ms per round (K drafts of 4 KiB up, K verdicts down, 127.0.0.1)")
        print(f"{'K':>4} {'plain ms':>9} {'curve ms':>9} {'curve/plain':>12}")
        for k in args.devices:
            plain = zmq_round_ms(k, args.rounds, False, root)
            cur = zmq_round_ms(k, args.rounds, True, root)
            print(f"{k:>4} {plain:>9.3f} {cur:>9.3f} {cur / plain:>12.2f}")


if __name__ == "__main__":
    main()
