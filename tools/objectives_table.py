"""Policy × objective on the testbed, paired on seeds (the same drop, channel and prompts per seed):
sum goodput, worst-device goodput, Jain's index, p95 TPOT and device energy per token, each the
mean over seeds with a 95% Student-t interval, and each objective's paired difference to `sum`
on the same seeds (docs/service.md).

  python tools/objectives_table.py tiny 4 12 0,1,2,3,4,5 --pul-dbm 0 --pdl-dbm 10 [--all_ul ...]
  (pair, devices, rounds, seeds; radio flags and policies optional, adaptive by default)
  python tools/objectives_table.py --from runs.jsonl [more.jsonl ...]
  (the table again from the JSON lines a run printed, e.g. several processes' or an interrupted run's)

Seeds are the outer loop: every finished seed has run every policy and objective, so the lines of
an interrupted run still make a paired table over the seeds it finished.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from scipy import stats

from multispin.experiments.testbed import TestbedConfig, run_testbed
from multispin.vocabulary import OBJECTIVES

POLICIES = ("adaptive", "all_ul", "all_dl")
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


def run(argv: list[str]):
    """Run every seed × policy × objective, printing one JSON line per run; yield the lines."""

    pair, k, rounds, seeds = argv[0], int(argv[1]), int(argv[2]), [int(s) for s in argv[3].split(",")]
    radio = {}
    for flag, key in (("--pul-dbm", "p_ul_dbm"), ("--pdl-dbm", "p_dl_dbm")):
        if flag in argv:
            radio[key] = float(argv[argv.index(flag) + 1])
    policies = [p for p in POLICIES if f"--{p}" in argv] or ["adaptive"]
    for seed in seeds:
        for policy in policies:
            for objective in OBJECTIVES:
                result = run_testbed(
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
                        # as the demo: on a loaded host a round can outlast the default 120 s, and
                        # a device that hears nothing for that long is dropped from the run
                        round_timeout_s=600.0,
                        **radio,
                    )
                )
                s, sv = result.summary, result.summary.service
                values = (
                    s.goodput_tokens_per_s,
                    sv["worst_device_goodput_tokens_per_s"],
                    sv["jain_index"],
                    sv["tpot_s"]["p95"],
                    sv["energy_per_token_j"],
                )
                line = {
                    "policy": policy,
                    "objective": objective,
                    "seed": seed,
                    **dict(zip(FIGURES, map(float, values))),
                    # a run that lost devices measured the host's load, not the plan
                    "dropped_device_rounds": sum(len(r.dropped) for r in result.rounds),
                }
                print(json.dumps(line), flush=True)
                yield line


def table(lines) -> list[str]:
    """The markdown table over the seeds where a policy ran every objective (paired on them)."""
    by = {(r["policy"], r["objective"], r["seed"]): r for r in lines}
    head = "| policy | objective | seeds | " + " | ".join(FIGURES) + " | dropped device-rounds |"
    out = [head, "|---" * (4 + len(FIGURES)) + "|"]
    for policy in POLICIES:
        seeds = sorted({s for p, _, s in by if p == policy})
        seeds = [s for s in seeds if all((policy, o, s) in by for o in OBJECTIVES)]
        if not seeds:
            continue
        for objective in OBJECTIVES:
            cells = []
            for f in FIGURES:
                x = np.array([by[(policy, objective, s)][f] for s in seeds])
                m, lo, hi = _ci(x)
                d = x - np.array([by[(policy, "sum", s)][f] for s in seeds])
                dm, dlo, dhi = _ci(d)
                diff = "" if objective == "sum" else f"; vs sum {dm:+.3g} [{dlo:+.3g}, {dhi:+.3g}]"
                cells.append(f"{m:.3g} [{lo:.3g}, {hi:.3g}]{diff}")
            dropped = sum(by[(policy, objective, s)].get("dropped_device_rounds", float("nan")) for s in seeds)
            out.append(f"| {policy} | {objective} | {len(seeds)} | " + " | ".join(cells) + f" | {dropped:g} |")
    return out


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--from":
        lines = [json.loads(s) for path in argv[1:] for s in open(path) if s.startswith("{")]
    else:
        lines = list(run(argv))
    print("\n".join(table(lines)))


if __name__ == "__main__":
    main(sys.argv[1:])
