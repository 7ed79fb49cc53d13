"""Planning time of the three-way choice (coupled or standard per device, with γ) against the round.

    .venv/bin/python benchmarks/bench_coupled_planning.py [--drops N] [--devices K] [--repeat R]

Per drop of paper-qwen (K = 20, N_SAA = 1000, round 0, seeds 0..N−1; the coupled α is the
assumption of `multispin.system.coupled_alpha`): CPU seconds (process time) of the per-round
search today (``policy="fast"``) and of the three-way choice on it (``verify="choose"``), the
median of R runs, next to the round the three-way plan plans (T_comp + E[T_comm]). Prints the
median and the 90th percentile over drops of each CPU time and of its share of the round.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from multispin.optimize.plan import plan  # noqa: E402
from multispin.system import World, get_preset  # noqa: E402
from multispin.system.coupled_alpha import ASSUMPTION, assumed_coupled_alpha  # noqa: E402


def _cpu(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.process_time()
        out = fn()
        times.append(time.process_time() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--drops", type=int, default=10)
    ap.add_argument("--devices", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for seed in range(args.drops):
        w = World(get_preset("paper-qwen").override({"devices.count": args.devices, "seed": seed}))
        inst = w.instance(0)
        inst = inst.replace(alpha_coupled=assumed_coupled_alpha(w.drop.task, inst.alpha))
        u = w.saa_uniforms(0)
        t_std, p_std = _cpu(lambda: plan(inst, uniforms=u, policy="fast"), args.repeat)
        t_3w, p_3w = _cpu(lambda: plan(inst, uniforms=u, policy="fast", verify="choose"), args.repeat)
        g = p_3w.goodput
        rnd = g.t_comp_s + g.e_t_comm_s
        rows.append((t_std, t_3w, rnd, p_3w.goodput_tokens_per_s / p_std.goodput_tokens_per_s, p_3w.coupled_share))
        print(
            f"drop {seed}: fast {1e3 * t_std:.1f} ms, three-way {1e3 * t_3w:.1f} ms, round {1e3 * rnd:.0f} ms "
            f"({100 * t_3w / rnd:.1f}%), gain ×{rows[-1][3]:.3f}, coupled share {rows[-1][4]:.2f}",
            flush=True,
        )
    a = np.array(rows)
    for name, col in (("fast", 0), ("three-way", 1)):
        share = a[:, col] / a[:, 2]
        print(
            f"{name}: CPU median {1e3 * np.median(a[:, col]):.1f} ms (p90 {1e3 * np.quantile(a[:, col], 0.9):.1f}), "
            f"share of the round median {100 * np.median(share):.1f}% (p90 {100 * np.quantile(share, 0.9):.1f}%)"
        )
    print(ASSUMPTION)


if __name__ == "__main__":
    main()
