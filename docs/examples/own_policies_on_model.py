"""Your own policies beside adaptive on the model: ms.evaluate over simulated rounds on the same
draws, paired 95% intervals (docs/own-policy.md). Run from docs/examples:

    python own_policies_on_model.py [ROUNDS]
"""

from __future__ import annotations

import sys

import multispin as ms

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
p = ms.plan(ms.scenario("paper-qwen", devices=8))
print(f"paper-qwen, K = 8, round 0 of seed 0, {rounds} simulated rounds per policy on the same draws")
print(f"{'policy':<24} {'G (tokens/s)':>12} {'mean γ':>7}  vs adaptive (95% interval)")
for policy in ("adaptive", "all_dl", "all_ul", "own_policies:Threshold", "own_policies:Bandit"):
    e = ms.evaluate(p, rounds=rounds, policy=policy)
    vs = (
        "—"
        if e.paired is None
        else f"{e.paired.pct.estimate:+.1f}% ({e.paired.pct.low:+.1f}% … {e.paired.pct.high:+.1f}%)"
    )
    print(f"{policy:<24} {e.goodput_tokens_per_s:>12.1f} {e.rounds.draft_len.mean():>7.2f}  {vs}")
