"""`multispin demo`, the main job: adaptive vs all-UL vs all-DL vs target-only decoding in steady
state on the networked testbed, paired on common random numbers, with 95% intervals.

Every policy runs `rounds` rounds on the same seeds: the same drop (distances), the same channel
in round r, the same prompt queues and the same sampling numbers (keyed on each device's
position), so rounds pair up by index (`experiments.paired`). Each device works through a queue of
prompts of its task (`TestbedConfig.rounds`), so every measured round runs every device: the
goodput is the paper's steady-state sum goodput Σ tokens / Σ (T_comp + T_comm), never a makespan.
Target-only decoding (γ = 0) runs through the same loop, EOS handling and clock.

`sweep="pdl"` repeats the comparison at P^dl / P^ul = 0, 6, 12, 18 dB (the paper's figures 9/10
with real tokens). Target-only moves nothing over the air, so its run at the first point stands for
every point.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from multispin.errors import Interrupted, RunFailed
from multispin.experiments.demo_defaults import DEMO_DEVICES, DEMO_ROUNDS
from multispin.experiments.paired import (
    LEVEL,
    MAX_BATCHES_PER_SEED,
    MIN_BATCH_ROUNDS,
    Interval,
    PairedDifference,
    RoundLog,
    best_estimator,
    goodput_interval,
    paired_difference,
    ratio_of_sums,
)
from multispin.experiments.reproduce.executor import run_calls
from multispin.experiments.run_summary import RunFigures, RunSummary
from multispin.experiments.service import pooled_service_metrics
from multispin.experiments.service_intervals import ServiceDifference, ServiceLog, service_differences
from multispin.experiments.testbed import (
    TestbedConfig,
    TestbedResult,
    TestbedSettings,
    TestbedSetup,
    build_scenario,
    run_testbed,
    steady_state_figures,
    testbed_setup,
)
from multispin.jsonout import versioned
from multispin.models.prefill_store import shared_prompt_prefills
from multispin.models.registry import resolve_pair
from multispin.progress import StepReporter
from multispin.side_output import write_side_json
from multispin.system.scenario import Scenario
from multispin.vocabulary import DEMO_POLICIES, LEAD_POLICIES, POLICY_TABLE

log = logging.getLogger(__name__)
SWEEP_OFFSETS_DB = (0.0, 6.0, 12.0, 18.0)


class DemoConfig(TestbedSettings):
    """The demo: the settings it shares with one testbed run (`TestbedSettings`), and the
    comparison's own: its policies, the measured rounds and the seeds, the sweep, where the seeds
    run. `testbed` derives each run's `TestbedConfig` from it."""

    devices: int = Field(DEMO_DEVICES, ge=1, le=256)
    rounds: int = Field(DEMO_ROUNDS, ge=2, le=4096, description="measured rounds per policy and seed")
    seeds: int = Field(1, ge=1, le=100, description="drops: seeds seed, seed + 1, …")
    seed: int = Field(0, ge=0)
    sweep: Literal["none", "pdl"] = "none"
    out: Path = Path("out/demo")
    # pool: every device in one process, drafting in batched forwards (a K = 20 round costs about a
    # third of the CPU of one process per device); every policy runs on the same runner
    runner: Literal["pool", "fork", "thread", "subprocess"] = "pool"
    policies: tuple[str, ...] = DEMO_POLICIES  # the lead first; the study runs STUDY_POLICIES
    executor: Literal["serial", "local", "ray"] = "serial"  # where the seeds of one policy run
    # a pool does all K devices' drafting in one process: on a loaded 2-core host its first round (K
    # prompts' prefill) took over the testbed's 120 s and every device was dropped from it
    round_timeout_s: float = Field(600.0, gt=0)
    workers: int = Field(1, ge=1, le=256)  # seeds at a time (local, ray)

    @field_validator("policies")
    @classmethod
    def _known_policies(cls, policies: tuple[str, ...]) -> tuple[str, ...]:
        own = tuple(dict.fromkeys(p for p in policies if ":" in p))  # your own, module:attr (docs/own-policy.md)
        policies = tuple(p for p in policies if ":" not in p)
        bad = [p for p in policies if p not in DEMO_POLICIES]
        leads = [p for p in LEAD_POLICIES if p in policies]
        if bad or not leads or len(policies) + len(own) < 2 or len(set(policies)) != len(policies):
            raise PydanticCustomError(
                "policies",
                "{leads} and at least one other of {allowed}, each once",
                {"leads": " or ".join(LEAD_POLICIES), "allowed": ", ".join(DEMO_POLICIES)},
            )
        # the lead (the first of LEAD_POLICIES present) first, the baselines in DEMO_POLICIES' order
        return (leads[0],) + tuple(p for p in DEMO_POLICIES if p in policies and p != leads[0]) + own

    @property
    def lead(self) -> str:
        """The policy every other is compared with (the first of ``policies``)."""
        return self.policies[0]

    def testbed(self, policy: str, seed: int, p_dl_dbm: float | None, out: Path) -> TestbedConfig:
        """One run of the comparison: the shared settings, with this policy, seed, P^dl and folder."""
        shared = self.model_dump(include=set(TestbedSettings.model_fields))
        own = {"policy": "adaptive", "user_policy": policy} if ":" in policy else {"policy": policy}
        return TestbedConfig.make(
            **{**shared, **own, "seed": seed, "p_dl_dbm": p_dl_dbm, "rounds": self.rounds, "out": out}
        )

    def sweep_points(self) -> list[tuple[float | None, float | None]]:
        """(P^dl/P^ul offset in dB or None, P^dl in dBm or None for the scenario's) per point."""
        if self.sweep == "none":
            return [(None, self.p_dl_dbm)]
        p_ul = build_scenario(self.testbed(self.lead, self.seed, None, self.out)).radio.p_ul_dbm
        return [(off, p_ul + off) for off in SWEEP_OFFSETS_DB]


