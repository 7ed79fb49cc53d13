"""What the issue-12 server features cost per round, how fast a crashed server comes back, how its
memory grows over long runs, and how many devices one server holds.

Layout: unless said otherwise, the server is a child process of this script (an `EdgeServer` with
the synthetic order-2 Markov target of `multispin.models.synthetic`, V = 64, compute ~µs, so the
round wall time is almost all framework), and the K devices (`DeviceClient` with the Markov
draft) are processes forked from this script (tables 1, 2, 4; `--devices-as thread` for threads)
or threads of this script (tables 3, 5; threads of one process contend for its GIL, which slows
the rounds at K >= 32 about 2x), γ = 4, mixed UL/DL, over 127.0.0.1. The server being its own
process keeps its CPU time and memory apart from the devices'. Round times come from the server's
`RoundEvent.round_wall_s` (PLAN out to the last COMMIT out), after WARMUP rounds; the variants of
a comparison run interleaved and mirrored (A B, B A, A B, ...), so a drift in the host's load hits
both alike. The machine may have fewer cores than devices: everything here is time-sliced, and on
a shared host the round-to-round noise is several ms, more than the journal or CURVE costs: read
the directly timed commit and the CPU columns next to the wall-time differences. The load
average the script prints counts its own runnable processes and threads (K of them).

Table 1, journal (`--sections journal`): the same run without and with `journal=` (SQLite, WAL,
synchronous=FULL: one fsync per round), Markov at K = 8 and 32 and the tiny pair (2-layer Qwen2)
at K = 8: mean round wall time, the difference in ms and as % of the round (median of the paired
per-repeat differences, with their half-spread); and `Journal.commit_round` timed inside the
server (the method wrapped; it is on the round's critical path, before the COMMITs): ms per
commit, mean and p90, and as % of the journal-less round.
The journal is written under --journal-dir (default: the current folder; its disk decides).

Table 2, encryption (`--sections keys`): CurveZMQ with per-device keys (`keys=`) vs the plaintext
shared-secret mode, no journal, Markov at K = 8 and 32: mean round wall time, difference in ms
and %, the server process's CPU ms per round (zmq's I/O threads, where CURVE runs, included) and
the devices' CPU ms per round (all K together).

Table 3, recovery (`--sections recovery`): `python -m multispin serve --pair tiny --keys ...
--journal J --log L --devices 8` as a subprocess, 8 devices as threads here (build_device_client,
server_timeout_s = 60, reconnects = 20). After --kill-after round lines in L the server gets
SIGKILL and the same command is started again on the same journal. Reported: spawn -> the
restart's `start` log line (interpreter, imports, model build, journal recovery, bind), `start`
-> its first round line (the devices noticing the loss and reconnecting, the resumed handshakes),
the total, the downtime from the kill, the round killed at and the restart's next_round, the
`recovered` list, and whether every device's final tokens equal an uninterrupted in-process run
(the test suite's reference: `run_rounds` on the same pair, seed and prompts). The cold first
start is shown for comparison.

Table 4, memory (`--sections memory`): server RSS (VmRSS after gc.collect(), in the server
process) at round WARMUP and after each of --memory-rounds (default 200 and 1,000: 2,000 at
K = 64 takes ~3 min per variant on 2 cores; pass --memory-rounds 200 2000), K = 64 Markov devices that never
finish (rounds=, max_new_tokens above what the run can reach), history=False (the default:
rounds stream to the log, here none) vs history=True; growth per 1,000 rounds and per committed
token. Even history=False keeps every committed token (the server's record of each text, and the
Markov target's per-sequence context), so some growth per round is inherent.

Table 5, capacity (`--sections capacity`): encrypted, no journal, Markov, K = 8, 32, 64, 128
device threads: rounds/s and committed tokens/s, mean and p90 round ms, and the CPU ms per round
of the server process and of the devices' process. With 2 cores the devices compete with the
server for the CPU: 1000 / (server CPU ms per round) is what one server core alone would hold.

The default invocation takes about 9 minutes on 2 cores (tables 1+2 ~4 min, 3 ~1, 4 ~3, 5 ~1).

Run: .venv/bin/python benchmarks/bench_server.py
       [--sections journal keys recovery memory capacity] [--rounds 60] [--tiny-rounds 30]
       [--repeats 5] [--journal-devices 8 32] [--tiny-devices 8] [--key-devices 8 32]
       [--recovery-devices 8] [--recovery-repeats 2] [--kill-after 5] [--memory-devices 64]
       [--memory-rounds 200 1000] [--capacity-devices 8 32 64 128] [--capacity-rounds 100]
       [--devices-as fork|thread] [--capacity-devices-as thread|fork] [--journal-dir DIR]
       (`--help` lists every flag with its default)
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import multiprocessing
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from multispin.models.base import LoadedPair
from multispin.models.prompts import default_prompts, encode_prompt
from multispin.models.synthetic import MarkovBatchedLM, MarkovSequenceLM, make_tables
from multispin.runtime.net.device import DeviceClient, build_device_client
from multispin.runtime.net.launcher import free_port
from multispin.runtime.net.server import EdgeServer
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.round import roles
from multispin.runtime.round.engine import PolicyPair
from multispin.runtime.round.local import RandomMode, UniformDraftLength, fixed_policy, run_rounds
from multispin.runtime.security.keys import create_keyring
from multispin.runtime.store.journal import Journal
from multispin.speculative.codecs import make_codec
from multispin.speculative.warp import SamplingParams

HERE = Path(__file__).resolve()
VOCAB = 64
GAMMA = 4
SEED = 0
WARMUP = 3
SECRET = "bench-server-secret-1234"


# ------------------------------------------------------------------------------------------------
# measurements that need no model
# ------------------------------------------------------------------------------------------------


def rss_mb() -> float:
    """This process's resident set, MiB (VmRSS)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # peak, not current: only where /proc is missing


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def mean(xs) -> float:
    xs = list(xs)
    return statistics.fmean(xs) if xs else float("nan")


