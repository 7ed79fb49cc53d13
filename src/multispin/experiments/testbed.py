"""`multispin testbed` / `multispin demo`: the networked system with the optimiser in the loop, as
an experiment: its configuration, set-up, run and summary.

A `LocalTestbed` (edge server + K device processes over ZeroMQ on 127.0.0.1,
`multispin.runtime.net.launcher`) runs real rounds with real models; a `ScenarioPlanner` plans γ
before each round and modes/powers after each verification, from the scenario's channel (redrawn
every round) and online acceptance estimates; a `RoundSink` (`multispin.runtime.net.round_sink`)
emulates the links' airtime and logs every round. This module configures a run, sets it up once
(`testbed_setup`: each device's draft, task and prior α, resolved first, then the scenario with
those α, the payload and the forecast's spread, handed to the planner, the forecast, the server
and the description), starts it through those three and turns its rounds into its `RunSummary`
(summary.json, `experiments.run_summary`).

Payload: what moves is set by the sampling policy and the codecs (`top_k`, `ul_codec`,
`dl_codec`) and the pair's vocabulary; the planner plans with those bits (`WirePayload`) and the
clock charges them, not the scenario's payload model. The default is exact in both modes and
compact: top-k sampling with k = V_eff = 1024 and sparse top-1024 (index, float32 value) pairs on
both links (`compact_exact_defaults`): every nonzero entry of a warped row travels as its float32
value, so the decoded row is the row, 1024·(⌈log2 V⌉ + 32) bits (49,152 at V = 49,152; the
paper's 34,816 uses 16-bit values, exact in DL only for greedy decoding). A combination that is
approximate for the policy's modes is announced (`PayloadChoice.headline`, summary `exact`).

Clocks:
- `virtual`: tokens are real, but each round is charged T_comp from the scenario's compute
  profile (e.g. the paper's A100 numbers, plus the airtime of the drafting uploads) and T_comm
  from the airtime of the correction bits each device moved, under the round's channel, powers
  and bandwidths, so a laptop reproduces the A100 regime;
- `wall`: real compute on this host, and every round is delayed by its airtime (link
  emulation), so goodput is measured with a stopwatch.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from multispin.acceptance.kinds import COUPLED_ASSUMED, TEACHER_FORCED
from multispin.acceptance.shipped import coupled_prior, device_alpha, planned_kind
from multispin.acceptance.spread import shipped_spread
from multispin.config import StrictConfig
from multispin.errors import ConfigError, Interrupted
from multispin.experiments.forecast import estimate_figures, forecast_goodput
from multispin.experiments.predictions import model_predictions
from multispin.experiments.run_summary import (
    BitsPerToken,
    ConditionedPrediction,
    DeviceAcceptance,
    EstimateGap,
    Integrity,
    ModelForecast,
    PayloadSummary,
    RunFigures,
    RunSummary,
    forecast_caveats,
)
from multispin.experiments.service import service_metrics
from multispin.models.prompts import assign_tasks, device_prompt_queues
from multispin.models.registry import resolve_pair
from multispin.progress import Step, StepReporter, reporter
from multispin.runtime.net.launcher import DeviceSetup, LocalTestbed, ServerHooks
from multispin.runtime.net.round_sink import RoundSink
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.round.planner import ScenarioPlanner
from multispin.runtime.round.user_policy import load_policy
from multispin.runtime.wire.round_row import RoundRow
from multispin.side_output import write_side_json
from multispin.speculative.codecs import exactness_by_mode, make_codec
from multispin.speculative.verify import DEFAULT_GAMMA_MAX
from multispin.speculative.warp import SamplingParams
from multispin.system.channel import World, drop_devices
from multispin.system.coupled_alpha import task_ratio
from multispin.system.payload import PAPER_PAYLOAD_BITS, WirePayload
from multispin.system.profile_fit import profile_vocab_size, read_profile
from multispin.system.scenario import Scenario, checked_codec_spec
from multispin.system.scenario_io import FLAG_FIELDS, resolve_scenario, with_overrides
from multispin.vocabulary import Objective, policy_links
from multispin.vocabulary import RunPolicy as Policy

if TYPE_CHECKING:
    from multispin.speculative.warp import SamplingParams

log = logging.getLogger(__name__)
Clock = Literal["virtual", "wall"]

COMPACT_V_EFF = 1024  # the paper's V_eff
MAX_SESSIONS = 4096  # the server's limit on distinct device ids (ServerConfig.max_devices)


def compact_exact_defaults(vocab_size: int, v_eff: int = COMPACT_V_EFF) -> tuple[int, str]:
    """(top_k, codec) of the default: k = V_eff = min(1024, V) and sparse top-V_eff pairs with
    float32 values. Exact in UL mode (every codec is) and in DL mode (a warped target row has at
    most k ≤ V_eff nonzero entries, each sent as its own float32 value). `v_eff` scales the same
    rule down for tests on small vocabularies."""
    v_eff = min(v_eff, vocab_size)
    return v_eff, f"sparse:v_eff={v_eff},q=32"


class TestbedSettings(StrictConfig):
    """What one testbed run and a demo (many runs) share: the pair and its devices, the scenario and
    its radio, what the planner maximises, the payload, and how the devices run. `TestbedConfig`
    adds what one run is (its policy, rounds, clock, output folder); `DemoConfig` what a comparison
    is (its policies, seeds, sweep)."""

    __test__ = False  # not a pytest class

    pair: str = "smollm2-135m"
    devices: int = Field(8, ge=1, le=256)
    max_new_tokens: int = Field(64, ge=1, le=8192, description="budget of each prompt")
    drafts: list[str] | None = None  # cycled over devices; None: the pair's default draft on every device
    scenario: str = "paper-qwen"  # a preset name or a scenario file (`--scenario`)
    split: Literal["equal", "optimized"] = "equal"
    p_dl_dbm: float | None = None  # None: the scenario's (so are the two below)
    p_ul_dbm: float | None = None
    noise_figure_db: float | None = None
    # mobility and channel knowledge (None: the scenario's; docs/channel-knowledge.md)
    speed_kmh: float | None = None
    pilot_snr_db: float | None = None
    csi_planning: Literal["naive", "robust"] | None = None
    # what the planner maximises (None: the scenario's, whose default is the paper's sum; docs/service.md)
    objective: Objective | None = None
    energy_weight: float | None = Field(None, ge=0, description="tokens per joule (objective energy)")
    top_k: int | None = Field(None, ge=0, description="top-k cut (0 = off); None: the compact exact default")
    ul_codec: str | None = None  # None: the compact exact default (compact_exact_defaults)
    dl_codec: str | None = None
    seed: int = 0
    # pool: every device in one process, drafting in batched forwards (the same texts: see runtime/net/pool.py)
    runner: Literal["subprocess", "fork", "thread", "pool"] = "fork"
    round_timeout_s: float = Field(120.0, gt=0)
    n_saa: int = Field(300, ge=10, le=100_000, description="SAA samples of the per-round plan")
    # the user's own measurements (`multispin measure --out`, `multispin profile --out`) of this pair:
    # the planner and the forecast take α and the compute times from them (docs/own-models.md)
    acceptance_profile: list[str] | None = None
    compute_profile: str | None = None

    @field_validator("ul_codec", "dl_codec")
    @classmethod
    def _known_codec(cls, spec: str | None) -> str | None:
        """Refuse a bad codec spec here, before any model is loaded."""
        return spec if spec is None else checked_codec_spec(spec)


class TestbedConfig(TestbedSettings):
    """One testbed run: the shared settings, and the run's policy, length, clock and output."""

    __test__ = False  # not a pytest class

    # None: every device writes one text of max_new_tokens (a makespan); N: N rounds in steady state,
    # each device working through a queue of prompts of its task (max_new_tokens each)
    rounds: int | None = Field(None, ge=1, le=4096)
    clock: Clock = "virtual"
    policy: Policy = "adaptive"
    # a user's policy, module:attr (runtime/round/user_policy.py): it replaces `policy`'s rules
    user_policy: str | None = None
    # the model beside the run (forecast, analytic and Monte Carlo predictions): the forecast plans
    # 8 replicas of the run, most of a long small run's time; False leaves them out of the summary
    forecast: bool = True
    tasks: Literal["chat", "code", "mixed"] = "mixed"
    temperature: float = Field(1.0, ge=0.0)
    out: Path | None = None

    @field_validator("rounds")
    @classmethod
    def _sessions_fit(cls, rounds: int | None, info: ValidationInfo) -> int | None:
        """A steady-state run queues `rounds` prompts per device, one session (device id) each."""
        devices = info.data.get("devices", 1)
        if rounds is not None and rounds * devices > MAX_SESSIONS:
            raise PydanticCustomError(
                "sessions",
                "at most {most} // devices = {fit} rounds with {devices} devices "
                "(each device queues one prompt session per round); run several seeds",
                {"most": MAX_SESSIONS, "fit": MAX_SESSIONS // devices, "devices": devices},
            )
        return rounds


@dataclass(frozen=True)
class PayloadChoice:
    """The sampling policy and codecs of a run, their bits, and whether the output law is exact."""

    sampling: SamplingParams
    wire: WirePayload
    exactness: dict  # mode -> Exactness, for the modes the policy uses
    default: bool  # the compact exact default (no codec or top-k given)

    @property
    def exact(self) -> bool:
        return all(v.exact for v in self.exactness.values())

    @property
    def headline(self) -> str:
        """One line: the choice, its bits next to the paper's, and exact or APPROXIMATE (why)."""
        s, w = self.sampling, self.wire
        policy = "greedy" if s.greedy else f"T={s.temperature:g}, " + (f"top-k {s.top_k}" if s.top_k else "no top-k")
        if w.ul_codec == w.dl_codec:
            codecs = f"{w.ul_codec} both links, {w.ul_distribution_bits:,} bits per distribution"
        else:
            codecs = (
                f"UL {w.ul_codec} {w.ul_distribution_bits:,} bits, DL {w.dl_codec} "
                f"{w.dl_distribution_bits:,} bits per distribution"
            )
        head = f"payload: {policy}; {codecs} at V={w.vocab_size:,} (paper: {PAPER_PAYLOAD_BITS:,})"
        if not self.exactness:
            return f"{head}; exact (target-only decoding corrects nothing)"
        if self.exact:
            modes = " and ".join(m.upper() for m in self.exactness)
            return f"{head}; exact in {modes} mode" + (" (default)" if self.default else "")
        bad = "; ".join(v.reason for v in self.exactness.values() if not v.exact)
        return f"APPROXIMATE output law: {bad}. {head}"

    def to_dict(self) -> dict:
        return {
            "sampling": self.sampling.model_dump(),
            **self.wire.to_dict(),
            "paper_distribution_bits": PAPER_PAYLOAD_BITS,
            "default": self.default,
            "exact": self.exact,
            "exactness": {m: {"exact": v.exact, "reason": v.reason} for m, v in self.exactness.items()},
        }


def payload_choice(config: TestbedConfig, vocab_size: int, gamma_max: int = DEFAULT_GAMMA_MAX) -> PayloadChoice:
    """Sampling, codecs and bits of a testbed run on a pair with `vocab_size` tokens."""

    top_k, codec = compact_exact_defaults(vocab_size)
    sampling = SamplingParams.make(
        temperature=config.temperature, top_k=top_k if config.top_k is None else config.top_k
    )
    ul = make_codec(config.ul_codec or codec)
    dl = make_codec(config.dl_codec or codec)
    wire = WirePayload.from_codecs(ul, dl, vocab_size, gamma_max)
    verdicts = exactness_by_mode(ul, dl, sampling, vocab_size, policy_links(config.policy))
    default = config.top_k is None and config.ul_codec is None and config.dl_codec is None
    return PayloadChoice(sampling, wire, verdicts, default)


def bits_per_token(rows: list[RoundRow], wire: WirePayload) -> BitsPerToken:
    """Bits moved up and down per generated token, and the bits the clock charged per token
    (drafting uploads in T_comp, correction bits in T_comm; the verdict's bonus id or rejection
    position goes down uncharged, as in the model)."""
    tokens = sum(r.tokens for r in rows)
    up = sum(sum(r.uplink_bits.values()) for r in rows)
    down = sum(sum(r.downlink_bits.values()) for r in rows)
    charged = sum(sum(r.charged_bits.values()) + wire.draft_bits_per_token * sum(r.gamma.values()) for r in rows)
    per = (lambda x: x / tokens) if tokens else (lambda x: 0.0)
    return BitsPerToken(up=per(up), down=per(down), charged=per(charged))


@dataclass
class TestbedResult:
    __test__ = False

    config: TestbedConfig
    summary: RunSummary  # summary.json, typed
    setup: TestbedSetup  # what the run was set up with (its scenario, drafts, payload)
    rounds: list[RoundRow] = field(default_factory=list)  # rounds.jsonl, typed

    @property
    def texts(self) -> dict[int, str]:
        """Each job's text (device id → text)."""
        return self.summary.texts


def build_scenario(config: TestbedConfig) -> Scenario:
    """The config's scenario with the flags it sets (`system.scenario_io.FLAG_FIELDS`)."""

    return with_overrides(resolve_scenario(config.scenario), **{f: getattr(config, f) for f in FLAG_FIELDS})


@dataclass(frozen=True)
class PriorAlpha:
    """Each device's α the plans start from (its prior), each one's kind (`acceptance.kinds`;
    None: the scenario's, assumed), whether every one was measured, and whether the scenario takes
    them (False: nothing measured, the scenario's own α stand as they are)."""

    alpha: list[float]
    kinds: list[str | None]
    measured: bool
    replaces: bool
    # each device's coupled-rule prior and its kind (`shipped.coupled_prior`; coupled_assumed: the
    # assumed ratio of its task, `system.coupled_alpha`)
    coupled: list[float]
    coupled_kinds: list[str]

    def applied_to(self, scenario: Scenario) -> Scenario:
        """``scenario`` with these α as its devices' acceptance (itself where they replace nothing),
        and their coupled α where any was measured."""
        fields: dict = {"devices.acceptance": self.alpha} if self.replaces else {}
        if any(k != COUPLED_ASSUMED for k in self.coupled_kinds):
            fields["devices.acceptance_coupled"] = self.coupled
        return scenario.override(fields) if fields else scenario


def prior_alpha(
    scenario: Scenario,
    pair_name: str,
    drafts: list[str],
    tasks: list[str],
    sampling=None,
    user_profile: bool = False,
) -> PriorAlpha:
    """Each device's prior α, resolved before the run's scenario is built: with ``user_profile``
    (`--acceptance-profile`, already in ``scenario``'s task table) the teacher-forced α of its task
    there; else the measured α of its (draft, task) under the run's sampling policy where the
    package ships a profile for the pair (`multispin measure`; the α its verdicts see in a run,
    `acceptance.shrinkage.shrunk_alpha`, docs/acceptance.md); the scenario's own α (its drop, read
    without building a world) for a device neither gives."""
    assumed = drop_devices(scenario).alpha
    if user_profile:  # the user's measurement of this pair beats any shipped one
        table = scenario.tasks.acceptance
        found = [table[t] if t in table else None for t in tasks]
        kinds: list[str | None] = [TEACHER_FORCED if t in table else None for t in tasks]
    else:
        found = [device_alpha(pair_name, d, t, sampling, kind="planned") for d, t in zip(drafts, tasks)]
        kinds = [planned_kind(pair_name, d, t, sampling) for d, t in zip(drafts, tasks)]
    alpha = [float(a) if a is not None else float(b) for a, b in zip(found, assumed)]
    measured = all(a is not None for a in found)
    coupled, coupled_kinds = [], []
    for d, t, a in zip(drafts, tasks, alpha):
        c = None if user_profile else coupled_prior(pair_name, d, t, sampling, a)
        coupled.append(c[0] if c else a * task_ratio(t))
        coupled_kinds.append(c[1] if c else COUPLED_ASSUMED)
    replaces = user_profile or any(a is not None for a in found)
    return PriorAlpha(alpha, kinds, measured, replaces, coupled, coupled_kinds)


def with_measured_acceptance(scenario, pair_name: str, drafts: list[str], tasks: list[str], sampling=None):
    """The scenario with each device's shipped measured α (`prior_alpha`), the scenario's own α
    elsewhere. Returns the scenario and whether every device's α was measured."""
    prior = prior_alpha(scenario, pair_name, drafts, tasks, sampling)
    return prior.applied_to(scenario), prior.measured


def device_spread(pair_name: str, drafts: list[str], tasks: list[str], sampling=None) -> list[float] | None:
    """Each device's between-prompt spread of α (the sd its jobs' α scatter with around its own,
    `acceptance.spread`) where the package ships one for its (draft, task) under the run's
    sampling, 0 elsewhere; ``None`` when none is shipped for any device."""

    sd = [shipped_spread(pair_name, d, t, sampling) for d, t in zip(drafts, tasks)]
    return None if all(x is None for x in sd) else [float(x or 0.0) for x in sd]


def steady_state_figures(rows: list[RoundRow], devices: int) -> RunFigures:
    """What a run is made of, from its rounds.jsonl rows: the goodput Σ tokens / Σ (T_comp + T_comm)
    (the paper's ratio of sums), the mean T_comp and T_comm, tokens per round, the share of devices
    drafting (γ > 0), mean γ, and the goodput had the air been free (Σ tokens / Σ T_comp); whether
    every round ran every device (steady state)."""
    n = len(rows)
    tokens = sum(r.tokens for r in rows)
    comp = sum(r.comp_latency_s for r in rows)
    comm = sum(r.comm_latency_s for r in rows)
    gammas = [g for r in rows for g in r.gamma.values()]
    drafting = sum(1 for r in rows for g in r.gamma.values() if g > 0)
    # Σ E[tokens | drafts] and Σ E[T_comm | drafts], where every round carries them
    expected = sum(sum(r.expected_tokens.values()) for r in rows) if all(r.expected_tokens for r in rows) else None
    conditioned = [r.conditioned_comm_latency_s for r in rows]
    cond_comm = sum(c for c in conditioned if c is not None) if rows and None not in conditioned else None
    return RunFigures(
        rounds=n,
        tokens=tokens,
        goodput_tokens_per_s=tokens / (comp + comm) if comp + comm > 0 else 0.0,
        free_comm_tokens_per_s=tokens / comp if comp > 0 else 0.0,
        mean_t_comp_s=comp / n if n else 0.0,
        mean_t_comm_s=comm / n if n else 0.0,
        mean_planning_cpu_s=sum(r.planning_cpu_s for r in rows) / n if n else 0.0,
        tokens_per_round=tokens / n if n else 0.0,
        drafting_share=float(np.mean([g > 0 for g in gammas])) if gammas else 0.0,
        mean_gamma=float(np.mean(gammas)) if gammas else 0.0,
        # of the device-rounds that drafted, the share verified under the coupled rule
        coupled_share=(
            sum(1 for r in rows for d in r.coupled if r.gamma.get(d, 0) > 0) / drafting if drafting else 0.0
        ),
        steady_state=bool(rows) and all(len(r.gamma) == devices for r in rows),
        # the same ratio with each device's tokens replaced by E[tokens | its draft]: the
        # acceptance test's luck averaged out (`speculative.expected_kept`), same expectation
        acceptance_conditioned_goodput_tokens_per_s=(
            expected / (comp + comm) if expected is not None and comp + comm > 0 else None
        ),
        # and T_comm replaced by E[T_comm | the round's drafts] too (`RoundRow.conditioned_comm_latency_s`):
        # every outcome of the acceptance test averaged out, the same expectation (a martingale
        # difference per round, as for the tokens); the forecast check's least noisy reading
        outcome_conditioned_goodput_tokens_per_s=(
            expected / (comp + cond_comm)
            if expected is not None and cond_comm is not None and comp + cond_comm > 0
            else None
        ),
    )


# replicas of a run the forecast averages: its noise between forecast seeds falls as 1/√replicas
# (smollm2-135m, K = 8, 20-round runs, with the measured between-prompt spread: 3.2% sd at 2)
FORECAST_REPLICAS = 8


def forecast_rounds(config: TestbedConfig) -> int:
    """Model rounds the forecast spends: `FORECAST_REPLICAS` replicas of a steady-state run (40
    rounds for a makespan)."""
    return FORECAST_REPLICAS * config.rounds if config.rounds else 40


def model_forecast(config: TestbedConfig, setup: TestbedSetup, planner: ScenarioPlanner) -> ModelForecast:
    """The model's forecast of the run on fresh channels, independent of it: the run's jobs
    (budgets, each prompt's own α drawn with the set-up's spread) and its online estimator,
    `FORECAST_REPLICAS` replicas, next to the budget-blind forecast at the prior α (the model
    before them)."""
    forecast = forecast_goodput(
        setup.scenario,
        setup.choice.wire,
        config.policy,
        rounds=forecast_rounds(config),
        split=config.split,
        seed=config.seed,
        max_new_tokens=config.max_new_tokens,
        online=planner.online,
        horizon=config.rounds or forecast_rounds(config),
        spread=setup.spread,
        world=setup.world,
    )
    blind = forecast_goodput(
        setup.scenario, setup.choice.wire, config.policy, split=config.split, seed=config.seed, world=setup.world
    )
    parsed = ModelForecast.from_json({**forecast, "budget_blind_forecast_tokens_per_s": blind["forecast_tokens_per_s"]})
    assert parsed is not None  # forecast_goodput always forecasts
    return parsed


def planned_estimate_gap(planner: ScenarioPlanner) -> EstimateGap | None:
    """How far the estimates each round planned on sat from the prior (`estimate_figures`),
    beside the forecast's; None when no round was planned."""
    if not planner.history:
        return None
    prior = np.asarray(planner.world.drop.alpha, dtype=float)
    planned_on = np.concatenate([np.asarray(past.instance.alpha, dtype=float) for past in planner.history])
    return EstimateGap.from_json(
        estimate_figures(planned_on, np.concatenate([prior[past.devices] for past in planner.history]))
    )


def mean_draft_len(rows: list[RoundRow], devices: int) -> list[float]:
    """Each device slot's mean γ over the rounds (a job d runs in slot d mod K)."""
    gammas: dict[int, list[int]] = {d: [] for d in range(devices)}
    for row in rows:
        for d, g in row.gamma.items():
            gammas[d % devices].append(g)
    return [float(np.mean(g)) if g else 0.0 for g in gammas.values()]


def run_figures(config: TestbedConfig, rows: list[RoundRow], airtime_s: float) -> RunFigures:
    """The run's figures (`steady_state_figures`), with the goodput on the wall clock when that is
    the clock (the rounds' own time and their emulated airtime)."""
    figures = steady_state_figures(rows, config.devices)
    if config.clock != "wall":
        return figures
    wall = sum(row.round_wall_s for row in rows) + airtime_s
    return replace(figures, goodput_tokens_per_s=figures.tokens / wall if wall else 0.0)


@dataclass(frozen=True)
class TestbedSetup:
    """What a run is set up with before anything runs, computed once per run (`testbed_setup`) and
    handed to the planner, the forecast, the server and the description: each device's draft and
    task, the payload choice, each device's prior α (resolved first: `prior_alpha`) and its kind,
    whether every α was measured, the scenario built once with those α, and each device's
    between-prompt spread of α that the forecast draws its jobs' α from (`device_spread`)."""

    __test__ = False

    drafts: list[str]
    tasks: list[str]
    scenario: Scenario
    world: World  # the scenario's drop and channel, built once: every planner of the run plans on it
    measured: bool
    choice: PayloadChoice
    # each device's planned α kind (`acceptance.kinds`): tokens_matched, shrunk, or None (assumed)
    alpha_kinds: list[str | None]
    alpha_prior: list[float]  # each device's α the plans start from
    spread: list[float] | None  # each device's between-prompt sd of α (None: none shipped)
    # each device's coupled-rule prior and its kind (`PriorAlpha.coupled`)
    alpha_coupled_prior: list[float]
    alpha_coupled_kinds: list[str]

    def describe(self) -> dict:
        """The set-up as a run's description reads it (the demo's summary.json ``setup``): each
        device's draft and task, the α its plans start from, whether and how it was measured, and
        the payload line."""
        return {
            "drafts": self.drafts,
            "tasks": self.tasks,
            "alpha_prior": self.alpha_prior,
            "alpha_prior_measured": self.measured,
            "alpha_prior_kinds": self.alpha_kinds,
            "alpha_coupled_prior": self.alpha_coupled_prior,
            "alpha_coupled_kinds": self.alpha_coupled_kinds,
            "payload_headline": self.choice.headline,
            "exact": self.choice.exact,
        }


def testbed_setup(config: TestbedConfig, pair, field_name: str = "drafts") -> TestbedSetup:
    """Each device's draft (the config's, cycled; the pair's default draft on every device when
    none is given) and task, the payload at the scenario's γ_max, each device's prior α under the
    run's sampling policy (`prior_alpha`), and the scenario built with them, once. ``field_name``
    names the drafts in an error (``--draft`` on the command line)."""

    names = pair.check_drafts(config.drafts or [pair.default_draft], field_name)
    drafts = [names[k % len(names)] for k in range(config.devices)]
    tasks = assign_tasks(config.devices, config.tasks, config.seed)
    scenario = build_scenario(config)
    choice = payload_choice(config, pair.vocab_size, scenario.optimizer.gamma_max)
    scenario = with_user_profiles(scenario, config, pair, drafts)
    prior = prior_alpha(scenario, pair.name, drafts, tasks, choice.sampling, bool(config.acceptance_profile))
    scenario = prior.applied_to(scenario)
    return TestbedSetup(
        drafts=drafts,
        tasks=tasks,
        scenario=scenario,
        world=World(scenario),
        measured=prior.measured,
        choice=choice,
        alpha_kinds=prior.kinds,
        alpha_prior=prior.alpha,
        spread=device_spread(pair.name, drafts, tasks, choice.sampling),
        alpha_coupled_prior=prior.coupled,
        alpha_coupled_kinds=prior.coupled_kinds,
    )


def with_user_profiles(scenario: Scenario, config: TestbedSettings, pair, drafts: list[str]) -> Scenario:
    """The scenario with the config's acceptance and compute profiles applied, each checked
    against the run's pair: a profile measured on another vocabulary is refused in one line."""

    def checked(source, what: str) -> dict:
        data = dict(read_profile(source, what))
        v = profile_vocab_size(data)
        if v is not None and v != pair.vocab_size:
            raise ConfigError(
                f"{what}: measured on pair {data.get('pair', '?')!r} (V = {v:,}), but this run's pair "
                f"{pair.name!r} has V = {pair.vocab_size:,}; measure this pair (`multispin measure --pair {pair.name}`)"
            )
        data.pop("vocab_size", None)  # checked against the pair: the scenario's own V is the paper's payload
        data.pop("pair", None)
        return data

    if config.acceptance_profile:
        scenario = scenario.with_acceptance_profile(
            [checked(p, "acceptance_profile") for p in config.acceptance_profile]
        )
    if config.compute_profile:
        profile = checked(config.compute_profile, "compute_profile")
        table = profile.get("draft_latency_s_per_token")
        draft = drafts[0] if isinstance(table, dict) and len(set(drafts)) == 1 and drafts[0] in table else None
        scenario = scenario.with_compute_profile(profile, draft=draft)
    return scenario


def run_testbed(
    config: TestbedConfig,
    pair=None,
    progress: StepReporter | None = None,
    phase: str | None = None,
    setup: TestbedSetup | None = None,
) -> TestbedResult:
    """Run one testbed session; write rounds.jsonl, server.jsonl and summary.json under `out`.
    ``progress`` receives a `Step` of ``phase`` (default: the policy) after every round; ``setup``:
    the run's `testbed_setup`, when the caller has it already (it printed its payload line)."""
    try:
        return _run_testbed(config, pair, progress, phase, setup)
    finally:
        release_freed_heap()  # the run's server and buffers are garbage now


def release_freed_heap() -> bool:
    """Hand the pages of freed C-heap memory back to the system (glibc's ``malloc_trim``); False
    where there is no glibc (macOS, musl), where there is nothing to do.

    Why: glibc keeps what a finished run freed (the target's batched forwards, fragmented over its
    threads' arenas) for the next allocation, so a process that runs run after run (`demo --study`,
    `testbed` over several policies) grows by gigabytes from run to run, and every run forks its server
    and device pool from that. The run's server and threads sit in reference cycles, so the collector
    frees them first; released, the process stays flat from run to run (`tools/study_memory.py`
    measures it, with the kept heap as its control)."""

    gc.collect()
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return False
    trim(0)
    return True


def _run_testbed(
    config: TestbedConfig, pair, progress: StepReporter | None, phase: str | None, setup: TestbedSetup | None
) -> TestbedResult:

    pair = pair or resolve_pair(config.pair)
    setup = setup or testbed_setup(config, pair)
    planner = ScenarioPlanner(
        setup.scenario,
        range(config.devices),
        setup.choice.wire,
        policy=config.policy,
        split=config.split,
        charge_planning=config.clock == "wall",
        user_policy=load_policy(config.user_policy) if config.user_policy else None,
        world=setup.world,
    )
    out = Path(config.out) if config.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    step = round_progress(progress, phase or config.policy, config.rounds)
    sink = RoundSink(config.clock == "wall", out / "rounds.jsonl" if out else None, step)
    # steady state: every job lasts at least one round, so `rounds` prompts per device never run out
    queues = device_prompt_queues(setup.tasks, config.rounds or 1, config.seed)
    bed = LocalTestbed(
        pair,
        server_config(config, setup),
        DeviceSetup(config.devices, drafts=setup.drafts, prompt_queues=queues, runner=config.runner),
        policy=planner,
        hooks=ServerHooks(on_round=sink, before_commit=sink.emulate_link),
        log_path=(out / "server.jsonl") if out else None,
    )
    served = serve_until_done(bed, pair)
    sink.close()
    if sink.rows:  # a run to the end of its jobs learns its length only now
        step(len(sink.rows) - 1, sink.tokens, len(sink.rows))
    summary = summarise_run(config, pair.name, setup, planner, sink, served)
    if out:
        write_run_summary(summary, out / "summary.json")
    result = TestbedResult(config, summary, setup, sink.rows)
    if served.interrupted is not None:
        where = f"; partial summary in {out / 'summary.json'}" if out else ""
        raise Interrupted.after(served.interrupted, f"interrupted after {len(sink.rows)} rounds{where}", partial=result)
    return result


def round_progress(progress: StepReporter | None, phase: str, rounds: int | None) -> Callable[..., None]:
    """What the round sink calls after each round (its index and the tokens so far): a `Step` of
    ``phase`` to ``progress``; ``total`` closes a run whose length was open."""
    say = reporter(progress)

    def round_done(round_idx: int, tokens: int, total: int | None = None) -> None:
        say(Step(phase, round_idx + 1, total or rounds, "rounds", f"{tokens} tokens"))

    return round_done


def server_config(config: TestbedConfig, setup: TestbedSetup):
    """The edge server's settings: the run's budget, length and seed, the scenario's γ_max, and the
    set-up's sampling and codecs, so the server moves the bits the planner charges (one payload:
    the server derives its wire from these codecs at the pair's vocabulary)."""

    return ServerConfig.make(
        max_new_tokens=config.max_new_tokens,
        rounds=config.rounds,
        gamma_max=setup.scenario.optimizer.gamma_max,
        seed=config.seed,
        **setup.choice.sampling.model_dump(),
        ul_codec=setup.choice.wire.ul_codec,
        dl_codec=setup.choice.wire.dl_codec,
        round_timeout_s=config.round_timeout_s,
        join_timeout_s=180.0,  # K devices load their drafts before round 0
    )


@dataclass(frozen=True)
class Served:
    """What a testbed's run left: the server's records (`TestbedSummary`), each job's text, the
    wall time, and the Ctrl-C or SIGTERM that stopped it (None: it ran to its end)."""

    records: Any
    texts: dict[int, str]
    wall_s: float
    interrupted: KeyboardInterrupt | None

    def integrity(self) -> Integrity:
        """Whether the texts are the server's record, per the server and every device's digest."""
        records = self.records.server.devices
        return Integrity(
            consistent=self.records.consistent,
            digests_match=all(r.digest_match is not False for r in records.values()),
            server_digests={d: r.digest for d, r in records.items()},
            jobs_finished=sum(1 for r in records.values() if r.finished),
            interrupted=self.interrupted is not None,
        )


def serve_until_done(bed, pair) -> Served:
    """Start a testbed and wait for its end. On Ctrl-C or SIGTERM the server finishes the round,
    says BYE and keeps what ran."""
    started = time.perf_counter()
    bed.start()
    interrupted = None
    try:
        records = bed.wait(timeout_s=3600)
    except KeyboardInterrupt as exc:
        interrupted = exc
        bed.stop()
        records = bed.wait(timeout_s=60)
    wall_s = time.perf_counter() - started
    texts = {d: pair.tokenizer.decode(r.generated, skip_special_tokens=True) for d, r in records.server.devices.items()}
    return Served(records, texts, wall_s, interrupted)


def summarise_run(
    config: TestbedConfig,
    pair_name: str,
    setup: TestbedSetup,
    planner: ScenarioPlanner,
    sink: RoundSink,
    served: Served,
) -> RunSummary:
    """The run's `RunSummary` from its set-up, planner, rounds and what the server left."""
    rows, scenario = sink.rows, setup.scenario
    r2 = read_profile(config.compute_profile, "compute_profile").get("r2") if config.compute_profile else None
    forecast_compute = compute_profile_used(scenario)
    channel = scenario.channel.model_dump(mode="json")
    caveats = forecast_caveats(
        pair=pair_name,
        measured=setup.measured,
        clock=config.clock,
        compute_profile=config.compute_profile,
        forecast_compute=forecast_compute,
        compute_profile_r2=r2,
        channel=channel,
        coupled_assumed=planner.coupled_estimator is not None and COUPLED_ASSUMED in setup.alpha_coupled_kinds,
    )
    return RunSummary(
        pair=pair_name,
        policy=config.user_policy or config.policy,
        clock=config.clock,
        scenario=config.scenario,
        devices=config.devices,
        config=config.model_dump(mode="json"),
        figures=run_figures(config, rows, sink.airtime_s),
        virtual_time_s=planner.clock.virtual_time_s,
        planned_goodput_tokens_per_s=planner.clock.planned_goodput_tokens_per_s,
        **model_parts(config, setup, planner, interrupted=served.interrupted is not None),
        dl_share=planner.clock.dl_share(),
        mean_draft_len=mean_draft_len(rows, config.devices),
        wall_time_s=served.wall_s,
        bits=bits_per_token(rows, setup.choice.wire),
        objective=scenario.optimizer.objective,
        service=service_metrics(
            rows, config.devices, energy=scenario.energy, p_ul_w=scenario.radio.p_ul_w, clock=config.clock
        ),
        payload=PayloadSummary(setup.choice.exact, setup.choice.to_dict(), setup.choice.headline),
        noise_psd_w_per_hz=planner.world.radio_params().noise_psd_w_per_hz,
        forecast_compute=forecast_compute,
        channel=channel,
        acceptance=DeviceAcceptance(
            drafts=setup.drafts,
            tasks=setup.tasks,
            prior=setup.alpha_prior,
            estimate=[float(a) for a in planner.estimator.alpha],
            measured=setup.measured,
            source=scenario.tasks.source if config.acceptance_profile else None,
        ),
        integrity=served.integrity(),
        compute_profile_r2=r2,
        caveats=caveats,
        texts=served.texts,
    )


def compute_profile_used(scenario: Scenario) -> dict:
    """What the forecast (and the virtual clock) times compute with: the scenario's profile, which
    on the wall clock is not this host's (a run says so: `forecast_caveats`)."""
    return {
        **scenario.compute.model_dump(mode="json"),
        "draft_latency_s_per_token": scenario.devices.draft_latency_s_per_token,
        "scenario": scenario.name,
    }


def model_parts(config: TestbedConfig, setup: TestbedSetup, planner: ScenarioPlanner, interrupted: bool) -> dict:
    """The model beside the run: how far the plans' estimates sat from the prior, the forecast and
    the analytic and Monte Carlo models at the realised rounds' γ and channels. None of them for a
    user's policy (the models do not know its mode rules), an ``interrupted`` run (it must stop
    within seconds) or a run asked for without them (``config.forecast``)."""
    predict = config.forecast and not interrupted and config.user_policy is None
    return {
        "estimate_gap": planned_estimate_gap(planner),
        "forecast": model_forecast(config, setup, planner) if predict else None,
        "conditioned": (
            ConditionedPrediction.from_json(model_predictions(planner, mc_rounds=200, seed=config.seed), prefix="")
            if predict and planner.clock.rounds
            else None
        ),
    }


def write_run_summary(summary: RunSummary, path: Path) -> None:
    """summary.json as side output: on a full disk one line, and the summary still returned and printed."""
    lost = write_side_json(summary.to_json(), path, "testbed summary", indent=2)
    if lost is not None:
        log.warning("%s", lost)
