"""Policy × objective on the testbed, paired on seeds (the same drop, channel and prompts per seed):
sum goodput, worst-device goodput, Jain's index, p95 TPOT and device energy per token, each the
mean over seeds with a 95% Student-t interval, and each objective's paired difference to `sum`
on the same seeds (docs/service.md).

  python tools/objectives_table.py tiny 4 12 0,1,2,3,4,5 --pul-dbm 0 --pdl-dbm 10
  (pair, devices, rounds, seeds; radio flags optional)
"""

from __future__ import annotations

import json
import sys

import numpy as np
from scipy import stats

from multispin.vocabulary import OBJECTIVES

FIGURES = (
    "goodput_tokens_per_s",
    "worst_device_goodput_tokens_per_s",
    "jain_index",
    "tpot_p95_s",
    "energy_per_token_j",
)


def _ci(x: np.ndarray) -> tuple[float, float, float]:
    m = float(np.mean(x))
    if len(x) < 2:
        return m, float("nan"), float("nan")
    h = float(stats.t.ppf(0.975, len(x) - 1) * np.std(x, ddof=1) / np.sqrt(len(x)))
    return m, m - h, m + h


def main(argv: list[str]) -> None:
    from multispin.experiments.testbed import TestbedConfig, run_testbed

    pair, k, rounds, seeds = argv[0], int(argv[1]), int(argv[2]), [int(s) for s in argv[3].split(",")]
    radio = {}
    for flag, key in (("--pul-dbm", "p_ul_dbm"), ("--pdl-dbm", "p_dl_dbm")):
        if flag in argv:
            radio[key] = float(argv[argv.index(flag) + 1])
    policies = [p for p in ("adaptive", "all_ul", "all_dl") if f"--{p}" in argv] or ["adaptive"]
    rows: dict[tuple[str, str], dict[str, list[float]]] = {}
    for policy in policies:
        for objective in OBJECTIVES:
            got = rows.setdefault((policy, objective), {f: [] for f in FIGURES})
            for seed in seeds:
                s = run_testbed(
                    TestbedConfig.make(
                        pair=pair,
                        devices=k,
                        rounds=rounds,
                        max_new_tokens=64,
                        policy=policy,
                        objective=objective,
                        seed=seed,
                        runner="thread",
                        n_saa=100,
                        **radio,
                    )
                ).summary
                sv = s["service"]
                for f, v in zip(
                    FIGURES,
                    (
                        s["goodput_tokens_per_s"],
                        sv["worst_device_goodput_tokens_per_s"],
                        sv["jain_index"],
                        sv["tpot_s"]["p95"],
                        sv["energy_per_token_j"],
                    ),
                ):
                    got[f].append(float(v))
                print(
                    json.dumps(
                        {"policy": policy, "objective": objective, "seed": seed, **{f: got[f][-1] for f in FIGURES}}
                    ),
                    flush=True,
                )
    print("| policy | objective | " + " | ".join(FIGURES) + " |")
    print("|---" * (2 + len(FIGURES)) + "|")
    for (policy, objective), got in rows.items():
        cells = []
        for f in FIGURES:
            m, lo, hi = _ci(np.array(got[f]))
            d = np.array(got[f]) - np.array(rows[(policy, "sum")][f])
            dm, dlo, dhi = _ci(d)
            diff = "" if objective == "sum" else f"; vs sum {dm:+.3g} [{dlo:+.3g}, {dhi:+.3g}]"
            cells.append(f"{m:.3g} [{lo:.3g}, {hi:.3g}]{diff}")
        print(f"| {policy} | {objective} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
