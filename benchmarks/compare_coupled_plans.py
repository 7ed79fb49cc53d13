"""Records or compares the three-way plans (``plan(..., verify="choose")``) on a fixed set of drops.

    .venv/bin/python benchmarks/compare_coupled_plans.py record OUT.json
    .venv/bin/python benchmarks/compare_coupled_plans.py compare OLD.json

A change to the three-way search that should leave its plans as they are: record them before,
compare after. The drops: the planning-time benchmark's (paper-qwen K = 20, seeds 0..9, the
assumed coupled α) and 40 more over K 4–40, both presets, P^ul −10..10 dBm, per-device coupled/
standard acceptance ratios 0.85–1, draft caps on every third, deep fades on every fifth; each
planned with the per-round search (``fast``) and, on every fourth, the shipped one (``greedy``).
``compare`` prints every drop whose mask, γ, goodput or baselines (the starts' goodputs) differ
and exits 1 if any does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from multispin.optimize.plan import plan  # noqa: E402
from multispin.system import World, get_preset  # noqa: E402
from multispin.system.coupled_alpha import assumed_coupled_alpha  # noqa: E402


def _bench_drop(seed: int):
    w = World(get_preset("paper-qwen").override({"devices.count": 20, "seed": seed}))
    inst = w.instance(0)
    return inst.replace(alpha_coupled=assumed_coupled_alpha(w.drop.task, inst.alpha)), w.saa_uniforms(0)


def _varied_drop(i: int):
    k = (4, 8, 12, 20, 30, 40)[i % 6]
    pul = (10.0, 0.0, -10.0, 5.0, -5.0)[i % 5]
    preset = ("paper-qwen", "paper-r1")[i % 2]
    w = World(
        get_preset(preset).override(
            {
                "devices.count": k,
                "seed": 300 + i,
                "radio.p_ul_dbm": pul,
                "radio.p_dl_dbm": pul + (6.0, 12.0, 0.0)[i % 3],
            }
        )
    )
    inst = w.instance(0)
    rng = np.random.default_rng(i)
    changes = {"alpha_coupled": inst.alpha * rng.uniform(0.85, 1.0, k)}
    if i % 3 == 0:
        changes["gamma_cap"] = rng.integers(1, inst.gamma_max + 1, k)
    if i % 5 == 4:
        fade = np.where(rng.random(k) < 1 / 3, 10 ** rng.uniform(-5, -2, k), 1.0)
        changes["gain_ul"], changes["gain_dl"] = inst.gain_ul * fade, inst.gain_dl * fade
    return inst.replace(**changes), w.saa_uniforms(0)


def cases():
    for seed in range(10):
        yield f"bench{seed}/fast", *_bench_drop(seed), "fast"
    for i in range(40):
        inst, u = _varied_drop(i)
        yield f"varied{i}/fast", inst, u, "fast"
        if i % 4 == 0:
            yield f"varied{i}/greedy", inst, u, "greedy"


def record() -> dict:
    out = {}
    for name, inst, u, policy in cases():
        p = plan(inst, uniforms=u, policy=policy, verify="choose")
        out[name] = {
            "coupled": p.coupled.astype(int).tolist(),
            "draft_len": p.draft_len.tolist(),
            "goodput": p.goodput_tokens_per_s,
            "baselines": p.baselines,
        }
    return out


def main() -> None:
    what, path = sys.argv[1], Path(sys.argv[2])
    now = record()
    if what == "record":
        path.write_text(json.dumps(now, indent=1))
        print(f"{len(now)} plans recorded in {path}")
        return
    old = json.loads(path.read_text())
    bad = 0
    for name, p in now.items():
        o = old[name]
        same = o["coupled"] == p["coupled"] and o["draft_len"] == p["draft_len"] and o["goodput"] == p["goodput"]
        if not same:
            bad += 1
            print(f"{name}: goodput {o['goodput']:.6f} -> {p['goodput']:.6f}, mask/γ changed")
        elif o.get("baselines", p["baselines"]) != p["baselines"]:
            bad += 1
            print(f"{name}: the same plan, its baselines (the single-rule starts' goodputs) changed")
    print(f"{len(now)} plans compared, {bad} differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