@dataclass(frozen=True)
class ForecastRatio:
    """Realised / forecast goodput over seeds (`forecast_ratio`): the ratio of sums and its 95%
    interval (None with one seed)."""

    estimate: float
    low: float | None
    high: float | None
    seeds: int

    def to_dict(self) -> dict:
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "seeds": self.seeds}


@dataclass(frozen=True)
class SeedRow:
    """One seed's run of a policy: its goodput beside its forecasts (realised / forecast is judged
    over seeds, each one independent run)."""

    seed: int
    goodput_tokens_per_s: float
    forecast_tokens_per_s: float | None
    budget_blind_forecast_tokens_per_s: float | None
    acceptance_conditioned_goodput_tokens_per_s: float | None

    @classmethod
    def of(cls, summary: RunSummary) -> SeedRow:
        return cls(
            seed=summary.seed,
            goodput_tokens_per_s=summary.goodput_tokens_per_s,
            forecast_tokens_per_s=summary.forecast_tokens_per_s,
            budget_blind_forecast_tokens_per_s=summary.forecast.budget_blind_tokens_per_s if summary.forecast else None,
            acceptance_conditioned_goodput_tokens_per_s=summary.figures.acceptance_conditioned_goodput_tokens_per_s,
        )

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# the pooled figures a row shows of what its goodput is made of, in the row's order
ROW_FIGURES = (
    "free_comm_tokens_per_s",
    "mean_t_comp_s",
    "mean_t_comm_s",
    "tokens_per_round",
    "drafting_share",
    "mean_gamma",
    "mean_planning_cpu_s",
    "coupled_share",
)


