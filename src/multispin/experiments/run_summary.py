"""What one testbed run says about itself, typed: its `RunSummary` and the parts a reader asks
for by name (the run's figures, the model's forecast and its prediction at the run's rounds, the
bits per token, the payload, each device's acceptance, the integrity of the texts), and the one
mapping to and from summary.json (`RunSummary.to_json`, `RunSummary.from_json`).

summary.json is flat: its keys are the parts' fields, some with a prefix (``forecast_``,
``conditioned_``, ``estimate_minus_prior_``), in the order a reader of the file meets them. Every
key is spelt here and nowhere else; the readers (the demo, the commands, tools/forecast_gap.py)
read attributes.

Why a forecast cannot be read as a check of the model here (`forecast_caveats`) is part of the
summary too: it is decided from the parts, once, when the run ends."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from multispin.jsonout import versioned
from multispin.system.profile_fit import MIN_R2

SCHEMA = "testbed-summary"
Doc = dict[str, Any]


def _flat(part: Any, prefix: str = "") -> Doc:
    """A part's fields as summary.json keys (``prefix`` + the field's name), in field order."""
    return {prefix + f.name: getattr(part, f.name) for f in fields(part)}


def _by_device(values: list[Any]) -> dict[str, Any]:
    """A per-device list as summary.json writes it: keyed by the device's index as a string."""
    return {str(d): v for d, v in enumerate(values)}


def _device_list(doc: Mapping[str, Any]) -> list[Any]:
    """The per-device list of a summary.json mapping keyed "0", "1", …"""
    return [doc[str(d)] for d in range(len(doc))]


@dataclass(frozen=True)
class EstimateGap:
    """How far the acceptance estimates the plans followed sat from the prior α: the mean and the
    sd of (estimate − prior) over rounds and devices (`forecast.estimate_figures`)."""

    mean: float
    sd: float

    def to_json(self, prefix: str = "") -> Doc:
        return {f"{prefix}estimate_minus_prior_mean": self.mean, f"{prefix}estimate_minus_prior_sd": self.sd}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], prefix: str = "") -> EstimateGap | None:
        """The gap under ``prefix``, or None where the run planned no round."""
        key = f"{prefix}estimate_minus_prior_mean"
        return cls(doc[key], doc[f"{prefix}estimate_minus_prior_sd"]) if key in doc else None


