"""Optimiser figures measured side by side in one run.

    .venv/bin/python benchmarks/bench_optimize.py [--quick] [--planning] [--repeat R]

1. Reactive solve for |R| = 20: closed-form scan, the paper's bisection over n, the reactive()
   entry point (with Brent powers), the linear-scan oracle, and brute force over 2^20 splits.
2. Vectorised throughput (outcomes per second) of the reactive solver.
3. The full draft-length optimisation (N_SAA = 1000) for K = 20, 50, 100, 200: the shipped search,
   the ±1 search shipped before it and the paper's greedy.
3a. Planning inside the round: CPU per plan of the per-round search (policy fast, with and without
   a deadline of 10% of the round), the shipped search and the paper's greedy, against the round
   they plan (T_comp + E[T_comm]), with each plan's shortfall to the best of them, K = 8, 20, 50,
   200 (``--planning`` runs this section alone), and the certificate's CPU (the communication-aware
   bound of the fast plan, K ≤ 20); ``--repeat R``: the median of R runs per drop.
3b. Shortfall of each policy to the best known γ (a slow reference search) per (P^dl, noise figure).
4. Shipped search vs the exhaustive oracle on small K: gap distribution.
5. Adaptive modes and greedy draft lengths vs every baseline on the paper-qwen preset.
6. Extensions: optimised bandwidth split; verification cost per token (T_ver^tok > 0).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import os

from multispin.optimize.bandwidth import optimized_split_batch  # noqa: E402
from multispin.optimize.baselines import baselines  # noqa: E402
from multispin.optimize.bound import communication_bound  # noqa: E402
from multispin.optimize.draft_lengths import (  # noqa: E402
    best_uniform,
    computation_only,
    exhaustive_oracle,
    local_search,
    paper_greedy,
    pm1_search,
    reference_search,
)
from multispin.optimize.fast_search import fast_search  # noqa: E402
from multispin.optimize.goodput import SAAObjective  # noqa: E402
from multispin.optimize.reactive import brute_force_oracle, optimal_modes_batch, reactive  # noqa: E402
from multispin.system import World, get_preset  # noqa: E402


def timeit(fn, repeat: int = 50) -> float:
    """Median CPU time of fn() in seconds (process time: robust to other load on the machine;
    the code is single-threaded numpy, so on an idle machine wall ≈ CPU)."""
    fn()
    out = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        out.append(time.process_time() - t0)
    return statistics.median(out)


def timed(fn):
    """(result, wall seconds, CPU seconds) of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    res = fn()
    return res, time.perf_counter() - w0, time.process_time() - c0


def timed_median(fn, repeat: int):
    """(result of the last call, median CPU seconds) of ``repeat`` calls of fn(): on a shared host
    one call's CPU time moves with the other load; the median of several settles it."""
    cpu = []
    for _ in range(repeat):
        res, _, c = timed(fn)
        cpu.append(c)
    return res, statistics.median(cpu)


def fmt_s(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:8.1f} µs"
    if s < 1:
        return f"{s * 1e3:8.2f} ms"
    return f"{s:8.2f} s "


def world(k: int = 20, seed: int = 0, ratio: float = 4.0, preset: str = "paper-qwen") -> World:
    return World(
        get_preset(preset).override({"devices.count": k, "seed": seed, "radio.p_dl_dbm": 10 + 10 * np.log10(ratio)})
    )


def section_reactive(quick: bool) -> None:
    print("\n== 1. reactive solve, |R| = 20 (paper-qwen drop, K = 20, all rejected) ==")
    inst = world().instance(0)
    mask = np.ones((1, 20), dtype=bool)
    rows = []
    rows.append(("closed-form scan (fast)", timeit(lambda: optimal_modes_batch(mask, inst, "fast"), 200)))
    rows.append(("bisection over n (paper)", timeit(lambda: optimal_modes_batch(mask, inst, "bisection"), 100)))
    rows.append(("reactive() entry, modes + powers", timeit(lambda: reactive(mask[0], inst), 100)))
    rows.append(("linear-scan oracle", timeit(lambda: optimal_modes_batch(mask, inst, "scan"), 50)))
    rows.append(("optimised split (extension)", timeit(lambda: optimized_split_batch(mask, inst), 5)))
    bf, _, t_bf = timed(lambda: brute_force_oracle(mask, inst))
    rows.append(("brute force, 2^20 splits", t_bf))
    assert np.isclose(bf.latency_s[0], optimal_modes_batch(mask, inst).latency_s[0], rtol=1e-12)
    for name, t in rows:
        print(f"  {name:36s} {fmt_s(t)}   brute force / this = {t_bf / t:12,.0f}×")


