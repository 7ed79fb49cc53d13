"""What fairness and energy cost in sum goodput, and what they give the worst device: adaptive
planned under each objective on the same seeds (drop, prompts, sampling numbers, channel), every
objective compared with the sum on common random numbers, with the paired intervals of
`experiments.paired` (sum goodput) and `experiments.service_intervals` (worst device, Jain, p95
TPOT, energy per token). `multispin demo --objectives` prints it (docs/service.md), at the demo's
P^dl or, with `--sweep pdl`, at every point of the sweep.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from multispin.experiments.demo import DemoConfig, PolicyRuns, _run_seeds
from multispin.experiments.paired import PairedDifference, goodput_interval, paired_difference
from multispin.experiments.service_intervals import ServiceDifference, service_differences
from multispin.jsonout import versioned
from multispin.optimize.objectives import OBJECTIVES
from multispin.progress import StepReporter
from multispin.vocabulary import REFERENCE


@dataclass
class ObjectiveComparison:
    runs: dict[str, PolicyRuns]  # objective -> adaptive's runs over the seeds
    goodput: dict[str, PairedDifference]  # objective -> sum goodput vs the sum objective
    service: dict[str, list[ServiceDifference]]  # objective -> service metrics vs the sum objective
    pdl_offset_db: float | None = None  # P^dl − P^ul of a sweep point; None: the demo's own P^dl
    p_dl_dbm: float | None = None  # None: the scenario's

    def to_dict(self) -> dict:
        return {
            "baseline": "sum",
            "pdl_offset_db": self.pdl_offset_db,
            "p_dl_dbm": self.p_dl_dbm,
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


def compare_objectives_at_points(
    config: DemoConfig, pair, progress: StepReporter | None = None, objectives=OBJECTIVES
) -> list[ObjectiveComparison]:
    """The comparison at every point of the demo's sweep (`DemoConfig.sweep_points`: the demo's own
    P^dl alone without a sweep), each point's runs in OUT/objectives/pdl+<offset>dB."""
    return [
        compare_objectives(config, pair, progress, objectives, p_dl_dbm=p_dl, pdl_offset_db=offset)
        for offset, p_dl in config.sweep_points()
    ]


def compare_objectives(
    config: DemoConfig,
    pair,
    progress: StepReporter | None = None,
    objectives=OBJECTIVES,
    *,
    p_dl_dbm: float | None = None,
    pdl_offset_db: float | None = None,
) -> ObjectiveComparison:
    """Adaptive under every objective (the sum first) on the config's seeds at `p_dl_dbm` (None: the
    config's), each in its own folder OUT/objectives/<objective>/seed-<s> (under pdl+<offset>dB at a
    sweep point); summary in summary.json beside them."""
    out = Path(config.out) / "objectives"
    if pdl_offset_db is not None:
        out = out / f"pdl+{pdl_offset_db:g}dB"
    p_dl = config.p_dl_dbm if p_dl_dbm is None else p_dl_dbm
    runs: dict[str, PolicyRuns] = {}
    for objective in dict.fromkeys(("sum", *objectives)):
        cfg = config.model_copy(update={"objective": objective})
        # the comparison reads the runs' goodput and service, never a forecast: the model's
        # replicas of each run (most of its time) are left out
        calls = {
            s: cfg.testbed(REFERENCE, s, p_dl, out / objective / f"seed-{s}").model_copy(update={"forecast": False})
            for s in range(config.seed, config.seed + config.seeds)
        }
        results = dict(_run_seeds(cfg, calls, pair, progress, pdl_offset_db))
        runs[objective] = PolicyRuns(REFERENCE, [results[s] for s in sorted(results)])
    base = runs["sum"]
    result = ObjectiveComparison(
        runs,
        {o: paired_difference(r.log, base.log, (o, "sum")) for o, r in runs.items() if o != "sum"},
        {o: service_differences(r.service_log, base.service_log, (o, "sum")) for o, r in runs.items() if o != "sum"},
        pdl_offset_db,
        p_dl,
    )

    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(versioned(result.to_dict(), "demo-objectives"), indent=2))
    return result