@dataclass(frozen=True)
class RunFigures:
    """What a run is made of, from its rounds (`testbed.steady_state_figures`): the goodput Σ tokens /
    Σ (T_comp + T_comm), the same with the air free, the mean T_comp, T_comm and planning CPU per
    round, tokens per round, the share of devices drafting, mean γ, the share of drafting devices
    verified coupled, whether every round ran every device, and the goodput with the acceptance
    test's luck averaged out (the tokens; the tokens and T_comm) where the rounds carry it."""

    rounds: int
    tokens: int
    goodput_tokens_per_s: float
    free_comm_tokens_per_s: float
    mean_t_comp_s: float
    mean_t_comm_s: float
    mean_planning_cpu_s: float
    tokens_per_round: float
    drafting_share: float
    mean_gamma: float
    coupled_share: float
    steady_state: bool
    acceptance_conditioned_goodput_tokens_per_s: float | None
    outcome_conditioned_goodput_tokens_per_s: float | None

    def to_json(self) -> Doc:
        return _flat(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> RunFigures:
        return cls(**{f.name: doc[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class ModelForecast:
    """The model's forecast of the run on fresh channels, independent of it
    (`forecast.forecast_goodput`): goodput, the same with the air free, its rounds' tokens, T_comp,
    T_comm, mean γ and drafting share, the 95% range of one run of this length (None for a
    makespan), how far its planner's estimates sat from the prior, and the budget-blind forecast at
    the prior α (the model before the jobs' budgets and the online estimator)."""

    tokens_per_s: float
    free_comm_tokens_per_s: float
    tokens_per_round: float
    t_comp_s: float
    t_comm_s: float
    mean_gamma: float
    drafting_share: float
    one_run_low: float | None
    one_run_high: float | None
    estimate_gap: EstimateGap
    budget_blind_tokens_per_s: float

    PREFIX = "forecast_"

    def to_json(self) -> Doc:
        scalars = {f.name: getattr(self, f.name) for f in fields(self)[:-2]}
        return {
            **{self.PREFIX + k: v for k, v in scalars.items()},
            **self.estimate_gap.to_json(self.PREFIX),
            "budget_blind_forecast_tokens_per_s": self.budget_blind_tokens_per_s,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ModelForecast | None:
        """The forecast in ``doc`` (`forecast_goodput`'s keys and the budget-blind one), or None
        where the run made none (a user's policy, an interrupted run)."""
        if doc.get("forecast_tokens_per_s") is None:
            return None
        gap = EstimateGap.from_json(doc, cls.PREFIX)
        if gap is None:
            raise KeyError(f"{cls.PREFIX}estimate_minus_prior_mean")
        scalars = {f.name: doc[cls.PREFIX + f.name] for f in fields(cls)[:-2]}
        return cls(**scalars, estimate_gap=gap, budget_blind_tokens_per_s=doc["budget_blind_forecast_tokens_per_s"])


@dataclass(frozen=True)
class ConditionedPrediction:
    """The analytic model and the Monte Carlo simulator at the realised rounds' γ and channels
    (`predictions.model_predictions`): a consistency check, not a prediction."""

    analytic_tokens_per_s: float
    montecarlo_tokens_per_s: float
    analytic_t_comm_s: float
    analytic_tokens_per_round: float

    PREFIX = "conditioned_"

    def to_json(self) -> Doc:
        return _flat(self, self.PREFIX)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], prefix: str = PREFIX) -> ConditionedPrediction | None:
        """The prediction under ``prefix`` (``""``: `model_predictions`' own dict), or None where
        the run made none."""
        if f"{prefix}analytic_tokens_per_s" not in doc:
            return None
        return cls(**{f.name: doc[prefix + f.name] for f in fields(cls)})


@dataclass(frozen=True)
class BitsPerToken:
    """Bits moved up and down per generated token, and the bits the clock charged airtime for."""

    up: float
    down: float
    charged: float

    def to_json(self) -> Doc:
        return {f"bits_{f.name}_per_token": getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> BitsPerToken:
        return cls(**{f.name: doc[f"bits_{f.name}_per_token"] for f in fields(cls)})


@dataclass(frozen=True)
class PayloadSummary:
    """What moved: whether the output law is exact, the sampling, codecs and bits
    (`testbed.PayloadChoice.to_dict`), and the one line that says so."""

    exact: bool
    detail: Doc
    headline: str

    def to_json(self) -> Doc:
        return {"exact": self.exact, "payload": self.detail, "payload_headline": self.headline}

    @property
    def sampling(self) -> Doc:
        """The run's sampling policy (temperature, top-k, top-p)."""
        return self.detail["sampling"]

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PayloadSummary:
        return cls(doc["exact"], doc["payload"], doc["payload_headline"])


@dataclass(frozen=True)
class DeviceAcceptance:
    """Each device's draft and task, the α its plans started from (the prior) and where the online
    estimate ended, whether every prior was measured, and the source of a user's profile (None:
    the package's shipped profiles or the scenario's α)."""

    drafts: list[str]
    tasks: list[str]
    prior: list[float]
    estimate: list[float]
    measured: bool
    source: str | None

    def tasks_by_device(self) -> dict[str, str]:
        """Each device's task keyed by its index as a string (what `acceptance.run_verdicts` reads)."""
        return _by_device(self.tasks)

    def to_json(self) -> Doc:
        return {
            "alpha_estimate": _by_device(self.estimate),
            "tasks": _by_device(self.tasks),
            "drafts": _by_device(self.drafts),
            "alpha_prior": _by_device(self.prior),
            "alpha_prior_measured": self.measured,
            "acceptance_source": self.source,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> DeviceAcceptance:
        return cls(
            drafts=_device_list(doc["drafts"]),
            tasks=_device_list(doc["tasks"]),
            prior=_device_list(doc["alpha_prior"]),
            estimate=_device_list(doc["alpha_estimate"]),
            measured=doc["alpha_prior_measured"],
            source=doc["acceptance_source"],
        )


@dataclass(frozen=True)
class Integrity:
    """Whether the texts are the server's record: the server's own check, every device's digest
    against the server's, the server's digest per job (device id), the jobs that finished, and
    whether the run was interrupted."""

    consistent: bool
    digests_match: bool
    server_digests: dict[int, str | None]
    jobs_finished: int
    interrupted: bool

    @property
    def records_match(self) -> bool:
        return self.consistent and self.digests_match


def forecast_caveats(
    *,
    pair: str,
    measured: bool,
    clock: str,
    compute_profile: str | None,
    forecast_compute: Mapping[str, Any],
    compute_profile_r2: float | None,
    channel: Mapping[str, Any],
    coupled_assumed: bool = False,
) -> list[str]:
    """Why a run's forecast cannot be read as a check of the model, one line each (none: it can):
    α assumed rather than measured for this pair, the coupled rule's α assumed for a policy that uses it, compute timed with another host's profile on the
    wall clock, a compute profile whose fit is poor, channel-estimation error (mobility, pilot
    noise) under which one run's communication time is heavy-tailed and the forecast is not validated."""
    out = []
    if not measured:
        out.append(
            f"α assumed: the scenario's, not measured for pair {pair} under this sampling "
            f"(`multispin measure --pair {pair} --out acc.json`, then --acceptance-profile acc.json)"
        )
    if coupled_assumed:
        out.append(
            "coupled α assumed: no coupled α was measured for this pair and draft under this sampling, so its "
            "coupled devices plan on α × smollm2-135m q5g64's ratio (`multispin measure` gives a draft's ratio; "
            "`multispin profiles coupled-alpha` the coupled runs' α)"
        )
    if clock == "wall" and not compute_profile:
        c = forecast_compute
        out.append(
            f"compute of another host: G is this host's wall clock, the forecast times compute with scenario "
            f"{c['scenario']}'s profile (T_ver0 {1e3 * c['t_ver0_s']:.1f} ms, T_ver1 {1e3 * c['t_ver1_s']:.1f} ms, "
            f"T^dft {1e3 * c['draft_latency_s_per_token']:.1f} ms/token) "
            "(`multispin profile --out compute.json`, then --compute-profile compute.json)"
        )
    r2 = compute_profile_r2
    if isinstance(r2, (int, float)) and r2 < MIN_R2:
        out.append(
            f"compute profile of poor fit: its T_ver fit explains little of the timings (R² = {r2:.2f} < {MIN_R2:g}; "
            "a loaded host?): profile again on an idle host with more --repeats"
        )
    if channel.get("speed_kmh") is not None or channel.get("pilot_snr_db") is not None:
        out.append(
            f"channel knowledge: the run planned on aged or noisy channel estimates (speed {channel.get('speed_kmh')} "
            f"km/h, pilot SNR {channel.get('pilot_snr_db')} dB, {channel.get('planning')} planning): a rejected "
            "device in a fade the estimates could not foresee takes seconds, so one run's goodput can fall far "
            "below the forecast and its range; the forecast is not validated to ±5% under estimation error "
            "(docs/channel-knowledge.md)"
        )
    return out


@dataclass(frozen=True)
class RunSummary:
    """One testbed run: what ran (pair, policy, clock, scenario, devices, every setting), its
    figures, the model's forecast and its prediction at the run's rounds, the bits per token, what
    each device got (`service`, experiments/service.py), the payload, the radio's noise, the
    compute profile the forecast timed with, the channel knowledge planned under, each device's
    acceptance, the integrity of the texts, why the forecast is not a check of the model (if it is
    not), and each job's text. summary.json is `to_json`; `from_json` reads it back."""

    pair: str
    policy: str
    clock: str
    scenario: str
    devices: int
    config: Doc  # every setting of the run (`TestbedConfig`, JSON): a run folder says how to rebuild it
    figures: RunFigures
    estimate_gap: EstimateGap | None  # None: no round was planned
    virtual_time_s: float
    planned_goodput_tokens_per_s: float
    forecast: ModelForecast | None  # None: a user's policy or an interrupted run
    conditioned: ConditionedPrediction | None
    dl_share: float
    mean_draft_len: list[float]  # per device slot
    wall_time_s: float
    bits: BitsPerToken
    objective: str
    service: Doc  # experiments/service.py's metrics, whose keys that module owns
    payload: PayloadSummary
    noise_psd_w_per_hz: float
    forecast_compute: Doc  # the scenario's compute profile the forecast (and the virtual clock) time with
    channel: Doc  # mobility and channel knowledge the run planned under (docs/channel-knowledge.md)
    acceptance: DeviceAcceptance
    integrity: Integrity
    compute_profile_r2: float | None  # the fit of the user's compute profile (written with one only)
    caveats: list[str]  # `forecast_caveats`
    texts: dict[int, str]  # each job's text (device id → text)

    @property
    def goodput_tokens_per_s(self) -> float:
        return self.figures.goodput_tokens_per_s

    @property
    def forecast_tokens_per_s(self) -> float | None:
        return self.forecast.tokens_per_s if self.forecast else None

    @property
    def seed(self) -> int:
        return int(self.config["seed"])

    @property
    def shape(self) -> Doc:
        """The run's size as it was asked for: devices, rounds (None: until every device is done)
        and tokens per prompt."""
        return {key: self.config[key] for key in ("devices", "rounds", "max_new_tokens")}

    def to_json(self, texts: bool = True) -> Doc:
        """summary.json: the version fields, then every part's keys in the file's order; without
        ``texts`` the texts are left out (the summary `multispin testbed --json` prints)."""
        doc: Doc = {
            "pair": self.pair,
            "policy": self.policy,
            "clock": self.clock,
            "scenario": self.scenario,
            "devices": self.devices,
            "config": self.config,
            **self.figures.to_json(),
            **(self.estimate_gap.to_json() if self.estimate_gap else {}),
            "virtual_time_s": self.virtual_time_s,
            "planned_goodput_tokens_per_s": self.planned_goodput_tokens_per_s,
            **(
                self.forecast.to_json()
                if self.forecast
                else {"forecast_tokens_per_s": None, "budget_blind_forecast_tokens_per_s": None}
            ),
            **(self.conditioned.to_json() if self.conditioned else {}),
            "dl_share": self.dl_share,
            "mean_draft_len": _by_device(self.mean_draft_len),
            "wall_time_s": self.wall_time_s,
            **self.bits.to_json(),
            "objective": self.objective,
            "service": self.service,
            **self.payload.to_json(),
            "noise_psd_w_per_hz": self.noise_psd_w_per_hz,
            "forecast_compute": self.forecast_compute,
            "channel": self.channel,
            **self.acceptance.to_json(),
            "consistent": self.integrity.consistent,
            "digests_match": self.integrity.digests_match,
            "server_digests": {str(d): x for d, x in self.integrity.server_digests.items()},
        }
        if self.config.get("compute_profile"):
            doc["compute_profile_r2"] = self.compute_profile_r2
        doc["forecast_caveats"] = self.caveats
        doc["jobs_finished"] = self.integrity.jobs_finished
        doc["interrupted"] = self.integrity.interrupted
        if texts:
            doc["texts"] = {str(d): t for d, t in self.texts.items()}
        return versioned(doc, SCHEMA)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> RunSummary:
        """A summary.json read back (its texts empty where it was written without them). One of
        another schema, or one missing a key, is a `ValueError` naming it."""
        if doc.get("schema") not in (None, f"multispin.{SCHEMA}"):
            raise ValueError(f"schema: {doc.get('schema')!r} is not a testbed summary")
        try:
            return cls._parse(doc)
        except KeyError as exc:
            raise ValueError(f"summary.json lacks {exc.args[0]!r} (written by an older multispin? rerun it)") from None

    @classmethod
    def _parse(cls, doc: Mapping[str, Any]) -> RunSummary:
        return cls(
            pair=doc["pair"],
            policy=doc["policy"],
            clock=doc["clock"],
            scenario=doc["scenario"],
            devices=doc["devices"],
            config=doc["config"],
            figures=RunFigures.from_json(doc),
            estimate_gap=EstimateGap.from_json(doc),
            virtual_time_s=doc["virtual_time_s"],
            planned_goodput_tokens_per_s=doc["planned_goodput_tokens_per_s"],
            forecast=ModelForecast.from_json(doc),
            conditioned=ConditionedPrediction.from_json(doc),
            dl_share=doc["dl_share"],
            mean_draft_len=_device_list(doc["mean_draft_len"]),
            wall_time_s=doc["wall_time_s"],
            bits=BitsPerToken.from_json(doc),
            objective=doc["objective"],
            service=doc["service"],
            payload=PayloadSummary.from_json(doc),
            noise_psd_w_per_hz=doc["noise_psd_w_per_hz"],
            forecast_compute=doc["forecast_compute"],
            channel=doc["channel"],
            acceptance=DeviceAcceptance.from_json(doc),
            integrity=Integrity(
                consistent=doc["consistent"],
                digests_match=doc["digests_match"],
                server_digests={int(d): x for d, x in doc["server_digests"].items()},
                jobs_finished=doc["jobs_finished"],
                interrupted=doc["interrupted"],
            ),
            compute_profile_r2=doc.get("compute_profile_r2"),
            caveats=list(doc["forecast_caveats"]),
            texts={int(d): t for d, t in doc.get("texts", {}).items()},
        )


def forecast_note(summary: RunSummary) -> str:
    """The lines printed under a run's table when its forecast cannot be trusted (`forecast_caveats`)."""
    lines = summary.caveats
    return "\n".join(["† forecast not a check of the model here:", *(f"  - {c}" for c in lines)]) if lines else ""