@dataclass(frozen=True)
class PolicyRow:
    """One policy's row of the demo at one sweep point, over its seeds: the steady-state goodput
    with its 95% interval, the paired difference to target-only, the forecast (with the range of
    one run of this length, one seed only), each seed's run, the pooled figures of what the goodput
    is made of, realised (and acceptance-conditioned) over forecast, the share of corrections in DL
    mode, the bits charged per token, whether every text is the server's record, the jobs finished,
    and what each device gets (`service`, pooled)."""

    policy: str
    goodput: Interval
    vs_target_only: PairedDifference | None
    forecast_tokens_per_s: float
    forecast_one_run: tuple[float, float] | None
    per_seed: list[SeedRow]
    figures: RunFigures  # pooled over the seeds' rounds
    realised_over_forecast: ForecastRatio | None
    conditioned_over_forecast: ForecastRatio | None
    dl_share: float
    bits_charged_per_token: float
    records_match: bool
    jobs_finished: int
    service: dict

    def to_dict(self) -> dict:
        """The row as the demo's summary.json writes it (``points[].policies[]``)."""
        return {
            "policy": self.policy,
            "goodput_tokens_per_s": self.goodput.to_dict(),
            "vs_target_only": self.vs_target_only.to_dict() if self.vs_target_only else None,
            "forecast_tokens_per_s": self.forecast_tokens_per_s,
            "forecast_one_run": list(self.forecast_one_run) if self.forecast_one_run else None,
            "per_seed": [x.to_dict() for x in self.per_seed],
            **{k: getattr(self.figures, k) for k in ROW_FIGURES},
            "realised_over_forecast": self.realised_over_forecast.to_dict() if self.realised_over_forecast else None,
            "conditioned_over_forecast": (
                self.conditioned_over_forecast.to_dict() if self.conditioned_over_forecast else None
            ),
            "dl_share": self.dl_share,
            "bits_charged_per_token": self.bits_charged_per_token,
            "steady_state": self.figures.steady_state,
            "records_match": self.records_match,
            "jobs_finished": self.jobs_finished,
            "service": self.service,
        }


@dataclass
class PolicyRuns:
    """One policy at one sweep point, over the seeds."""

    policy: str
    results: list[TestbedResult]

    @cached_property
    def log(self) -> RoundLog:
        # rounds.jsonl written before expected_tokens existed: the realised estimator only
        conditioned = all(r.expected_tokens for res in self.results for r in res.rounds)
        return RoundLog.of(
            [[r.tokens for r in res.rounds] for res in self.results],
            [[r.comp_latency_s + r.comm_latency_s for r in res.rounds] for res in self.results],
            [[sum(r.expected_tokens.values()) for r in res.rounds] for res in self.results] if conditioned else None,
        )

    def row(self, target_only: PolicyRuns | None) -> PolicyRow:
        """The table row: goodput with its interval, the gain over target-only (None when target-only
        did not run), the forecast and how the runs sat beside it, what the goodput is made of."""
        s = [res.summary for res in self.results]
        forecasts = [x.forecast_tokens_per_s for x in s]
        conditioned = [x.figures.acceptance_conditioned_goodput_tokens_per_s for x in s]
        one_run = s[0].forecast
        return PolicyRow(
            policy=self.policy,
            goodput=goodput_interval(self.log),
            vs_target_only=(
                None
                if target_only is None or self is target_only
                else paired_difference(self.log, target_only.log, (self.policy, "target_only"))
            ),
            forecast_tokens_per_s=float(np.mean(np.asarray(forecasts, dtype=float))),
            # one seed: the 95% range of one run of this length on the model (its replicas' spread);
            # several seeds pool their runs, which that range does not describe
            forecast_one_run=(
                (one_run.one_run_low, one_run.one_run_high)
                if len(s) == 1 and one_run and one_run.one_run_low is not None and one_run.one_run_high is not None
                else None
            ),
            # per seed: realised / forecast is judged over seeds (each seed is one independent run)
            per_seed=[SeedRow.of(x) for x in s],
            figures=steady_state_figures([r for res in self.results for r in res.rounds], s[0].devices),
            realised_over_forecast=forecast_ratio([x.goodput_tokens_per_s for x in s], forecasts),
            # the same check with the acceptance test's luck averaged out: same mean, narrower
            conditioned_over_forecast=(
                forecast_ratio([c for c in conditioned if c is not None], forecasts)
                if all(c is not None for c in conditioned)
                else None
            ),
            dl_share=float(np.mean([x.dl_share for x in s])),
            bits_charged_per_token=float(np.mean([x.bits.charged for x in s])),
            records_match=all(x.integrity.records_match for x in s),
            jobs_finished=sum(x.integrity.jobs_finished for x in s),
            # what each device gets, pooled over the seeds (experiments/service.py)
            service=self.service(),
        )

    @property
    def scenario(self) -> Scenario:
        """The scenario the runs ran (the seeds' differ only in their seed and measured α)."""
        return self.results[0].setup.scenario

    @cached_property
    def service_log(self) -> ServiceLog:
        """The rounds as the paired service intervals read them (same seeds and rounds as `log`)."""
        scenario = self.scenario
        return ServiceLog.of_runs(
            [res.rounds for res in self.results],
            self.results[0].config.devices,
            energy=scenario.energy,
            p_ul_w=scenario.radio.p_ul_w,
            clock=self.results[0].config.clock,
        )

    def service(self) -> dict:
        scenario = self.scenario
        return pooled_service_metrics(
            [res.rounds for res in self.results],
            self.results[0].config.devices,
            energy=scenario.energy,
            p_ul_w=scenario.radio.p_ul_w,
            clock=self.results[0].config.clock,
        )


