"""What fairness and energy cost in sum goodput, and what they give the worst device: adaptive
planned under each objective on the same seeds (drop, prompts, sampling numbers, channel), every
objective compared with the sum on common random numbers, with the paired intervals of
`experiments.paired` (sum goodput) and `experiments.service_intervals` (worst device, Jain, p95
TPOT, energy per token). `multispin demo --objectives` prints it (docs/service.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from multispin.experiments.demo import DemoConfig, PolicyRuns, _run_seeds
from multispin.experiments.paired import PairedDifference, goodput_interval, paired_difference
from multispin.experiments.service_intervals import ServiceDifference, service_differences
from multispin.optimize.objectives import OBJECTIVES
from multispin.progress import StepReporter


@dataclass
class ObjectiveComparison:
    runs: dict[str, PolicyRuns]  # objective -> adaptive's runs over the seeds
    goodput: dict[str, PairedDifference]  # objective -> sum goodput vs the sum objective
    service: dict[str, list[ServiceDifference]]  # objective -> service metrics vs the sum objective

    def to_dict(self) -> dict:
        return {
            "baseline": "sum",
            "objectives": [
                {
                    "objective": o,
                    "goodput_tokens_per_s": goodput_interval(r.log).to_dict(),
                    "service": r.service(),
                    "vs_sum": None if o == "sum" else self.goodput[o].to_dict(),
                    "service_vs_sum": [d.to_dict() for d in self.service.get(o, [])],
                }
                for o, r in self.runs.items()
            ],
        }


def compare_objectives(
    config: DemoConfig, pair, progress: StepReporter | None = None, objectives=OBJECTIVES
) -> ObjectiveComparison:
    """Adaptive under every objective (the sum first) on the config's seeds, each in its own folder
    OUT/objectives/<objective>/seed-<s>; summary in OUT/objectives/summary.json."""
    out = Path(config.out) / "objectives"
    runs: dict[str, PolicyRuns] = {}
    for objective in dict.fromkeys(("sum", *objectives)):
        cfg = config.model_copy(update={"objective": objective})
        calls = {
            s: cfg.testbed("adaptive", s, config.p_dl_dbm, out / objective / f"seed-{s}")
            for s in range(config.seed, config.seed + config.seeds)
        }
        results = dict(_run_seeds(cfg, calls, pair, progress, None))
        runs[objective] = PolicyRuns("adaptive", [results[s] for s in sorted(results)])
    base = runs["sum"]
    result = ObjectiveComparison(
        runs,
        {o: paired_difference(r.log, base.log, (o, "sum")) for o, r in runs.items() if o != "sum"},
        {o: service_differences(r.service_log, base.service_log, (o, "sum")) for o, r in runs.items() if o != "sum"},
    )
    from multispin.jsonout import versioned

    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(versioned(result.to_dict(), "demo-objectives"), indent=2))
    return result
