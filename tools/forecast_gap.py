"""Realised / forecast goodput of the testbed, and how much of the gap each part of the model closes
(the figures of docs/system-model.md §5.5). Real-model runs: minutes each.

  python tools/forecast_gap.py runs smollm2-135m adaptive 0,1,2,3        # realised + forecasts per seed
  python tools/forecast_gap.py parts smollm2-135m adaptive 0,1,2,3       # F0..F3 per seed (no run)
  python tools/forecast_gap.py tiny ALPHA 0,1,2,3,4,5 BUDGET adaptive TAG # tiny pair, 8 chat devices

F0: teacher-forced α, prompts that never end, no estimator (the forecast before issue 38);
F1: run α; F2: + each job's budget; F3: + the online estimator (the testbed's forecast now).
One JSON line per seed.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def runs(pair: str, policy: str, seeds: list[int]) -> None:
    from multispin.experiments.testbed import TestbedConfig, run_testbed

    for s in seeds:
        t = time.time()
        sm = run_testbed(
            TestbedConfig.make(pair=pair, devices=8, rounds=20, max_new_tokens=64, policy=policy, seed=s)
        ).summary
        print(
            json.dumps(
                {
                    "seed": s,
                    "policy": policy,
                    "wall": round(time.time() - t, 1),
                    "real": sm["goodput_tokens_per_s"],
                    "forecast": sm["forecast_tokens_per_s"],
                    "blind": sm["budget_blind_forecast_tokens_per_s"],
                }
            ),
            flush=True,
        )


def parts(pair_name: str, policy: str, seeds: list[int], rounds: int = 40) -> None:
    from multispin.experiments.forecast import forecast_goodput
    from multispin.experiments.testbed import TestbedConfig, build_scenario, payload_choice, with_measured_acceptance
    from multispin.models.profiles import device_alpha
    from multispin.models.prompts import assign_tasks
    from multispin.models.registry import resolve_pair

    pair = resolve_pair(pair_name)
    for seed in seeds:
        cfg = TestbedConfig.make(pair=pair_name, devices=8, rounds=20, max_new_tokens=64, policy=policy, seed=seed)
        drafts, tasks = [pair.default_draft] * 8, assign_tasks(8, cfg.tasks, seed)
        choice = payload_choice(cfg, pair.vocab_size)
        base = build_scenario(cfg)
        tf = base.override(
            {"devices.acceptance": [device_alpha(pair_name, d, t, choice.sampling) for d, t in zip(drafts, tasks)]}
        )
        run, _ = with_measured_acceptance(base, pair_name, drafts, tasks, choice.sampling)
        budgets = dict(max_new_tokens=64, horizon=20)

        def f(sc, choice=choice, seed=seed, **kw):
            return forecast_goodput(sc, choice.wire, policy, rounds=rounds, seed=seed, **kw)["forecast_tokens_per_s"]

        print(
            json.dumps(
                {
                    "seed": seed,
                    "policy": policy,
                    "F0": f(tf),
                    "F1": f(run),
                    "F2": f(run, **budgets),
                    "F3": f(run, online=True, **budgets),
                }
            ),
            flush=True,
        )


def tiny(alpha: float, seeds: list[int], budget: int, policy: str, tag: str) -> None:
    from multispin.experiments.testbed import TestbedConfig, run_testbed
    from multispin.system.scenario_io import resolve_scenario

    sc = resolve_scenario("paper-qwen").override({"devices.count": 8, "devices.acceptance": [alpha] * 8})
    path = Path(f"/tmp/forecast-gap-{tag}.json")
    path.write_text(sc.model_dump_json())
    for s in seeds:
        sm = run_testbed(
            TestbedConfig.make(
                pair="tiny",
                devices=8,
                rounds=20,
                max_new_tokens=budget,
                policy=policy,
                runner="thread",
                scenario=str(path),
                seed=s,
                drafts=["close"],
                tasks="chat",
            )
        ).summary
        print(
            json.dumps(
                {
                    "tag": tag,
                    "seed": s,
                    "budget": budget,
                    "real": sm["goodput_tokens_per_s"],
                    "forecast": sm["forecast_tokens_per_s"],
                    "blind": sm.get("budget_blind_forecast_tokens_per_s"),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    verb, args = sys.argv[1], sys.argv[2:]
    if verb == "runs":
        runs(args[0], args[1], [int(s) for s in args[2].split(",")])
    elif verb == "parts":
        parts(args[0], args[1], [int(s) for s in args[2].split(",")])
    elif verb == "tiny":
        tiny(float(args[0]), [int(s) for s in args[1].split(",")], int(args[2]), args[3], args[4])
    else:
        sys.exit("verb: runs, parts or tiny")