def complete_seeds(runs: dict[str, PolicyRuns], rounds: int) -> tuple[dict[str, PolicyRuns], list[dict]]:
    """The runs of the seeds whose every policy ran all ``rounds``, and one entry per run that ended
    early (a device pool or the server killed, its devices lost: the server stops when no device is
    left). Such a seed leaves the comparison for every policy, so the rest stay paired; a comparison
    with no seed left is a `RunFailed`."""
    short = [
        {"seed": res.config.seed, "policy": p, "rounds": len(res.rounds), "of": rounds, "folder": str(res.config.out)}
        for p, pr in runs.items()
        for res in pr.results
        if len(res.rounds) < rounds
    ]
    if not short:
        return runs, []
    dropped = {x["seed"] for x in short}
    kept = {p: PolicyRuns(p, [r for r in pr.results if r.config.seed not in dropped]) for p, pr in runs.items()}
    if not any(pr.results for pr in kept.values()):
        ended = "; ".join(f"{x['policy']} seed {x['seed']} after {x['rounds']} of {x['of']} rounds" for x in short)
        raise RunFailed(
            f"runs: every seed has a run that ended early ({ended}); its server.jsonl says why "
            "(a process killed, e.g. out of memory: run one real-model job at a time)"
        )
    return kept, short


def forecast_ratio(realised: list[float], forecast: list[float | None], level: float = LEVEL) -> ForecastRatio | None:
    """Realised / forecast goodput over seeds (each seed one independent run): the ratio of sums
    with its log-scale jackknife interval (`paired.ratio_of_sums`, as `tools/forecast_gap.py table`
    reports the forecast check); None without a forecast, the interval None with one seed."""
    den = [f for f in forecast if f is not None and f > 0]
    if len(den) < len(forecast):
        return None
    r = ratio_of_sums(realised, den, level=level)
    if len(realised) < 2:
        return ForecastRatio(r.estimate, None, None, len(realised))
    return ForecastRatio(r.estimate, r.low, r.high, len(realised))