def p90(xs) -> float:
    xs = sorted(xs)
    return xs[int(0.9 * (len(xs) - 1))] if xs else float("nan")


# ------------------------------------------------------------------------------------------------
# the server child process
# ------------------------------------------------------------------------------------------------


def child_main(spec_path: str) -> None:
    """Run one EdgeServer as described by the JSON spec; write what it measured to spec['out']."""
    spec = json.loads(Path(spec_path).read_text())
    if spec["pair"] == "tiny":
        import torch

        torch.set_num_threads(1)
        from multispin.models.tiny import load_tiny_pair

        pair, target_lm = load_tiny_pair(), None
    else:
        target, _ = make_tables(VOCAB, seed=0, scale=1.5, draft_noise=1.0)
        pair = LoadedPair(name="markov", tokenizer=None, target=None, drafts={}, vocab_size=VOCAB)
        target_lm = MarkovBatchedLM(target)
    k = spec["k"]
    config = ServerConfig.make(
        port=spec["port"],
        expected_devices=k,
        max_devices=k,
        rounds=spec["rounds"],
        max_new_tokens=spec["max_new"],
        seed=SEED,
        round_timeout_s=120,
        join_timeout_s=120,
        history=spec["history"],
        max_pending=max(64, k),
    )
    rec: dict = {
        "wall": [],
        "compute": [],
        "tokens": [],
        "active": [],
        "t_end": [],
        "commit": [],
        "rss": {},
        "held": {},
    }
    rss_at = set(spec["rss_at"])
    held = [0]
    cpu0 = [0.0, 0.0]

    def on_round(ev) -> None:
        gained = sum(r.tokens_gained for r in ev.records.values())
        held[0] += gained
        if ev.round >= WARMUP:
            rec["wall"].append(ev.round_wall_s)
            rec["compute"].append(ev.model_compute_s)
            rec["tokens"].append(gained)
            rec["active"].append(len(ev.gammas))
        rec["t_end"].append(time.perf_counter())
        if ev.round == WARMUP - 1:  # the clock for rounds/s and CPU starts after the warm-up rounds
            cpu0[0], cpu0[1] = time.process_time(), time.perf_counter()
        if ev.round + 1 in rss_at:
            gc.collect()
            rec["rss"][ev.round + 1] = rss_mb()
            rec["held"][ev.round + 1] = held[0]

    keys = {"keys": spec["keys"]} if spec["keys"] else {}
    server = EdgeServer(
        config,
        pair,
        None if spec["keys"] else SECRET,
        journal=spec["journal"],
        policy=fixed_policy(GAMMA, seed=SEED),
        on_round=on_round,
        target_lm=target_lm,
        **keys,
    )
    if server.journal is not None:
        inner = server.journal.commit_round

        def timed_commit(*a, **kw):
            t0 = time.perf_counter()
            try:
                return inner(*a, **kw)
            finally:
                rec["commit"].append(time.perf_counter() - t0)

        server.journal.commit_round = timed_commit  # type: ignore[method-assign]
    summary = server.run()
    cpu_s, span_s = time.process_time() - cpu0[0], rec["t_end"][-1] - cpu0[1] if rec["t_end"] else 0.0
    rec["commit"] = rec["commit"][WARMUP:]
    rec.update(
        rounds=summary.rounds,
        stop=summary.stop_reason,
        cpu_s=cpu_s,
        span_s=span_s,
        measured=len(rec["wall"]),
        digests_ok=all(r.digest_match is not False for r in summary.devices.values()),
    )
    del rec["t_end"]
    Path(spec["out"]).write_text(json.dumps(rec))


