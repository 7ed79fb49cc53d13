"""Capacity under a TPOT target vs P^dl/P^ul, for adaptive / all-UL / all-DL and the sum vs the
proportional-fair objective (the model: `multispin.experiments.capacity`; docs/service.md).

  python tools/capacity_figure.py OUT.png [TARGET_S=0.2] [DROPS=3]
"""

from __future__ import annotations

import json
import sys

from multispin import api as ms
from multispin.experiments.capacity import capacity


def main(argv: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = argv[0]
    target = float(argv[1]) if len(argv) > 1 else 0.2
    drops = int(argv[2]) if len(argv) > 2 else 3
    base = ms.scenario("paper-qwen")
    offsets = (0.0, 6.0, 12.0, 18.0)
    fig, ax = plt.subplots(figsize=(6, 4))
    for policy, color in (("adaptive", "C0"), ("all_ul", "C1"), ("all_dl", "C2")):
        for objective, style in (("sum", "-o"), ("proportional-fair", "--s")):
            caps = []
            for off in offsets:
                sc = ms.scenario("paper-qwen", p_dl_dbm=base.radio.p_ul_dbm + off, fields={"optimizer.gamma_max": 8})
                caps.append(
                    capacity(
                        sc,
                        policy=policy,
                        objective=objective,
                        tpot_target_s=target,
                        max_devices=24,
                        drops=drops,
                        rounds=200,
                        n_saa=200,
                    )[0]
                )
            print(
                json.dumps({"policy": policy, "objective": objective, "pdl_over_pul_db": offsets, "capacity": caps}),
                flush=True,
            )
            ax.plot(offsets, caps, style, color=color, label=f"{policy}, {objective}")
    ax.set_xlabel("P^dl / P^ul (dB)")
    ax.set_ylabel(f"devices served (p95 TPOT ≤ {1e3 * target:g} ms)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    main(sys.argv[1:])