@dataclass
class SweepPoint:
    offset_db: float | None
    p_dl_dbm: float | None
    runs: dict[str, PolicyRuns]
    rows: list[PolicyRow] = field(default_factory=list)
    comparisons: list[PairedDifference] = field(default_factory=list)
    # the same comparisons on the realised tokens alone, beside the conditioned ones
    realised_comparisons: list[PairedDifference] = field(default_factory=list)
    service_comparisons: list[ServiceDifference] = field(default_factory=list)
    # runs that ended before their rounds; their seeds are in no figure (`complete_seeds`)
    left_out: list[dict] = field(default_factory=list)

    @property
    def lead(self) -> str:
        """The policy the others are compared with: the first run (`DemoConfig.policies`' order)."""
        return next(iter(self.runs))

    @property
    def baselines(self) -> list[str]:
        return [p for p in self.runs if p != self.lead]

    @property
    def best_baseline(self) -> str:
        return max(self.baselines, key=lambda p: self.runs[p].log.goodput)

    def summarise(self) -> None:
        target = self.runs.get("target_only")
        self.rows = [run.row(target) for run in self.runs.values()]
        lead = self.lead
        led = self.runs[lead].log
        best = self.best_baseline  # the verdict that matters first: the lead against the best other policy
        order = [best] + [p for p in self.baselines if p != best]
        self.comparisons = [
            paired_difference(led, self.runs[p].log, (lead, p), estimator=best_estimator(led, self.runs[p].log))
            for p in order
        ]
        self.realised_comparisons = [
            paired_difference(led, self.runs[p].log, (lead, p), estimator="realised") for p in order
        ]
        # your own policy (module:attr) is also paired with adaptive where adaptive is not the lead
        own = [p for p in self.baselines if ":" in p] if lead != "adaptive" and "adaptive" in self.runs else []
        ad = self.runs["adaptive"].log if own else led
        for p in own:
            log = self.runs[p].log
            self.comparisons.append(paired_difference(ad, log, ("adaptive", p), estimator=best_estimator(ad, log)))
            self.realised_comparisons.append(paired_difference(ad, log, ("adaptive", p), estimator="realised"))
        # what each device gets, the lead against the best other policy, on the same pairing
        self.service_comparisons = service_differences(
            self.runs[lead].service_log, self.runs[best].service_log, (lead, best)
        )

    def to_dict(self) -> dict:
        return {
            "pdl_over_pul_db": self.offset_db,
            "p_dl_dbm": self.p_dl_dbm,
            "best_baseline": self.best_baseline,
            "policies": [r.to_dict() for r in self.rows],
            "comparisons": [c.to_dict() for c in self.comparisons],
            "realised_comparisons": [c.to_dict() for c in self.realised_comparisons],
            "service_comparisons": [c.to_dict() for c in self.service_comparisons],
            "left_out": self.left_out,
        }


@dataclass
class DemoResult:
    config: DemoConfig
    points: list[SweepPoint]
    setup: TestbedSetup  # drafts, tasks, measured α, payload (the lead's first run)

    def to_dict(self) -> dict:
        return {
            "config": json.loads(self.config.model_dump_json()),
            "setup": self.setup.describe(),
            "method": METHOD,
            "points": [p.to_dict() for p in self.points],
        }


# what summary.json says of its intervals: what multispin.experiments.paired computes
METHOD = (
    "steady-state goodput Σ tokens / Σ (T_comp + T_comm) over every measured round; 95% intervals: "
    f"batch means (each seed's rounds cut into consecutive batches of at least {MIN_BATCH_ROUNDS} rounds, "
    f"at most {MAX_BATCHES_PER_SEED} per seed, the same cuts for every policy, so differences stay paired) "
    "with a leave-one-batch-out jackknife of the ratio of sums, on the log scale with Student's t "
    "over the batches of every seed; comparisons on the acceptance-conditioned "
    "estimator where the rounds carry expected_tokens: each device's tokens replaced by their "
    "expectation given its draft, a control variate of known mean 0 (realised_comparisons: the same "
    "on the realised tokens, as are each policy's goodput and vs_target_only); each verdict names "
    "its estimator"
)

# settings a title names when they differ from these (the defaults of `multispin demo`)
_LABELS = {
    "p_dl_dbm": ("P^dl {} dBm", None),
    "p_ul_dbm": ("P^ul {} dBm", None),
    "noise_figure_db": ("NF {} dB", None),
    "speed_kmh": ("{} km/h", None),
    "pilot_snr_db": ("pilot SNR {} dB", None),
    "csi_planning": ("{} planning", None),
    "top_k": ("top-k {}", None),
    "ul_codec": ("UL {}", None),
    "dl_codec": ("DL {}", None),
    "drafts": ("drafts {}", None),
    "max_new_tokens": ("{} tokens per prompt", 64),
    "n_saa": ("N_SAA {}", 300),
    "split": ("{} split", "equal"),
    "objective": ("objective {}", None),
    "energy_weight": ("w {} tokens/J", None),
}


def non_default_settings(config: DemoConfig) -> str:
    """The settings that differ from the demo's defaults, for titles and figures: a run at 30 km/h
    or pilot SNR 0 dB must not look like the default run."""
    parts = []
    for name, (fmt, default) in _LABELS.items():
        value = getattr(config, name)
        if value != default:
            parts.append(
                fmt.format(
                    ",".join(value) if isinstance(value, list) else f"{value:g}" if isinstance(value, float) else value
                )
            )
    return ", ".join(parts)


