"""What the coupled rule costs per verified position: the shared Gumbel noise (Philox words, the
conversion) and x* = argmax(log p + G) on a full-support row and on a top-k row, at a vocabulary
size V. Prints one JSON object (milliseconds per position, wall and thread CPU time: median and
minimum over repeats).

    python benchmarks/bench_coupled_noise.py                 # V = 49,152 (SmolLM2), top-k 1024
    python benchmarks/bench_coupled_noise.py --vocab 151665  # Qwen2.5
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from multispin.speculative.coupled import NoiseStream, coupled_argmax, session_key


def per_call_ms(fn, positions: int, repeats: int) -> dict[str, float]:
    """Wall and CPU time per call (median and minimum over repeats): on a shared machine the
    wall time includes waiting for a core, the thread's CPU time does not."""
    fn(0)
    wall, cpu = [], []
    for r in range(repeats):
        t0, c0 = time.perf_counter(), time.thread_time()
        for i in range(positions):
            fn(r * positions + i)
        wall.append((time.perf_counter() - t0) / positions * 1e3)
        cpu.append((time.thread_time() - c0) / positions * 1e3)
    return {
        "wall_median_ms": round(float(np.median(wall)), 4),
        "wall_min_ms": round(float(min(wall)), 4),
        "cpu_median_ms": round(float(np.median(cpu)), 4),
        "cpu_min_ms": round(float(min(cpu)), 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=49_152)
    ap.add_argument("--top-k", type=int, default=1024)
    ap.add_argument("--positions", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    noise, rng = NoiseStream(session_key(0, 0)), np.random.default_rng(0)
    full = rng.dirichlet(np.ones(a.vocab)).astype(np.float32)
    top = np.zeros(a.vocab, dtype=np.float32)
    top[rng.choice(a.vocab, a.top_k, replace=False)] = rng.dirichlet(np.ones(a.top_k))
    out = {
        "vocab": a.vocab,
        "top_k": a.top_k,
        "philox_words": per_call_ms(lambda i: noise.raw(i, a.vocab), a.positions, a.repeats),
        "gumbel_vector": per_call_ms(lambda i: noise.gumbel(i, a.vocab), a.positions, a.repeats),
        "x_star_full_row": per_call_ms(lambda i: coupled_argmax(full, noise, i), a.positions, a.repeats),
        "x_star_top_k_row": per_call_ms(lambda i: coupled_argmax(top, noise, i), a.positions, a.repeats),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