def section_throughput(quick: bool) -> None:
    print("\n== 2. vectorised throughput (K = 20, each device rejected w.p. 1/2) ==")
    inst = world().instance(0)
    rng = np.random.default_rng(0)
    n = 20_000 if quick else 200_000
    masks = rng.random((n, 20)) < 0.5
    t = timeit(lambda: optimal_modes_batch(masks, inst), 3)
    print(f"  closed-form scan              {n / t:14,.0f} outcomes/s   ({fmt_s(t)} for {n:,})")
    het = inst.replace(payload_bits=rng.uniform(2e4, 5e4, 20))
    m2 = masks[: n // 20]
    t = timeit(lambda: optimal_modes_batch(m2, het, "bisection"), 3)
    print(f"  bisection, unequal payloads   {m2.shape[0] / t:14,.0f} outcomes/s")
    m3 = masks[:2000]
    t = timeit(lambda: optimized_split_batch(m3, inst), 1)
    print(f"  optimised split (extension)   {m3.shape[0] / t:14,.0f} outcomes/s")


def section_greedy(quick: bool) -> None:
    print("\n== 3. draft-length optimisation, N_SAA = 1000 (paper-qwen, P^dl/P^ul = 4) ==")
    print(
        f"  {'K':>4s} {'shipped CPU':>12s} {'(wall)':>11s} {'old ±1 CPU':>11s} {'paper CPU':>11s} {'G shipped':>10s}"
        f" {'G old ±1':>9s} {'G paper':>9s}  (tokens/s, mean over drops; times: median over drops)"
    )
    for k, drops in ((20, 5), (50, 2), (100, 1), (200, 1)):
        if quick and k > 50:
            continue
        ts, tw, to, tp, gs, go, gp = [], [], [], [], [], [], []
        for seed in range(drops):
            w = world(k, seed)
            obj = SAAObjective(w.instance(0), w.saa_uniforms(0))
            s, wall, cpu = timed(lambda: local_search(obj))
            ts.append(cpu)
            tw.append(wall)
            o, _, cpu = timed(lambda: pm1_search(obj))
            to.append(cpu)
            p, _, cpu = timed(lambda: paper_greedy(obj))
            tp.append(cpu)
            gs.append(s.goodput_tokens_per_s)
            go.append(o.goodput_tokens_per_s)
            gp.append(p.goodput_tokens_per_s)
        print(
            f"  {k:4d} {fmt_s(statistics.median(ts)):>12s} {fmt_s(statistics.median(tw)):>11s}"
            f" {fmt_s(statistics.median(to)):>11s} {fmt_s(statistics.median(tp)):>11s} {np.mean(gs):10.1f}"
            f" {np.mean(go):9.1f} {np.mean(gp):9.1f}"
        )


def section_round_planning(quick: bool, repeat: int = 1) -> None:
    print(
        "\n== 3a. planning inside the round, N_SAA = 1000 (paper-qwen, P^dl/P^ul = 4; CPU of one core per plan, "
        f"median over drops of the median of {repeat} run(s) per drop, each on a fresh objective as a round builds "
        "one (the shipped search: one run); short: G below the best of the plans, mean over drops) =="
    )
    print(
        f"  {'K':>4s} {'drops':>5s} {'round':>9s} | {'fast CPU':>9s} {'% rnd':>6s} {'short':>7s} | "
        f"{'deadline':>9s} {'short':>7s} | {'shipped':>9s} {'% rnd':>6s} {'short':>7s} | {'paper':>9s} {'short':>7s} | "
        f"{'cert':>9s}"
    )
    # one untimed plan first: the first call in a process pays one-time costs (imports inside
    # functions, numpy's first dispatches) that a planner running every round does not
    w = world(8, 99)
    fast_search(SAAObjective(w.instance(0), w.saa_uniforms(0)))
    for k, drops in ((8, 3), (20, 3), (50, 2), (200, 1)):
        if quick and k > 20:
            continue
        cols: dict[str, list] = {}
        for seed in range(drops):
            w = world(k, seed)
            inst, u = w.instance(0), w.saa_uniforms(0)
            obj = SAAObjective(inst, u)
            # a fresh objective per run: a round's planner builds one (its sample levels and the
            # solver's order are then computed inside the plan, as in the running system)
            fast, t_fast = timed_median(lambda: fast_search(SAAObjective(inst, u)), repeat)
            round_s = fast.goodput.t_comp_s + fast.goodput.e_t_comm_s
            cut, t_cut = timed_median(lambda: fast_search(SAAObjective(inst, u), deadline_s=0.1 * round_s), repeat)
            paper, t_paper = timed_median(lambda: paper_greedy(SAAObjective(inst, u)), repeat)
            # the shipped search takes ~26 s at K = 200: measured there only without --quick
            shipped, t_shipped = (None, float("nan")) if k > 50 and quick else timed(lambda: local_search(obj))[::2]
            plans = [p for p in (fast, cut, paper, shipped) if p is not None]
            best = max(p.goodput_tokens_per_s for p in plans)
            for name, p, t in (
                ("fast", fast, t_fast),
                ("cut", cut, t_cut),
                ("paper", paper, t_paper),
                ("shipped", shipped, t_shipped),
            ):
                cols.setdefault(name, []).append((t, float("nan") if p is None else 1 - p.goodput_tokens_per_s / best))
            cols.setdefault("round", []).append((round_s, 0.0))
            if k <= 20:  # the communication-aware certificate of the fast plan (its exact table: K ≤ 20)
                cert_s = timed_median(lambda: communication_bound(SAAObjective(inst, u), fast.draft_len), repeat)[1]
                cols.setdefault("cert", []).append((cert_s, 0.0))

        def med(name):
            return statistics.median(t for t, _ in cols[name])

        def short(name):
            return f"{100 * np.mean([s for _, s in cols[name]]):6.2f}%"

        rnd = med("round")
        print(
            f"  {k:4d} {drops:5d} {fmt_s(rnd):>9s} | {fmt_s(med('fast')):>9s} {100 * med('fast') / rnd:5.1f}% "
            f"{short('fast')} | {fmt_s(med('cut')):>9s} {short('cut')} | {fmt_s(med('shipped')):>9s} "
            f"{100 * med('shipped') / rnd:5.1f}% {short('shipped')} | {fmt_s(med('paper')):>9s} {short('paper')} | "
            f"{fmt_s(med('cert')) if 'cert' in cols else '':>9s}"
        )


def section_shortfall(quick: bool) -> None:
    print(
        "\n== 3b. shortfall to the best known γ (K = 20, N_SAA = 1000, paper-qwen; reference: iterated local "
        "search, 8 random restarts + 8 kicks, started from every policy's γ) =="
    )
    policies = {
        "shipped": local_search,
        "fast": fast_search,
        "old ±1": pm1_search,
        "paper greedy": paper_greedy,
        "best uniform": best_uniform,
        "computation-only": computation_only,
    }
    drops = 1 if quick else 4
    print(f"  {'P^dl':>5s} {'NF':>3s}  " + "  ".join(f"{n:>30s}" for n in policies))
    print(f"  {'dBm':>5s} {'dB':>3s}  " + "  ".join(f"{'median / p90 / max / >1%':>30s}" for _ in policies))
    every = {n: [] for n in policies}
    for nf in (0.0, 10.0, 22.0):
        for pdl in (10.0, 16.0, 22.0, 28.0):
            short = {n: [] for n in policies}
            for seed in range(drops):
                w = World(
                    get_preset("paper-qwen").override(
                        {"seed": 100 + seed, "radio.p_dl_dbm": pdl, "radio.noise_figure_db": nf}
                    )
                )
                obj = SAAObjective(w.instance(0), w.saa_uniforms(0))
                found = {n: fn(obj) for n, fn in policies.items()}
                ref = reference_search(obj, np.random.default_rng(seed), 8, 8, [p.draft_len for p in found.values()])
                for n, p in found.items():
                    short[n].append(1 - p.goodput_tokens_per_s / ref.goodput_tokens_per_s)
                    every[n].append(short[n][-1])
            print(
                f"  {pdl:5.0f} {nf:3.0f}  "
                + "  ".join(
                    f"{np.median(v):7.2%} {np.percentile(v, 90):7.2%} {max(v):7.2%} {np.mean(np.asarray(v) > 0.01):5.0%}"
                    for v in short.values()
                )
            )
    print(
        "  all   all  "
        + "  ".join(
            f"{np.median(v):7.2%} {np.percentile(v, 90):7.2%} {max(v):7.2%} {np.mean(np.asarray(v) > 0.01):5.0%}"
            for v in every.values()
        )
    )


def section_gap(quick: bool) -> None:
    print("\n== 4. gap to the exhaustive oracle (K ≤ 4, every γ vector; presets' distributions, deep fades) ==")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "optimize"))
    # lazy: a test helper, on the path for this section only
    from _builders import random_preset_instances  # noqa: PLC0415

    rng = np.random.default_rng(0)
    gaps = {"shipped search": [], "paper greedy": [], "best uniform": [], "computation-only": []}
    for inst in random_preset_instances(30 if quick else 80, seed=123, max_devices=4, deep_fade_prob=0.15):
        k = inst.num_devices
        if k < 2:
            continue
        if k == 4:
            inst = inst.replace(gamma_max=8)
        obj = SAAObjective(inst, rng.random((300, k)))
        best = exhaustive_oracle(obj).goodput_tokens_per_s
        for name, fn in (
            ("shipped search", local_search),
            ("paper greedy", paper_greedy),
            ("best uniform", best_uniform),
            ("computation-only", computation_only),
        ):
            gaps[name].append(1 - fn(obj).goodput_tokens_per_s / best)
    n = len(gaps["shipped search"])
    print(f"  {n} instances; gap = 1 − G/G_oracle")
    print(f"  {'policy':18s} {'median':>8s} {'mean':>8s} {'p90':>8s} {'max':>8s} {'at 0':>6s}")
    for name, v in gaps.items():
        v = np.asarray(v)
        print(
            f"  {name:18s} {np.median(v):8.2%} {v.mean():8.2%} {np.percentile(v, 90):8.2%} {v.max():8.2%}"
            f" {np.mean(v < 1e-12):6.0%}"
        )