def demo_setup(config: DemoConfig, pair) -> TestbedSetup:
    """The demo's device set-up (the adaptive run at the first seed, which uses both modes)."""
    return testbed_setup(config.testbed(config.lead, config.seed, config.p_dl_dbm, config.out), pair, "--draft")


def run_demo(
    config: DemoConfig, pair=None, progress: StepReporter | None = None, setup: TestbedSetup | None = None
) -> DemoResult:
    """Every policy × seed (× sweep point) on the testbed; summaries with paired intervals.
    ``setup``: the demo's `demo_setup`, when the caller has it already (it printed it)."""
    if pair is None:
        pair = resolve_pair(config.pair)
    setup = setup or demo_setup(config, pair)
    finished: list[dict] = []
    try:
        # every run's device pool prefills the same prompt queues: computed once, then read
        with shared_prompt_prefills(pair):
            return _run_points(config, pair, progress, finished, setup)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: say which runs finished, in summary.json too
        path = config.out / "summary.json"
        config.out.mkdir(parents=True, exist_ok=True)

        doc = {"interrupted": True, "config": config.model_dump(mode="json"), "runs_finished": finished}
        _write_summary(versioned(doc, "demo-summary"), path)
        raise Interrupted.after(
            exc, f"interrupted after {len(finished)} finished testbed runs; partial summary in {path}"
        ) from None


def _write_summary(doc: dict, path: Path) -> None:
    """summary.json as side output: on a full disk one line, and the run's results still printed."""
    lost = write_side_json(doc, path, "demo summary", indent=2)
    if lost is not None:
        log.warning("%s", lost)


def _run_points(
    config: DemoConfig, pair, progress: StepReporter | None, finished: list[dict], setup: TestbedSetup
) -> DemoResult:
    points, target_only = [], None
    for offset, p_dl in config.sweep_points():
        runs: dict[str, PolicyRuns] = {}
        for policy in config.policies:
            if policy == "target_only" and target_only is not None:
                runs[policy] = target_only  # no airtime: the same run at every power
                continue
            calls = {}
            for i in range(config.seeds):
                seed = config.seed + i
                where = config.out / (f"pdl+{offset:g}dB" if offset is not None else "") / f"seed-{seed}"
                folder = where / policy.replace(":", "-")  # module:attr of your own policy
                calls[seed] = config.testbed(policy, seed, p_dl, folder)
            results = dict(_run_seeds(config, calls, pair, progress, offset))
            for seed in sorted(results):
                finished.append(
                    {"policy": policy, "seed": seed, "pdl_offset_db": offset, "folder": str(calls[seed].out)}
                )
            runs[policy] = PolicyRuns(policy, [results[s] for s in sorted(results)])
        target_only = runs.get("target_only")
        runs, left_out = complete_seeds(runs, config.rounds)
        point = SweepPoint(offset, p_dl, runs, left_out=left_out)
        point.summarise()
        points.append(point)
    result = DemoResult(config, points, setup)
    config.out.mkdir(parents=True, exist_ok=True)

    _write_summary(versioned(result.to_dict(), "demo-summary"), config.out / "summary.json")
    return result


def _run_seeds(config: DemoConfig, calls: dict, pair, progress: StepReporter | None, offset):
    """(seed, TestbedResult) of one policy's seeds: one after another in this process (with the
    progress bars), or in parallel on a process pool or Ray, each worker loading the pair itself
    (seeds fix every random number, so the results do not depend on where they ran)."""
    if config.executor == "serial" or len(calls) == 1:
        for seed, tb in calls.items():
            phase = f"{tb.user_policy or tb.policy:>11} seed {seed}" + (
                f" {config.objective}" if config.objective else ""
            )
            phase += f" +{offset:g} dB" if offset is not None else ""
            yield seed, run_testbed(tb, pair=pair, progress=progress, phase=phase)
        return

    yield from run_calls(_run_one, {seed: (tb,) for seed, tb in calls.items()}, config.executor, config.workers)