class Bench:
    """Shared state: a temp folder, one keyring for the largest K, the Markov draft table."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-server-"))
        self.jdir = Path(tempfile.mkdtemp(prefix="bench-server-journal-", dir=args.journal_dir))
        kmax = max(
            [8]
            + args.journal_devices
            + args.tiny_devices
            + args.key_devices
            + args.recovery_devices
            + args.memory_devices
            + args.capacity_devices
        )
        self.server_keys, self.device_keys = create_keyring(self.tmp / "keys", range(kmax))
        _, self.draft_table = make_tables(VOCAB, seed=0, scale=1.5, draft_noise=1.0)
        self._n = 0
        self._tiny = None

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        shutil.rmtree(self.jdir, ignore_errors=True)

    @property
    def tiny(self):
        if self._tiny is None:
            from multispin.models.tiny import load_tiny_pair

            self._tiny = load_tiny_pair()
        return self._tiny

    def run(
        self,
        k: int,
        rounds: int,
        *,
        pair: str = "markov",
        secure: bool = True,
        journal: bool = False,
        history: bool = False,
        rss_at=(),
        runner: str | None = None,
        timeout_s: float = 900,
    ) -> dict:
        """One server child + K device threads; returns the child's measurements plus this
        (device) process's CPU seconds over the same run."""
        self._n += 1
        port = free_port()
        endpoint = f"tcp://127.0.0.1:{port}"
        jpath = self.jdir / f"journal-{self._n}.sqlite" if journal else None
        spec = dict(
            pair=pair,
            k=k,
            port=port,
            rounds=rounds + WARMUP,
            max_new=(rounds + WARMUP) * (GAMMA + 1) + 64,
            keys=str(self.server_keys) if secure else None,
            journal=str(jpath) if jpath else None,
            history=history,
            rss_at=sorted(rss_at),
            out=str(self.tmp / f"out-{self._n}.json"),
        )
        spec_path = self.tmp / f"spec-{self._n}.json"
        spec_path.write_text(json.dumps(spec))
        clients = []
        for d in range(k):
            kw = dict(keys=self.device_keys[d]) if secure else {}
            secret = None if secure else SECRET
            if pair == "tiny":
                prompt = default_prompts(k, SEED)[d]
                clients.append(
                    build_device_client(
                        endpoint, d, secret, self.tiny, None, prompt, server_timeout_s=120, reconnects=5, **kw
                    )
                )
            else:
                clients.append(
                    DeviceClient(
                        endpoint,
                        d,
                        secret,
                        MarkovSequenceLM(self.draft_table),
                        [1, 2, 3 + d % 7],
                        server_timeout_s=120,
                        reconnects=5,
                        **kw,
                    )
                )
        env = dict(os.environ)
        env.pop("MULTISPIN_SECRET", None)
        proc = subprocess.Popen(
            [sys.executable, str(HERE), "--child", str(spec_path)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(self.tmp / f"err-{self._n}.txt", "w"),
        )
        outcomes: dict[int, object] = {}
        runner = runner or self.args.devices_as
        if runner == "fork":
            ctx = multiprocessing.get_context("fork")
            cpu_files = [self.tmp / f"cpu-{self._n}-{d}.txt" for d in range(k)]
            children = [
                ctx.Process(target=_forked_device, args=(c, str(f)), daemon=True) for c, f in zip(clients, cpu_files)
            ]
            for c in children:  # this process has no other thread now: forking is safe
                c.start()
        else:

            def body(c) -> None:
                try:
                    outcomes[c.device_id] = c.run()
                except BaseException as exc:  # reported below
                    outcomes[c.device_id] = exc

            cpu0 = time.process_time()
            threads = [threading.Thread(target=body, args=(c,), daemon=True) for c in clients]
            for t in threads:
                t.start()
        try:
            rc = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise RuntimeError(f"server child ran past {timeout_s} s (K={k}, {pair})") from None
        if runner == "fork":
            for d, c in enumerate(children):
                c.join(60)
                outcomes[d] = None if c.exitcode == 0 else RuntimeError(f"exit code {c.exitcode}")
            dev_cpu = sum(float(f.read_text()) for f in cpu_files if f.exists())
        else:
            for t in threads:
                t.join(60)
            dev_cpu = time.process_time() - cpu0
        if rc != 0:
            err = (self.tmp / f"err-{self._n}.txt").read_text()[-2000:]
            raise RuntimeError(f"server child failed (rc {rc}): {err}")
        out = json.loads(Path(spec["out"]).read_text())
        bad = {d: o for d, o in outcomes.items() if isinstance(o, BaseException)}
        if bad or len(outcomes) != k or not out["digests_ok"]:
            raise RuntimeError(f"K={k}: device errors {bad}, {len(outcomes)} outcomes, digests ok {out['digests_ok']}")
        out["dev_cpu_s"] = dev_cpu
        if jpath is not None:
            out["journal_kib"] = sum(p.stat().st_size for p in self.jdir.glob(jpath.name + "*")) / 1024
            for p in self.jdir.glob(jpath.name + "*"):
                p.unlink()
        return out


def _forked_device(client, cpu_path: str) -> None:
    """Body of a forked device process: run, write its CPU seconds, leave without touching the
    parent's state."""
    code = 3
    try:
        client.run()
        code = 0
    except BaseException:
        code = 2
    finally:
        try:
            Path(cpu_path).write_text(repr(time.process_time()))
        finally:
            os._exit(code)


def interleaved(bench: Bench, variants: dict[str, dict], repeats: int) -> dict[str, list[dict]]:
    """Run every variant `repeats` times, interleaved and mirrored (A B C, C B A, A B C, ...) so that a
    drift of the host's load hits every variant alike."""
    out: dict[str, list[dict]] = {name: [] for name in variants}
    names = list(variants)
    for rep in range(repeats):
        for name in names if rep % 2 == 0 else names[::-1]:
            out[name].append(bench.run(**variants[name]))
    return out


def pooled(runs: list[dict], field: str = "wall") -> list[float]:
    return [x for r in runs for x in r[field]]


def cpu_ms_per_round(runs: list[dict]) -> float:
    return 1e3 * sum(r["cpu_s"] for r in runs) / sum(r["measured"] for r in runs)


# ------------------------------------------------------------------------------------------------
# sections 1 and 2: journal and encryption
# ------------------------------------------------------------------------------------------------


def journal_and_keys(bench: Bench, sections: set[str]) -> None:
    a = bench.args
    cases: dict[tuple, dict[str, dict]] = {}
    if "journal" in sections:
        for k in a.journal_devices:
            cases[("markov", k)] = {
                "base": dict(k=k, rounds=a.rounds),
                "journal": dict(k=k, rounds=a.rounds, journal=True),
            }
        for k in a.tiny_devices:
            cases[("tiny", k)] = {
                "base": dict(k=k, rounds=a.tiny_rounds, pair="tiny"),
                "journal": dict(k=k, rounds=a.tiny_rounds, pair="tiny", journal=True),
            }
    if "keys" in sections:
        for k in a.key_devices:
            case = cases.setdefault(("markov", k), {"base": dict(k=k, rounds=a.rounds)})
            case["insecure"] = dict(k=k, rounds=a.rounds, secure=False)
    results = {}
    for (pair, k), variants in cases.items():
        t0 = time.perf_counter()
        results[(pair, k)] = interleaved(bench, variants, a.repeats)
        print(
            f"  [{pair} K={k}: {len(variants)} variants x {a.repeats} in {time.perf_counter() - t0:.1f} s, "
            f"load {loadavg()}]",
            flush=True,
        )

    def row_delta(base: list[dict], other: list[dict]) -> tuple[float, float, float, float, float, str]:
        """Pooled means of A and B; Δ = the median over repeats of (B's run mean - A's run mean), in
        ms and % of A; the half-spread of those per-repeat Δs; the per-repeat Δs."""
        b, o = mean(pooled(base)) * 1e3, mean(pooled(other)) * 1e3
        per_rep = [1e3 * (mean(x["wall"]) - mean(y["wall"])) for x, y in zip(other, base)]
        d = statistics.median(per_rep)
        spread = (max(per_rep) - min(per_rep)) / 2 if len(per_rep) > 1 else float("nan")
        return b, o, d, 100 * d / b, spread, " ".join(f"{x:+.1f}" for x in per_rep)

    if "journal" in sections:
        print("\nTable 1. Journal cost per round: the same run without and with journal= (encrypted both)")
        head = (
            f"{'pair':>6} {'K':>3} {'rounds':>6} {'no journal ms':>13} {'journal ms':>10} {'Δ ms':>7} {'Δ %':>6} "
            f"{'±':>5} {'commit ms':>9} {'commit p90':>10} {'commit %':>8} {'KiB':>5}  Δ per repeat (ms)"
        )
        print(head)
        print("-" * len(head))
        for (pair, k), res in results.items():
            if "journal" not in res:
                continue
            b, o, d, pct, spread, reps = row_delta(res["base"], res["journal"])
            commits = pooled(res["journal"], "commit")
            c = mean(commits) * 1e3
            n = sum(r["measured"] for r in res["journal"])
            print(
                f"{pair:>6} {k:>3} {n:>6} {b:>13.2f} {o:>10.2f} {d:>+7.2f} {pct:>+6.1f} {spread:>5.1f} {c:>9.3f} "
                f"{p90(commits) * 1e3:>10.3f} {100 * c / b:>8.1f} "
                f"{mean(r['journal_kib'] for r in res['journal']):>5.0f}  {reps}"
            )
        print(
            "(round ms = mean round wall time pooled over all runs; rounds = measured rounds per variant; "
            "Δ = median "
            "over repeats of the paired difference of run means, ± = half its spread; commit = Journal.commit_round "
            "timed in the server (SQLite transaction + fsync), mean and p90, and its mean as % of the journal-less "
            "round; KiB = journal + WAL after one run)"
        )
    if "keys" in sections:
        print("\nTable 2. Encryption cost per round: CurveZMQ per-device keys vs plaintext shared secret (no journal)")
        head = (
            f"{'pair':>6} {'K':>3} {'rounds':>6} {'plaintext ms':>12} {'curve ms':>9} {'Δ ms':>7} {'Δ %':>6} "
            f"{'±':>5} "
            f"{'srv CPU plain':>13} {'srv CPU curve':>13} {'dev CPU plain':>13} {'dev CPU curve':>13}  "
            f"Δ per repeat (ms)"
        )
        print(head)
        print("-" * len(head))
        for (pair, k), res in results.items():
            if "insecure" not in res:
                continue
            b, o, d, pct, spread, reps = row_delta(res["insecure"], res["base"])
            n = sum(r["measured"] for r in res["insecure"])

            def dev_cpu(runs: list[dict]) -> float:
                return 1e3 * sum(r["dev_cpu_s"] for r in runs) / sum(r["rounds"] for r in runs)

            print(
                f"{pair:>6} {k:>3} {n:>6} {b:>12.2f} {o:>9.2f} {d:>+7.2f} {pct:>+6.1f} {spread:>5.1f} "
                f"{cpu_ms_per_round(res['insecure']):>13.2f} {cpu_ms_per_round(res['base']):>13.2f} "
                f"{dev_cpu(res['insecure']):>13.2f} {dev_cpu(res['base']):>13.2f}  {reps}"
            )
        print(
            "(srv CPU = the server process's CPU ms per measured round, zmq I/O threads (where CURVE runs) "
            "included; dev CPU = all K devices' CPU ms per round, whole run incl. the handshakes; Δ and ± as "
            "in table 1)"
        )


# ------------------------------------------------------------------------------------------------
# section 3: recovery after a server crash
# ------------------------------------------------------------------------------------------------


def _log_lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


def _watch(proc: subprocess.Popen, log: Path, t_spawn: float, want_rounds: int, timeout_s: float) -> dict:
    """Poll the server's JSONL log: when its `start` line and its first (and want_rounds-th) round
    line appear, in seconds after t_spawn."""
    got: dict = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = _log_lines(log)
        now = time.monotonic() - t_spawn
        if "start" not in got and lines and '"event":"start"' in lines[0]:
            got["start"] = now
            got["start_line"] = json.loads(lines[0])
        rounds = sum(1 for line in lines if '"event":"round"' in line)
        if rounds >= 1 and "first_round" not in got:
            got["first_round"] = now
            got["first_round_wall"] = next(json.loads(x)["round_wall_s"] for x in lines if '"event":"round"' in x)
        if rounds >= want_rounds:
            got["rounds"] = rounds
            return got
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited (rc {proc.returncode}) after {rounds} round(s)")
        time.sleep(0.005)
    raise RuntimeError(f"no {want_rounds} round lines in {log} within {timeout_s} s")


def recovery(bench: Bench) -> None:
    import torch

    from multispin.models.hf import HFBatchedLM, HFSequenceLM

    a = bench.args
    pair = bench.tiny
    torch.set_num_threads(1)
    logging.getLogger("multispin.device").setLevel(logging.ERROR)  # "lost the connection; reconnecting" x K
    # what the restart's spawn -> start is made of: a fresh interpreter's imports, then the model build
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import time; t0 = time.perf_counter(); import multispin.cli, "
            "multispin.commands.serve, multispin.models.tiny as m; t1 = time.perf_counter(); "
            "m.load_tiny_pair(); print(t1 - t0, time.perf_counter() - t1)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    import_s, build_s = map(float, probe.stdout.split())
    print(
        f"\nTable 3. Recovery after SIGKILL of `multispin serve --pair tiny` (journal on {a.journal_dir}), "
        f"devices = threads, max_new_tokens {a.recovery_max_new}, γ = {GAMMA}"
    )
    head = (
        f"{'K':>3} {'try':>3} {'phase':>7} {'spawn→start s':>13} {'start→round s':>13} {'spawn→round s':>13} "
        f"{'reconnect s':>11} {'kill→round s':>12} {'killed at':>9} {'next_round':>10} {'recovered':>9} "
        f"{'texts':>9} {'recover() ms':>12}"
    )
    print(head)
    print("-" * len(head))
    for k in a.recovery_devices:
        prompts = default_prompts(k, SEED)
        codec = make_codec("dense-fp32")
        ref_server = roles.VerifierServer(
            HFBatchedLM(pair.target, pair.vocab_size), SamplingParams(), codec, codec, SEED
        )
        ref_devs = {
            d: roles.DraftDevice(
                d,
                HFSequenceLM(pair.drafts[pair.default_draft], pair.vocab_size),
                SamplingParams(),
                codec,
                codec,
                SEED,
                encode_prompt(pair, prompts[d]),
            )
            for d in range(k)
        }
        run_rounds(
            ref_server,
            ref_devs,
            PolicyPair(UniformDraftLength(GAMMA), RandomMode(SEED)),
            a.recovery_max_new,
            pair.eos_token_ids,
        )
        expected = {d: dev.generated for d, dev in ref_devs.items()}
        for attempt in range(a.recovery_repeats):
            root = bench.tmp / f"recovery-{k}-{attempt}"
            root.mkdir()
            journal = bench.jdir / f"recovery-{k}-{attempt}.sqlite"
            port = free_port()

            def cmd(log: Path) -> list[str]:
                return [
                    sys.executable,
                    "-m",
                    "multispin",
                    "serve",
                    "--pair",
                    "tiny",
                    "--port",
                    str(port),
                    "--devices",
                    str(k),
                    "--max-new-tokens",
                    str(a.recovery_max_new),
                    "--draft-len",
                    str(GAMMA),
                    "--seed",
                    str(SEED),
                    "--threads",
                    "1",
                    "--keys",
                    str(bench.server_keys),
                    "--journal",
                    str(journal),
                    "--log",
                    str(log),
                    "--round-timeout",
                    "30",
                    "--join-timeout",
                    "120",
                ]

            clients = [
                build_device_client(
                    f"tcp://127.0.0.1:{port}",
                    d,
                    None,
                    pair,
                    None,
                    prompts[d],
                    keys=bench.device_keys[d],
                    server_timeout_s=60,
                    reconnects=20,
                )
                for d in range(k)
            ]
            outcomes: dict = {}

            def body(c) -> None:
                try:
                    outcomes[c.device_id] = c.run()
                except BaseException as exc:
                    outcomes[c.device_id] = exc

            env = dict(os.environ)
            env.pop("MULTISPIN_SECRET", None)
            procs = []
            try:
                t_spawn = time.monotonic()
                first = subprocess.Popen(
                    cmd(root / "a.jsonl"), env=env, stdout=subprocess.DEVNULL, stderr=open(root / "a.err", "w")
                )
                procs.append(first)
                threads = [threading.Thread(target=body, args=(c,), daemon=True) for c in clients]
                for t in threads:
                    t.start()
                cold = _watch(first, root / "a.jsonl", t_spawn, a.kill_after, 300)
                first.send_signal(signal.SIGKILL)
                t_kill = time.monotonic()
                first.wait(30)
                killed_at = len([x for x in _log_lines(root / "a.jsonl") if '"event":"round"' in x])
                t_spawn2 = time.monotonic()
                second = subprocess.Popen(
                    cmd(root / "b.jsonl"), env=env, stdout=subprocess.PIPE, stderr=open(root / "b.err", "w"), text=True
                )
                procs.append(second)
                warm = _watch(second, root / "b.jsonl", t_spawn2, 1, 300)
                second.communicate(timeout=600)
                for t in threads:
                    t.join(120)
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
            t0 = time.perf_counter()
            with Journal(journal, readonly=True) as j:
                j.recover()
            recover_ms = (time.perf_counter() - t0) * 1e3
            start = warm["start_line"]
            same = sum(
                1
                for d in range(k)
                if not isinstance(outcomes.get(d), BaseException)
                and outcomes.get(d) is not None
                and outcomes[d].finished
                and outcomes[d].generated == expected[d]
            )
            rec_ok = "all" if start.get("recovered") == list(range(k)) else str(len(start.get("recovered") or []))
            reconnect_cold = cold["first_round"] - cold["start"] - cold["first_round_wall"]
            print(
                f"{k:>3} {attempt + 1:>3} {'cold':>7} {cold['start']:>13.2f} "
                f"{cold['first_round'] - cold['start']:>13.2f} {cold['first_round']:>13.2f} {reconnect_cold:>11.2f}"
            )
            print(
                f"{k:>3} {attempt + 1:>3} {'restart':>7} {warm['start']:>13.2f} "
                f"{warm['first_round'] - warm['start']:>13.2f} {warm['first_round']:>13.2f} "
                f"{warm['first_round'] - warm['start'] - warm['first_round_wall']:>11.2f} "
                f"{warm['first_round'] + (t_spawn2 - t_kill):>12.2f} {killed_at:>9} {start.get('next_round')!s:>10} "
                f"{rec_ok:>9} {f'{same}/{k} same':>9} {recover_ms:>12.1f}",
                flush=True,
            )
            for p in bench.jdir.glob(journal.name + "*"):
                p.unlink()
    print(
        "(cold = the first start, devices already waiting; restart = the same command on the journal after "
        "SIGKILL; reconnect = start→round less that round's own wall time; texts = devices whose final tokens "
        "equal the uninterrupted in-process run; recover() = "
        "Journal.recover() of the finished run's journal, read-only, timed here)"
    )
    print(
        f"(spawn→start, for scale: a fresh interpreter importing the serve command and the tiny pair takes "
        f"{import_s:.2f} s, load_tiny_pair() {build_s:.2f} s; the rest is the interpreter itself, "
        f"EdgeServer (journal recovery) and the bind)"
    )


# ------------------------------------------------------------------------------------------------
# section 4: memory over long runs
# ------------------------------------------------------------------------------------------------


def memory(bench: Bench) -> None:
    a = bench.args
    marks = sorted(set([WARMUP] + a.memory_rounds))
    print(
        "\nTable 4. Server RSS (MiB, after gc.collect()) over long runs, Markov, encrypted, no journal, "
        "devices never finish"
    )
    cols = " ".join(f"{'@' + str(m):>8}" for m in marks)
    head = f"{'history':>8} {'K':>3} {cols} {'MiB/1k rounds':>13} {'tokens held':>11} {'B/token':>8} {'run s':>6}"
    print(head)
    print("-" * len(head))
    for k in a.memory_devices:
        for history in (False, True):
            t0 = time.perf_counter()
            r = bench.run(k, max(marks) - WARMUP, history=history, rss_at=marks, timeout_s=3600)
            wall = time.perf_counter() - t0
            rss = {int(m): v for m, v in r["rss"].items()}
            held = {int(m): v for m, v in r["held"].items()}
            lo, hi = marks[1] if len(marks) > 2 else marks[0], marks[-1]  # growth from the first mark past warm-up
            growth = (rss[hi] - rss[lo]) / (hi - lo) * 1000
            per_token = (rss[hi] - rss[lo]) * 2**20 / max(1, held[hi] - held[lo])
            vals = " ".join(f"{rss[m]:>8.1f}" for m in marks)
            print(
                f"{str(history):>8} {k:>3} {vals} {growth:>13.2f} {held[hi]:>11} {per_token:>8.1f} {wall:>6.0f}",
                flush=True,
            )
    print(
        f"(growth and B/token between rounds {marks[1] if len(marks) > 2 else marks[0]} and {marks[-1]}; "
        "tokens held = tokens committed over all devices)"
    )


# ------------------------------------------------------------------------------------------------
# section 5: capacity
# ------------------------------------------------------------------------------------------------


def capacity(bench: Bench) -> None:
    a = bench.args
    print(f"\nTable 5. Devices one server holds: encrypted, no journal, Markov, devices = {a.capacity_devices_as}")
    head = (
        f"{'K':>4} {'rounds':>6} {'round ms':>8} {'p90 ms':>7} {'rounds/s':>8} {'tokens/s':>8} "
        f"{'tok/round':>9} {'srv CPU ms/rnd':>14} {'dev CPU ms/rnd':>14} {'srv-bound rounds/s':>18}"
    )
    print(head)
    print("-" * len(head))
    for k in a.capacity_devices:
        r = bench.run(k, a.capacity_rounds, runner=a.capacity_devices_as)
        n = r["measured"]
        rps = n / r["span_s"]
        tps = sum(r["tokens"]) / r["span_s"]
        srv = 1e3 * r["cpu_s"] / n
        print(
            f"{k:>4} {n:>6} {mean(r['wall']) * 1e3:>8.2f} {p90(r['wall']) * 1e3:>7.2f} {rps:>8.1f} {tps:>8.0f} "
            f"{mean(r['tokens']):>9.1f} {srv:>14.2f} {1e3 * r['dev_cpu_s'] / r['rounds']:>14.2f} {1e3 / srv:>18.1f}",
            flush=True,
        )
    print(
        "(rounds/s from the end of the warm-up to the last round; srv CPU = the server process over the same "
        "rounds; dev CPU = all K devices together, whole run incl. joins and warm-up, per round; "
        "srv-bound = 1000 / srv CPU ms: the server alone on one core)"
    )


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child_main(sys.argv[2])
        return
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    ap.add_argument(
        "--sections",
        nargs="+",
        default=["journal", "keys", "recovery", "memory", "capacity"],
        choices=["journal", "keys", "recovery", "memory", "capacity"],
    )
    ap.add_argument("--rounds", type=int, default=60, help="measured rounds per Markov run (tables 1, 2)")
    ap.add_argument("--tiny-rounds", type=int, default=30, help="measured rounds per tiny-pair run (table 1)")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved repeats of each variant (tables 1, 2)")
    ap.add_argument("--journal-devices", type=int, nargs="*", default=[8, 32])
    ap.add_argument("--tiny-devices", type=int, nargs="*", default=[8])
    ap.add_argument("--key-devices", type=int, nargs="*", default=[8, 32])
    ap.add_argument("--recovery-devices", type=int, nargs="*", default=[8])
    ap.add_argument("--recovery-repeats", type=int, default=2)
    ap.add_argument("--recovery-max-new", type=int, default=48, help="tokens per device in table 3")
    ap.add_argument("--kill-after", type=int, default=5, help="round lines before the SIGKILL (table 3)")
    ap.add_argument("--memory-devices", type=int, nargs="*", default=[64])
    ap.add_argument(
        "--memory-rounds",
        type=int,
        nargs="+",
        default=[200, 1000],
        help="rounds after which the server's RSS is read (table 4)",
    )
    ap.add_argument("--capacity-devices", type=int, nargs="*", default=[8, 32, 64, 128])
    ap.add_argument("--capacity-rounds", type=int, default=100)
    ap.add_argument(
        "--devices-as",
        choices=["thread", "fork"],
        default="fork",
        help="the devices of tables 1, 2, 4: forked processes or threads of this process",
    )
    ap.add_argument(
        "--capacity-devices-as", choices=["thread", "fork"], default="thread", help="the devices of table 5"
    )
    ap.add_argument("--journal-dir", default=".", help="where journals are written (its disk decides the fsync)")
    args = ap.parse_args()
    sections = set(args.sections)
    import torch  # now, once: the devices' first warp() would import it in every forked process

    torch.set_num_threads(1)
    print(
        f"bench_server: {os.cpu_count()} CPU cores, load average {loadavg()} at start; server = child process; "
        f"devices = {args.devices_as} (tables 1, 2, 4), thread (table 3), {args.capacity_devices_as} (table 5); "
        f"Markov V = {VOCAB}, γ = {GAMMA}, mixed UL/DL, {WARMUP} warm-up rounds",
        flush=True,
    )
    t0 = time.perf_counter()
    bench = Bench(args)
    try:
        if sections & {"journal", "keys"}:
            journal_and_keys(bench, sections)
        if "recovery" in sections:
            recovery(bench)
        if "memory" in sections:
            memory(bench)
        if "capacity" in sections:
            capacity(bench)
    finally:
        bench.close()
    print(f"\n({time.perf_counter() - t0:.0f} s; load average at the end {loadavg()})")


if __name__ == "__main__":
    main()
