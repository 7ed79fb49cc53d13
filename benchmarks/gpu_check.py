"""The GPU check: what the project does on one CUDA GPU, in one run, into one JSON.

Stages (each prints a progress line to stderr; the JSON gets one section per stage):

1. ``environment``: torch, transformers, the GPU's name and memory.
2. ``verify_grid``: the target's batched verify pass (`HFBatchedLM.extend_many`, γ + 1 new tokens
   per sequence over a `--past`-token KV cache each) for batch 1..32 × γ 1..8, median ms, in
   bfloat16 on CUDA (float32 on the CPU), as ``serve --device cuda`` places the target.
3. ``engine``: the server's engine math of `bench_engine.py` (K = 20, γ = 8, V = 151,665), its
   verify reading the logits on the device.
4. ``generate``: `generate` greedy with K devices, on the CPU (float32) and then on the device,
   tokens compared device by device (bfloat16 logits can change a greedy argmax: the JSON says
   how many tokens agree before the first difference, and which devices agree throughout; it
   reports, it does not fail).
5. ``testbed``: the networked testbed with ``clock = wall`` (edge server in this process with
   the target on the device, device processes drafting on the CPU), greedy, CPU run first, texts
   compared the same way.

CPU references run before anything is placed on the GPU: placement moves the loaded models.
``--quick`` shrinks every stage (the CI test runs ``--device cpu --pair tiny --quick``).

Run: benchmarks/gpu_check.sh [--device cuda] [--pair smollm2-135m] [--out gpu_check.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch  # noqa: TID253  (a check of the models on the device)

from multispin.errors import MultispinError
from multispin.experiments.testbed import TestbedConfig, run_testbed
from multispin.models.placement import place_pair, resolve_device
from multispin.models.registry import resolve_pair
from multispin.runtime.round.session import GenerateConfig, generate

HERE = Path(__file__).resolve().parent
START = time.perf_counter()


def progress(msg: str) -> None:
    print(f"[gpu_check {time.perf_counter() - START:6.1f} s] {msg}", file=sys.stderr, flush=True)


def environment(device: str) -> dict:
    import transformers

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": device,
        "torch_threads": torch.get_num_threads(),
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1), cuda=torch.version.cuda)
    return env


def verify_grid(pair, batches: list[int], gammas: list[int], past: int, repeats: int) -> dict:
    """Median ms of one batched verify pass per (batch, γ), the KV caches rolled back after each."""
    from multispin.models.hf import HFBatchedLM

    lm = HFBatchedLM(pair.target, pair.vocab_size)
    rng = np.random.default_rng(0)
    for s in range(max(batches)):
        lm.open(s)
        lm.extend_many({s: rng.integers(0, pair.vocab_size, past).tolist()})
    rows = []
    for b in batches:
        for g in gammas:
            new = {s: rng.integers(0, pair.vocab_size, g + 1).tolist() for s in range(b)}
            times = []
            for i in range(repeats + 1):  # the first pass warms this shape up, untimed
                t0 = time.perf_counter()
                lm.extend_many(new)  # returns numpy logits: the GPU work is done when it returns
                if i:
                    times.append(1000 * (time.perf_counter() - t0))
                for s in range(b):
                    lm.rollback(s, past)
            rows.append({"batch": b, "gamma": g, "ms": statistics.median(times)})
        done = ", ".join(f"{r['ms']:.1f}" for r in rows[-len(gammas) :])
        progress(f"verify grid: batch {b} done ({done} ms for γ = {gammas[0]}..{gammas[-1]})")
    return {"past_tokens": past, "dtype": str(next(pair.target.parameters()).dtype), "rows": rows}


def engine(k: int, gamma: int, vocab: int, device: str) -> dict:
    sys.path.insert(0, str(HERE))
    from bench_engine import engine_round, median_ms  # noqa: PLC0415  (a sibling script, on the path from here)

    steps, _, result, _ = engine_round(np.random.default_rng(0), k, gamma, vocab, device=device)
    ms = {name: median_ms(fn) for name, fn in steps.items()}
    return {
        "k": k,
        "gamma": gamma,
        "vocab": vocab,
        "where": f"verify, rejection rows and UL corrections on {device}; DL decoding on the CPU",
        "steps_ms": ms,
        "total_ms": sum(ms.values()),
        "rejected": int(result.rejected.sum()),
        "accepted": int(result.num_accepted.sum()),
    }


def agreement(ref: dict, got: dict) -> dict:
    """Per device: items (tokens, or a text's characters) equal before the first difference, and
    which devices agree throughout."""
    prefix = {}
    for d, a in ref.items():
        b = got.get(d, [])
        n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        prefix[d] = n
    equal = [d for d in ref if ref[d] == got.get(d)]
    return {
        "equal_devices": equal,
        "all_equal": len(equal) == len(ref),
        "agreeing_prefix": {str(d): n for d, n in prefix.items()},
        "length": {str(d): len(t) for d, t in ref.items()},
    }


def run_generate(pair, devices: int, max_new: int, gamma: int) -> tuple[dict[int, list[int]], float]:

    config = GenerateConfig(
        pair=pair.name, devices=devices, draft_len=gamma, max_new_tokens=max_new, temperature=0.0, seed=0
    )
    res = generate(config, pair=pair)
    return {d.device_id: d.tokens for d in res.devices}, res.wall_s


def run_testbed_wall(pair, devices: int, max_new: int) -> tuple[dict[int, str], dict]:

    config = TestbedConfig.make(
        pair=pair.name, devices=devices, max_new_tokens=max_new, clock="wall", temperature=0.0, seed=0
    )
    res = run_testbed(config, pair=pair)
    s = res.summary
    return {int(d): t for d, t in res.texts.items()}, {
        "wall_time_s": s.wall_time_s,
        "goodput_tokens_per_s": s.goodput_tokens_per_s,
        "rounds": s.figures.rounds,
        "tokens": s.figures.tokens,
        "mean_t_comp_s": s.figures.mean_t_comp_s,
        "mean_t_comm_s": s.figures.mean_t_comm_s,
        "consistent": s.integrity.consistent,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cpu or auto")
    parser.add_argument("--pair", default="smollm2-135m")
    parser.add_argument("--out", default="gpu_check.json")
    parser.add_argument("--quick", action="store_true", help="tiny settings (the CPU test in CI)")
    args = parser.parse_args(argv)

    try:
        device = resolve_device(args.device)
        progress(f"loading pair {args.pair}")
        pair = resolve_pair(args.pair)
    except MultispinError as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 2
    quick = args.quick
    devices, max_new, gamma = (2, 8, 2) if quick else (8, 32, 4)
    doc: dict = {
        "schema": "multispin-gpu-check/1",
        "pair": pair.name,
        "quick": quick,
        "environment": environment(device),
    }
    progress(f"environment: {json.dumps(doc['environment'])}")

    # CPU references first: placing the pair on the GPU moves these very modules.
    progress("generate on the CPU (reference)")
    gen_cpu, gen_cpu_s = run_generate(pair, devices, max_new, gamma)
    progress("testbed --clock wall on the CPU (reference)")
    tb_cpu, tb_cpu_summary = run_testbed_wall(pair, devices, max_new)

    target_placed = place_pair(pair, device, drafts=False)  # the testbed forks: drafts stay on the CPU
    progress(f"testbed --clock wall --device {device}")
    tb_dev, tb_dev_summary = run_testbed_wall(target_placed, devices, max_new)
    doc["testbed"] = {
        "devices": devices,
        "max_new_tokens": max_new,
        "reference_cpu": tb_cpu_summary,
        "on_device": tb_dev_summary,
        "agreement_of_texts": agreement(tb_cpu, tb_dev),
    }

    placed = place_pair(pair, device)
    progress(f"generate --device {device}")
    gen_dev, gen_dev_s = run_generate(placed, devices, max_new, gamma)
    doc["generate"] = {
        "devices": devices,
        "max_new_tokens": max_new,
        "gamma": gamma,
        "wall_s": {"reference_cpu": gen_cpu_s, "on_device": gen_dev_s},
        "agreement_of_tokens": agreement(gen_cpu, gen_dev),
    }

    progress("verify grid")
    batches, gammas = ([1, 2], [1, 2]) if quick else ([1, 2, 4, 8, 16, 32], list(range(1, 9)))
    doc["verify_grid"] = verify_grid(placed, batches, gammas, past=16 if quick else 128, repeats=2 if quick else 5)

    progress("engine math")
    doc["engine"] = engine(*((2, 2, 2048) if quick else (20, 8, 151_665)), device=device)
    doc["elapsed_s"] = time.perf_counter() - START

    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    progress(
        f"wrote {args.out}: CPU and {device} agree on every device: generate "
        f"{doc['generate']['agreement_of_tokens']['all_equal']}, testbed {doc['testbed']['agreement_of_texts']['all_equal']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