def _run_one(tb: TestbedConfig) -> TestbedResult:
    return run_testbed(tb)


# line style, marker and colour of each demo policy (vocabulary.POLICY_TABLE)
_STYLE = {p: look for p in DEMO_POLICIES if (look := POLICY_TABLE[p].run_look)}
_OWN_STYLE = ("-.", "D", "tab:gray")  # your own policy's line


def plot_demo(result: DemoResult, path: Path) -> Path:
    """Goodput bars with their 95% whiskers (target-only as a line) and cumulative tokens against
    scenario time (first seed) at the first sweep point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    point = result.points[0]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    rows = {r.policy: r for r in point.rows}
    spec = [p for p in DEMO_POLICIES if p != "target_only" and p in rows]
    est = [rows[p].goodput.estimate for p in spec]
    err = np.array([[e - rows[p].goodput.low, rows[p].goodput.high - e] for p, e in zip(spec, est)]).T
    ax1.bar(spec, est, yerr=err, capsize=6, color=[_STYLE[p][2] for p in spec], alpha=0.8)
    if "target_only" in rows:
        ax1.axhline(rows["target_only"].goodput.estimate, color="black", linestyle=":", label="target_only")
    ax1.plot(spec, [rows[p].forecast_tokens_per_s for p in spec], "kx", label="model forecast")
    ax1.set_ylabel("steady-state sum goodput (tokens/s)")
    ax1.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
    ax1.grid(alpha=0.3, axis="y")
    for p in point.runs:
        res = point.runs[p].results[0]
        t = np.cumsum([r.comp_latency_s + r.comm_latency_s for r in res.rounds])
        n = np.cumsum([r.tokens for r in res.rounds])
        ax2.plot(
            np.concatenate([[0], t]),
            np.concatenate([[0], n]),
            label=p,
            linestyle=_STYLE.get(p, _OWN_STYLE)[0],
            color=_STYLE.get(p, _OWN_STYLE)[2],
        )
    ax2.set_xlabel("scenario time (s)")
    ax2.set_ylabel("tokens generated (all devices)")
    ax2.legend()
    ax2.grid(alpha=0.3)
    cfg = result.config
    extra = non_default_settings(cfg)
    fig.suptitle(
        f"multispin demo: {cfg.pair}, K={cfg.devices}, {cfg.scenario} profile, {cfg.rounds} rounds × "
        f"{cfg.seeds} seed(s), steady state, 95% intervals" + (f"\n{extra}" if extra else "")
    )
    return _save(fig, path)


def plot_demo_sweep(result: DemoResult, path: Path) -> Path:
    """Steady-state goodput with 95% whiskers against P^dl / P^ul (dB), target-only as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    x = np.array([p.offset_db for p in result.points], dtype=float)
    for i, policy in enumerate(DEMO_POLICIES):
        if policy not in result.points[0].runs:
            continue
        g = [next(r for r in p.rows if r.policy == policy).goodput for p in result.points]
        est = np.array([v.estimate for v in g])
        err = np.array([[e - v.low for e, v in zip(est, g)], [v.high - e for e, v in zip(est, g)]])
        style, marker, colour = _STYLE[policy]
        ax.errorbar(
            x + (i - 1.5) * 0.25, est, yerr=err, linestyle=style, marker=marker, color=colour, capsize=4, label=policy
        )
    ax.set_xlabel(
        "P$^{dl}$ / P$^{ul}$ (dB)\nwhiskers: each policy's own 95% interval; the paired differences "
        "(printed, summary.json) are tighter",
        fontsize=9,
    )
    ax.set_ylabel("steady-state sum goodput (tokens/s)")
    ax.set_xticks(x)
    ax.grid(alpha=0.3)
    ax.legend()
    cfg = result.config
    extra = non_default_settings(cfg)
    ax.set_title(
        f"{cfg.pair}, K={cfg.devices}, {cfg.scenario}, {cfg.rounds} rounds × {cfg.seeds} seed(s)"
        + (f"\n{extra}" if extra else ""),
        fontsize=10,
    )
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