def section_baselines(quick: bool) -> None:
    print("\n== 5. ours vs baselines, paper-qwen K = 20 (G_ours / G_baseline − 1 over drops) ==")
    drops = 3 if quick else 10
    for ratio in (4.0, 16.0):
        gains: dict[str, list[float]] = {}
        g_ours, gam = [], []
        for seed in range(drops):
            w = world(20, seed, ratio)
            inst, u, mu = w.instance(0), w.saa_uniforms(0), w.mode_uniforms(0)
            base = baselines(inst, u, mu)
            ours = local_search(SAAObjective(inst, u), {n: dp.draft_len for n, dp in base.items()})
            g_ours.append(ours.goodput_tokens_per_s)
            gam.append(ours.draft_len.mean())
            for name, dp in base.items():
                gains.setdefault(name, []).append(ours.goodput_tokens_per_s / dp.goodput_tokens_per_s - 1)
        print(f"  P^dl/P^ul = {ratio:4.0f}: G = {np.mean(g_ours):.1f} tokens/s, mean γ = {np.mean(gam):.1f}")
        for k, v in gains.items():
            v = np.asarray(v)
            print(
                f"    vs {k:17s} median {100 * np.median(v):+7.1f}%   mean {100 * v.mean():+8.1f}%"
                f"   min {100 * v.min():+7.1f}%   max {100 * v.max():+9.1f}%"
            )


def section_extensions(quick: bool) -> None:
    print("\n== 6a. extension: bandwidth split optimised jointly with DL power (K = 20) ==")
    drops = 2 if quick else 4
    for ratio in (4.0, 16.0):
        red, gain = [], []
        for seed in range(drops):
            w = world(20, seed, ratio)
            inst, u = w.instance(0), w.saa_uniforms(0)
            eq = SAAObjective(inst, u)
            plan = local_search(eq)
            opt = SAAObjective(inst, u, split="optimized").evaluate(plan.draft_len)
            red.append(1 - opt.e_t_comm_s / plan.goodput.e_t_comm_s)
            gain.append(opt.goodput_tokens_per_s / plan.goodput_tokens_per_s - 1)
        print(
            f"  P^dl/P^ul = {ratio:4.0f}, same γ: E[T_comm] −{100 * np.mean(red):.1f}%, G +{100 * np.mean(gain):.2f}%"
        )
    for k in (50,):
        w = world(k, 0, 4.0)
        inst, u = w.instance(0), w.saa_uniforms(0)[:300]
        eq = local_search(SAAObjective(inst, u))
        obj = SAAObjective(inst, u, split="optimized")
        replanned, _, dt = timed(lambda: local_search(obj, [eq.draft_len]))  # the equal-split plan as a start
        same = obj.evaluate(eq.draft_len)
        print(
            f"  K = {k}, N_SAA = 300: same γ G +{100 * (same.goodput_tokens_per_s / eq.goodput_tokens_per_s - 1):.2f}%,"
            f" re-planned with the split G +{100 * (replanned.goodput_tokens_per_s / eq.goodput_tokens_per_s - 1):.2f}%"
            f" (re-planning took {dt:.1f} s CPU)"
        )
    print("\n== 6b. extension: verification cost per batch token T_ver^tok (K = 20, P^dl/P^ul = 4) ==")
    for t_tok in (0.0005, 0.001, 0.002):
        gains, gam_n, gam_a = [], [], []
        for seed in range(drops):
            w = world(20, seed)
            inst, u = w.instance(0), w.saa_uniforms(0)
            real = inst.with_compute(t_ver_tok_s=t_tok)
            naive = local_search(SAAObjective(inst, u)).draft_len
            aware = local_search(SAAObjective(real, u))
            g_naive = SAAObjective(real, u).value(naive)
            gains.append(aware.goodput_tokens_per_s / g_naive - 1)
            gam_n.append(naive.mean())
            gam_a.append(aware.draft_len.mean())
        print(
            f"  T_ver^tok = {1e3 * t_tok:.1f} ms: planning with it vs as if 0: G +{100 * np.mean(gains):.2f}%"
            f" (mean γ {np.mean(gam_n):.1f} → {np.mean(gam_a):.1f})"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes (CI smoke run)")
    ap.add_argument("--planning", action="store_true", help="only section 3a (planning inside the round)")
    ap.add_argument(
        "--repeat", type=int, default=1, metavar="R", help="section 3a: median of R runs per drop (default 1)"
    )
    args = ap.parse_args()
    if args.repeat < 1:
        ap.exit(2, f"bench_optimize.py: error: --repeat: must be an integer >= 1 (got {args.repeat})\n")
    t0 = time.perf_counter()
    try:
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; times are CPU (process) seconds")
    except OSError:
        pass
    if args.planning:
        section_round_planning(args.quick, args.repeat)
        print(f"\n(total {time.perf_counter() - t0:.0f} s)")
        return
    section_reactive(args.quick)
    section_throughput(args.quick)
    section_greedy(args.quick)
    section_round_planning(args.quick, args.repeat)
    section_shortfall(args.quick)
    section_gap(args.quick)
    section_baselines(args.quick)
    section_extensions(args.quick)
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
