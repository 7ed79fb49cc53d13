"""One validated scenario: devices, tasks and acceptance, radio, compute profile, payload, optimiser.

Load it from a preset (`get_preset`), a dict (`scenario_from_dict`), a YAML, TOML or
JSON file (`load_scenario`), or either by name
([`multispin.system.scenario_io.resolve_scenario`][multispin.system.scenario_io.resolve_scenario], what ``--scenario`` takes), optionally overriding fields with dotted names
([`override`][multispin.system.scenario.Scenario.override]) and replacing the assumed acceptance table with a measured profile
(`load_acceptance_profile`, [`with_acceptance_profile`][multispin.system.scenario.Scenario.with_acceptance_profile]).

Every numeric field carries its unit in its name and an allowed range; a bad value raises one
[`ConfigError`][multispin.errors.ConfigError] whose one-line message names the field and the range.
A file (or dict) may start from a preset with ``preset: paper-qwen`` and override any field.

Presets (docs/system-model.md §2, §6): ``paper-qwen`` (Qwen2.5-0.5B → 14B), ``paper-r1``
(DeepSeek-R1-Distill-Qwen-1.5B → 32B) and ``smollm2-cpu`` (SmolLM2-135M measured on a CPU
host). The paper reports per-task acceptance rates only as a range (about 0.82–0.95 over
HumanEval, GSM8K, MT-Bench, IFEval); the per-task values of the paper presets are **assumed** (``tasks.assumed: true``) and should be replaced by a measured profile.
"""

from __future__ import annotations

import copy
import math
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from multispin.acceptance.shipped import acceptance_table
from multispin.errors import ConfigError, config_error_from_validation, did_you_mean
from multispin.speculative.codecs import make_codec
from multispin.system.config_file import FILE_SUFFIXES, expand_dotted, locate, parse_text
from multispin.system.payload import distribution_bits, draft_upload_bits_per_token, token_id_bits
from multispin.system.profile_fit import check_vocabulary, read_profile, warn_poor_fit
from multispin.system.radio import dbm_to_w
from multispin.vocabulary import Objective


def _fmt(v) -> str:
    if v is None:
        return "inf"
    return f"{v:g}" if isinstance(v, float) else str(v)


def _range(lo=None, hi=None, *, lo_open: bool = False, hi_open: bool = False, unit: str = ""):
    """An AfterValidator that keeps a value in an interval and says the interval when it does not."""
    text = (
        ("(" if lo_open or lo is None else "[")
        + ("-inf" if lo is None else _fmt(lo))
        + ", "
        + _fmt(hi)
        + (")" if hi_open or hi is None else "]")
        + (f" {unit}" if unit else "")
    )

    def check(v):
        ok = not (isinstance(v, float) and not math.isfinite(v))
        if ok and lo is not None:
            ok = v > lo if lo_open else v >= lo
        if ok and hi is not None:
            ok = v < hi if hi_open else v <= hi
        if not ok:
            raise PydanticCustomError("out_of_range", "must be in {allowed}", {"allowed": text})
        return v

    check.allowed = text  # type: ignore[attr-defined]
    return AfterValidator(check)


Alpha = Annotated[float, _range(0, 1, lo_open=True, hi_open=True)]
PositiveMeters = Annotated[float, _range(0, None, lo_open=True, unit="m")]
PositiveSeconds = Annotated[float, _range(0, None, lo_open=True, unit="s")]
Seconds = Annotated[float, _range(0, None, unit="s")]


# Receiver noise figure of a device-class radio: 3GPP's UE assumptions are 7-9 dB and handset
# front ends measure about 5-9 dB; 7 dB is the middle of that range. One value for every preset,
# verb and the reproduction (docs/system-model.md §2); --noise-figure-db changes it.
DEFAULT_NOISE_FIGURE_DB = 7.0


def checked_codec_spec(spec: str) -> str:
    """A codec spec `make_codec` accepts (a pydantic validator: its message names the forms it
    takes, under the field's name)."""
    try:
        make_codec(spec)
    except ConfigError as exc:
        raise PydanticCustomError("codec", "{m}", {"m": str(exc)}) from None
    return spec


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DropRule(_Model):
    """Where devices are dropped: distance from the server uniform in [min, max] (the paper), or
    uniform over the annulus area."""

    kind: Literal["uniform_distance", "uniform_area"] = "uniform_distance"
    min_distance_m: PositiveMeters = 100.0
    max_distance_m: PositiveMeters = 500.0

    @model_validator(mode="after")
    def _order(self):
        if self.max_distance_m < self.min_distance_m:
            raise PydanticCustomError(
                "out_of_range",
                "max_distance_m must be ≥ min_distance_m (got {a} < {b})",
                {"a": self.max_distance_m, "b": self.min_distance_m},
            )
        return self


class TaskTable(_Model):
    """Per-task acceptance rate α (per token). ``assumed`` marks values that were not measured."""

    acceptance: dict[str, Alpha]
    assumed: bool = False
    source: str = ""

    @model_validator(mode="after")
    def _nonempty(self):
        if not self.acceptance:
            raise PydanticCustomError("empty", "acceptance: at least one task is needed", {})
        return self


# the per-device lists of `DevicesConfig`: devices.count entries each
PER_DEVICE_LISTS = ("distances_m", "tasks", "acceptance", "acceptance_coupled", "draft_latencies_s_per_token")


class DevicesConfig(_Model):
    """The K devices. Explicit per-device lists override the random draws from the seed."""

    count: Annotated[int, _range(1, 100_000)]
    drop: DropRule = DropRule()
    distances_m: list[PositiveMeters] | None = None
    tasks: list[str] | None = None
    acceptance: list[Alpha] | None = None
    # the coupled rule's α per device (measured for its draft); absent: α × the assumed ratio
    # of its task (`system.coupled_alpha`)
    acceptance_coupled: list[Alpha] | None = None
    draft_latency_s_per_token: PositiveSeconds
    draft_latency_jitter_max: Annotated[float, _range(1, 10)] = 1.15
    draft_latencies_s_per_token: list[Seconds] | None = None


class RadioConfig(_Model):
    """OFDMA radio: bandwidth, powers, noise, path loss, fading, reciprocity, bandwidth split.

    Give the DL budget either in dBm (``p_dl_dbm``) or in watts (``p_dl_w``, 0 allowed: no DL).
    """

    bandwidth_hz: Annotated[float, _range(0, 1e12, lo_open=True, unit="Hz")]
    p_ul_dbm: Annotated[float, _range(-60, 60, unit="dBm")]
    p_dl_dbm: Annotated[float, _range(-60, 70, unit="dBm")] | None = None
    p_dl_w: Annotated[float, _range(0, 10000.0, unit="W")] | None = None
    noise_psd_dbm_per_hz: Annotated[float, _range(-230, -100, unit="dBm/Hz")] = -174.0
    noise_figure_db: Annotated[float, _range(0, 40, unit="dB")] = DEFAULT_NOISE_FIGURE_DB
    path_loss_db_at_1m: Annotated[float, _range(-200, 0, unit="dB")] = -30.0
    path_loss_exponent: Annotated[float, _range(1, 8)] = 3.5
    # the large-scale law: the paper's log-distance (the two fields above), or 3GPP TR 38.901's
    # UMa, UMi street canyon or InH (mixed office): path loss, LOS probability and correlated
    # log-normal shadowing drawn once per drop at carrier channel.carrier_hz (system/tr38901.py)
    path_loss_model: Literal["log-distance", "3gpp-uma", "3gpp-umi", "3gpp-inh"] = "log-distance"
    bs_height_m: Annotated[float, _range(1, 100, lo_open=True, unit="m")] | None = None  # None: the standard's
    ut_height_m: Annotated[float, _range(1.5, 13, unit="m")] = 1.5
    shadowing: bool = True  # 3GPP models: draw the shadow fading (off: path loss and LOS state only)
    fading: Literal["rayleigh", "none"] = "rayleigh"
    reciprocity: bool = True
    bandwidth_split: Literal["equal", "optimized"] = "equal"

    @model_validator(mode="after")
    def _one_dl_budget(self):
        if (self.p_dl_dbm is None) == (self.p_dl_w is None):
            raise PydanticCustomError("dl_budget", "give exactly one of p_dl_dbm (dBm) and p_dl_w (W, ≥ 0)", {})
        return self

    @property
    def p_ul_w(self) -> float:
        return float(dbm_to_w(self.p_ul_dbm))

    @property
    def p_dl_watts(self) -> float:
        return float(self.p_dl_w) if self.p_dl_w is not None else float(dbm_to_w(self.p_dl_dbm))

    @property
    def p_dl_dbm_value(self) -> float:
        if self.p_dl_dbm is not None:
            return float(self.p_dl_dbm)
        return float("-inf") if self.p_dl_w == 0 else 10 * math.log10(self.p_dl_w) + 30


class ComputeConfig(_Model):
    """Server verification profile (T_ver^0, T_ver^1 per device, T_ver^tok per batch token)."""

    t_ver0_s: Seconds
    t_ver1_s: Seconds
    t_ver_tok_s: Seconds = 0.0


class PayloadConfig(_Model):
    """Codec of the one distribution a rejected device moves, and whether signalling bits count.

    A payload *model* for optimisation studies (`optimize`, `reproduce`): one codec on both links.
    The running system (generate, serve, testbed, demo) does not use it: it plans and charges the
    bits of its own UL and DL codecs and its pair's vocabulary (`system.payload.WirePayload`).
    """

    # a codec spec, as --ul-codec takes it: sparse:v_eff=N,q=16|32, dense-fp32|fp16|bf16, lattice:l=N
    codec: Annotated[str, AfterValidator(checked_codec_spec)] = "sparse:v_eff=1024,q=16"
    vocab_size: Annotated[int, _range(2, 100_000_000)] = 151_665
    count_signalling_bits: bool = True

    @property
    def distribution_bits(self) -> int:
        """S: bits of one encoded distribution (the codec's own count)."""
        return distribution_bits(self.codec, self.vocab_size)

    @property
    def payload_bits(self) -> int:
        """S_k the optimiser uses: S, plus the correction id's return trip when signalling counts."""
        return self.distribution_bits + (token_id_bits(self.vocab_size) if self.count_signalling_bits else 0)

    @property
    def draft_upload_bits_per_token(self) -> int:
        return draft_upload_bits_per_token(self.vocab_size) if self.count_signalling_bits else 0

    @property
    def coupled_upload_bits_per_token(self) -> int:
        """A coupled draft's UL bits per token: the id only (no q scalar)."""
        return token_id_bits(self.vocab_size) if self.count_signalling_bits else 0


class OptimizerConfig(_Model):
    """γ_max (tokens), the SAA sample count N_SAA and the objective (docs/service.md).

    ``objective``: ``sum`` (the paper's Σ_k G_k), ``proportional-fair`` (Σ_k log G_k),
    ``max-min`` (min_k G_k) or ``energy`` (Σ_k G_k − w·Σ_k P̄_k: tokens per second less
    ``energy_weight_tokens_per_j`` times the devices' mean power, `energy`'s model).
    """

    # at least 1: γ_max bounds what the planner chooses among, and a device's γ = 0 (a target-only
    # round) stays among the choices of every γ_max; with γ_max = 0 there would be nothing to plan
    gamma_max: Annotated[int, _range(1, 64)] = 20
    n_saa: Annotated[int, _range(1, 1_000_000)] = 1000
    objective: Objective = "sum"
    energy_weight_tokens_per_j: Annotated[float, _range(0, 1e6, unit="tokens/J")] = 1.0


class EnergyConfig(_Model):
    """The devices' energy model (docs/service.md: each default and where it comes from).

    A device spends, per round: P_tx / η_PA over its uplink airtime (drafting uploads at P^ul and,
    in UL mode, the correction at its planned power), ``rx_power_w`` over its DL correction's
    airtime, ``draft_power_w`` over its drafting compute (γ·T^dft) and ``idle_power_w`` for the
    rest of the round (waiting for the server)."""

    pa_efficiency: Annotated[float, _range(0, 1, lo_open=True)] = 0.25
    rx_power_w: Annotated[float, _range(0, 100, unit="W")] = 1.0
    draft_power_w: Annotated[float, _range(0, 1000, unit="W")] = 4.0
    idle_power_w: Annotated[float, _range(0, 100, unit="W")] = 0.2


class ChannelConfig(_Model):
    """Channel knowledge and time variation (docs/channel-knowledge.md). The defaults are the
    paper's: independent Rayleigh blocks, known exactly when the round is planned.

    ``speed_kmh``: devices move; the fading follows a Gauss–Markov process with Jakes' correlation
    J0(2π f_D Δt) over each round's duration (f_D from the speed at ``carrier_hz``) and the server
    plans on the pilots of the previous round. ``pilot_snr_db``: the estimate has an error of
    variance 10^(−SNR/10) of the mean fading power. ``planning``: ``naive`` plans on the estimate as
    if it were exact; ``robust`` on channel samples from the posterior given the estimate.
    ``correction_deadline_s`` (the running system's clock): a correction that misses it is
    retransmitted at the next round, and the clock charges the retransmission.
    """

    speed_kmh: Annotated[float, _range(0, 500, unit="km/h")] | None = None
    carrier_hz: Annotated[float, _range(0, 1e12, lo_open=True, unit="Hz")] = 3.5e9
    pilot_snr_db: Annotated[float, _range(-30, 80, unit="dB")] | None = None
    planning: Literal["naive", "robust"] = "naive"
    # the running system's clock only: a correction whose airtime exceeds this deadline is cut
    # there and retransmitted at the next round on that round's channel (None: no deadline)
    correction_deadline_s: Annotated[float, _range(0, None, lo_open=True, unit="s")] | None = None
    # per-device, per-round gains from a CSV file (system/trace.py, docs/own-channel.md): they replace
    # the path loss and the fading; a path relative to the working folder
    trace: str | None = None


class Scenario(_Model):
    """One configuration that feeds the optimiser, the simulator and the running system."""

    name: str = "custom"
    devices: DevicesConfig
    tasks: TaskTable
    radio: RadioConfig
    compute: ComputeConfig
    payload: PayloadConfig = PayloadConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    channel: ChannelConfig = ChannelConfig()
    energy: EnergyConfig = EnergyConfig()
    seed: Annotated[int, _range(0, 2**63 - 1)] = 0

    @model_validator(mode="after")
    def _per_device_lists(self):
        k = self.devices.count
        for name in PER_DEVICE_LISTS:
            v = getattr(self.devices, name)
            if v is not None and len(v) != k:
                raise PydanticCustomError(
                    "length",
                    "devices.{f}: needs devices.count = {k} entries (got {n})",
                    {"f": name, "k": k, "n": len(v)},
                )
        if self.devices.distances_m is None and self.devices.drop.min_distance_m <= 0:
            raise PydanticCustomError("range", "devices.drop.min_distance_m: must be > 0", {})
        if self.devices.tasks is not None:
            unknown = sorted(set(self.devices.tasks) - set(self.tasks.acceptance))
            if unknown:
                raise PydanticCustomError(
                    "task",
                    "devices.tasks: unknown task(s) {u} (allowed: {a})",
                    {"u": ", ".join(unknown), "a": ", ".join(sorted(self.tasks.acceptance))},
                )
        self._check_3gpp_distances()
        if self.channel.trace is not None:
            if self.channel.speed_kmh is not None or self.channel.pilot_snr_db is not None:
                raise PydanticCustomError(
                    "channel",
                    "channel.trace: the trace replaces the channel process; channel.speed_kmh and "
                    "channel.pilot_snr_db do not apply to it (leave them unset)",
                    {},
                )
            # lazy: a measured channel is opt-in, and this module is on the CLI start-up path
            from multispin.system.trace import load_trace  # noqa: PLC0415

            load_trace(self.channel.trace, self.devices.count)  # one-line error naming file and line
        if (
            self.channel.speed_kmh is not None or self.channel.pilot_snr_db is not None
        ) and self.radio.fading != "rayleigh":
            raise PydanticCustomError(
                "channel",
                "channel.speed_kmh / channel.pilot_snr_db: need radio.fading = rayleigh (got {f})",
                {"f": self.radio.fading},
            )
        v_eff = getattr(make_codec(self.payload.codec), "v_eff", None)
        if v_eff is not None and v_eff > self.payload.vocab_size:
            raise PydanticCustomError(
                "range",
                "payload.codec: v_eff must be in [1, vocab_size={v}] (got {e})",
                {"v": self.payload.vocab_size, "e": v_eff},
            )
        return self

    def _check_3gpp_distances(self) -> None:
        """A 3GPP law holds over its distance range only (TR 38.901 Table 7.4.1-1)."""
        model = self.radio.path_loss_model
        if model == "log-distance":
            return
        # lazy: the 3GPP laws are opt-in, and this module is on the CLI start-up path
        from multispin.system.tr38901 import DISTANCE_RANGE_M  # noqa: PLC0415

        lo, hi = DISTANCE_RANGE_M[model.removeprefix("3gpp-")]
        d = self.devices.distances_m or [self.devices.drop.min_distance_m, self.devices.drop.max_distance_m]
        if min(d) < lo or max(d) > hi:
            raise PydanticCustomError(
                "range",
                "radio.path_loss_model: {m} holds for device distances in [{lo}, {hi}] m (the drop spans "
                "{a} to {b} m; set devices.drop.min_distance_m / max_distance_m)",
                {"m": model, "lo": f"{lo:g}", "hi": f"{hi:g}", "a": f"{min(d):g}", "b": f"{max(d):g}"},
            )

    # ------------------------------------------------------------------ derived values
    @property
    def noise_psd_w_per_hz(self) -> float:
        return float(dbm_to_w(self.radio.noise_psd_dbm_per_hz + self.radio.noise_figure_db))

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def override(self, changes: dict[str, Any]) -> Scenario:
        """A copy with fields set by dotted name, e.g. ``{"devices.count": 8, "radio.p_dl_dbm": 22}``.

        Setting one of ``radio.p_dl_dbm`` / ``radio.p_dl_w`` clears the other; setting
        ``devices.count`` drops per-device lists of the old length.
        """
        data = self.to_dict()
        for dotted, value in changes.items():
            parts = dotted.split(".")
            node = data
            for p in parts[:-1]:
                if not isinstance(node.get(p), dict):
                    raise ConfigError(f"{dotted}: unknown field")
                node = node[p]
            node[parts[-1]] = value
            if dotted == "radio.p_dl_dbm":
                data["radio"]["p_dl_w"] = None
            elif dotted == "radio.p_dl_w":
                data["radio"]["p_dl_dbm"] = None
            elif dotted == "devices.count":
                for name in PER_DEVICE_LISTS:
                    v = data["devices"].get(name)
                    if v is not None and len(v) != value:
                        data["devices"][name] = None
        return _validate(data)

    def with_acceptance_profile(self, profile, force: bool = False) -> Scenario:
        """Replace the (assumed) task table with measured per-task acceptance rates.

        ``profile``: a path to an acceptance-profile JSON (what ``multispin measure --out`` writes),
        its parsed dict, or a list of either (one task per file is fine: the tasks are merged).
        See `parse_acceptance_profile`. A profile measured on another vocabulary than
        ``payload.vocab_size`` is refused; ``force`` applies it with a warning.
        """
        items = profile if isinstance(profile, (list, tuple)) else [profile]
        if not items:
            raise ConfigError("acceptance_profile: at least one profile is needed")
        table: dict[str, float] = {}
        sources = []
        for item in items:
            data = read_profile(item, "acceptance_profile")
            check_vocabulary(data, self.payload.vocab_size, self.name, "acceptance_profile", force)
            table.update(parse_acceptance_profile(data))
            sources.append("measured" if isinstance(item, dict) else str(item))
        data = self.to_dict()
        data["tasks"] = {"acceptance": table, "assumed": False, "source": "measured: " + ", ".join(sources)}
        return _validate(data)

    def with_compute_profile(self, profile, draft: str | None = None, force: bool = False) -> Scenario:
        """Replace the compute profile with a measured one (what ``multispin profile`` writes).

        Takes ``t_ver0_s``, ``t_ver1_s``, ``t_ver_tok_s`` and, when present,
        ``draft_latency_s_per_token`` (a number, or a table draft name → s/token: the entry named
        ``draft``; without ``draft``, the devices take the profile's drafts in turn, device k the
        (k mod n)-th, as ``generate`` and ``testbed`` assign them). A profile of another
        vocabulary is refused (``force``: applied with a warning); a fit with R² < 0.5 warns.
        """
        profile = read_profile(profile, "compute_profile")
        check_vocabulary(profile, self.payload.vocab_size, self.name, "compute_profile", force)
        warn_poor_fit(profile, "compute_profile")
        changes: dict[str, Any] = {}
        for key in ("t_ver0_s", "t_ver1_s", "t_ver_tok_s"):
            if key in profile:
                changes[f"compute.{key}"] = profile[key]
        if not changes:
            raise ConfigError("compute_profile: needs t_ver0_s, t_ver1_s (and optionally t_ver_tok_s)")
        d = profile.get("draft_latency_s_per_token")
        if isinstance(d, dict):
            if draft is not None:
                if draft not in d:
                    raise ConfigError(
                        f"compute_profile.draft_latency_s_per_token: no draft {draft!r} "
                        f"(allowed: {', '.join(map(str, d))})"
                    )
                d = d[draft]
            elif len(d) == 1:
                d = next(iter(d.values()))
            elif d:
                per_draft = list(d.values())
                k = self.devices.count
                changes["devices.draft_latency_s_per_token"] = sum(per_draft) / len(per_draft)
                changes["devices.draft_latencies_s_per_token"] = [per_draft[i % len(per_draft)] for i in range(k)]
                return self.override(changes)
        if d is not None:
            changes["devices.draft_latency_s_per_token"] = d
            changes["devices.draft_latencies_s_per_token"] = None
        return self.override(changes)


# ---------------------------------------------------------------------------- errors


def _allowed_for(model: type[BaseModel], loc: tuple) -> str | None:
    cls: Any = model
    info = None
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or part not in cls.model_fields:
            return None
        info = cls.model_fields[part]
        ann = info.annotation
        if get_origin(ann) is Union:
            ann = next((a for a in get_args(ann) if a is not type(None)), ann)
        cls = ann
    if info is None:
        return None
    if isinstance(cls, type) and issubclass(cls, BaseModel):
        return "a table of: " + ", ".join(cls.model_fields)
    if get_origin(cls) is Literal:
        return ", ".join(map(str, get_args(cls)))
    for m in list(info.metadata) + [a for a in get_args(cls)[1:]]:
        if isinstance(m, AfterValidator) and hasattr(m.func, "allowed"):
            return m.func.allowed  # type: ignore[attr-defined]
    return None


def _fields_at(loc: tuple) -> list[str]:
    """The field names of the model that holds the last key of ``loc``."""
    cls: Any = Scenario
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or part not in cls.model_fields:
            return []
        ann = cls.model_fields[part].annotation
        if get_origin(ann) is Union:
            ann = next((a for a in get_args(ann) if a is not type(None)), ann)
        cls = ann
    return list(cls.model_fields) if isinstance(cls, type) and issubclass(cls, BaseModel) else []


def _suggest_field(loc: tuple) -> str:
    fields = _fields_at(loc)
    if not fields or not loc:
        return ""
    return did_you_mean(loc[-1], fields) or f" (allowed: {', '.join(fields)})"


class _WithRanges:
    """Adds the allowed range to "Field required" errors before the one-line formatting."""

    def __init__(self, exc: ValidationError):
        self.exc = exc

    def errors(self):
        out = []
        for e in self.exc.errors():
            if e.get("type") == "extra_forbidden":
                loc = tuple(e.get("loc", ()))
                e = {**e, "msg": "unknown field" + _suggest_field(loc)}
            elif e.get("type") == "missing":
                allowed = _allowed_for(Scenario, tuple(e.get("loc", ())))
                if allowed:
                    e = {**e, "msg": f"Field required (allowed: {allowed})"}
            out.append(e)
        return out


def _validate(data: dict[str, Any]) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise config_error_from_validation(_WithRanges(exc)) from None


# ---------------------------------------------------------------------------- presets

_PAPER_COMMON: dict[str, Any] = {
    "radio": {
        "bandwidth_hz": 10e6,
        "p_ul_dbm": 10.0,
        "p_dl_dbm": 10.0 + 10 * math.log10(4.0),  # P^dl / P^ul = 4 (the paper also uses 16)
        "noise_psd_dbm_per_hz": -174.0,
        # The paper does not publish its noise level; every preset uses one physical receiver noise
        # figure (DEFAULT_NOISE_FIGURE_DB). `multispin reproduce --figure identification` maps every
        # claim over 0-30 dB instead of picking the value that makes a claim pass.
        "noise_figure_db": DEFAULT_NOISE_FIGURE_DB,
        "path_loss_db_at_1m": -30.0,
        "path_loss_exponent": 3.5,
        "fading": "rayleigh",
        "reciprocity": True,
        "bandwidth_split": "equal",
    },
    "payload": {
        "codec": "sparse:v_eff=1024,q=16",
        "vocab_size": 151_665,
        # The paper neglects drafting uploads and correction ids; set true to count them.
        "count_signalling_bits": False,
    },
    "optimizer": {"gamma_max": 20, "n_saa": 1000},
    "seed": 0,
}

_ASSUMED_SOURCE = (
    "ASSUMED: the paper reports per-task acceptance only as the range 0.82-0.95 over "
    "HumanEval, GSM8K, MT-Bench and IFEval; these per-task values are placeholders inside "
    "that range. Replace them with a measured acceptance-profile JSON."
)

PRESETS: dict[str, dict[str, Any]] = {
    "paper-qwen": {
        **copy.deepcopy(_PAPER_COMMON),
        "name": "paper-qwen",
        "devices": {
            "count": 20,
            "drop": {"kind": "uniform_distance", "min_distance_m": 100.0, "max_distance_m": 500.0},
            "draft_latency_s_per_token": 0.0152,  # Qwen2.5-0.5B, 15.2 ms/token (× U[1, 1.15] per device)
            "draft_latency_jitter_max": 1.15,
        },
        "tasks": {
            "acceptance": {"humaneval": 0.93, "gsm8k": 0.90, "mt_bench": 0.84, "ifeval": 0.87},
            "assumed": True,
            "source": _ASSUMED_SOURCE,
        },
        "compute": {"t_ver0_s": 0.0428, "t_ver1_s": 0.0076, "t_ver_tok_s": 0.0},  # Qwen2.5-14B on A100
    },
    "paper-r1": {
        **copy.deepcopy(_PAPER_COMMON),
        "name": "paper-r1",
        "devices": {
            "count": 20,
            "drop": {"kind": "uniform_distance", "min_distance_m": 100.0, "max_distance_m": 500.0},
            "draft_latency_s_per_token": 0.0196,  # R1-Distill-Qwen-1.5B, 19.6 ms/token
            "draft_latency_jitter_max": 1.15,
        },
        "tasks": {
            "acceptance": {"humaneval": 0.91, "gsm8k": 0.94, "mt_bench": 0.82, "ifeval": 0.85},
            "assumed": True,
            "source": _ASSUMED_SOURCE,
        },
        "compute": {"t_ver0_s": 0.0693, "t_ver1_s": 0.0091, "t_ver_tok_s": 0.0},  # R1-Distill-Qwen-32B on A100
    },
    # the paper's cell, its devices in the outer 100 m ring (U[400, 500] m instead of U[100, 500] m):
    # where the air is dearest, the question "uplink, downlink or neither" matters most
    "paper-qwen-cell-edge": {
        **copy.deepcopy(_PAPER_COMMON),
        "name": "paper-qwen-cell-edge",
        "devices": {
            "count": 20,
            "drop": {"kind": "uniform_distance", "min_distance_m": 400.0, "max_distance_m": 500.0},
            "draft_latency_s_per_token": 0.0152,
            "draft_latency_jitter_max": 1.15,
        },
        "tasks": {
            "acceptance": {"humaneval": 0.93, "gsm8k": 0.90, "mt_bench": 0.84, "ifeval": 0.87},
            "assumed": True,
            "source": _ASSUMED_SOURCE,
        },
        "compute": {"t_ver0_s": 0.0428, "t_ver1_s": 0.0076, "t_ver_tok_s": 0.0},
    },
    "smollm2-cpu": {
        **copy.deepcopy(_PAPER_COMMON),
        "name": "smollm2-cpu",
        "devices": {
            "count": 20,
            "drop": {"kind": "uniform_distance", "min_distance_m": 100.0, "max_distance_m": 500.0},
            # mean of the 4 default drafts' measured s/token (data/profiles/smollm2-135m/compute.json)
            "draft_latency_s_per_token": 0.1875,
            "draft_latency_jitter_max": 1.15,
        },
        "tasks": {
            "acceptance": {"chat": 0.7299, "code": 0.8073},
            "assumed": False,
            "source": (
                "MEASURED: alpha per task of the q4g64 draft of smollm2-135m (multispin measure, T = 1, "
                "top-k 1024, gamma 8, seed 0; chat = 32 ShareGPT first turns, code = 48 HumanEval "
                "problems, 64 tokens each), data/profiles/smollm2-135m/acceptance-q4g64-<task>-t1-topk1024"
                ".json, docs/acceptance.md"
            ),
        },
        # SmolLM2-135M target on this 2-core CPU host, 1 torch thread (data/profiles/smollm2-135m/compute.json)
        "compute": {"t_ver0_s": 0.3096, "t_ver1_s": 0.01512, "t_ver_tok_s": 0.01534},
        "payload": {**_PAPER_COMMON["payload"], "vocab_size": 49_152},  # SmolLM2's vocabulary
    },
}


# Scenarios on measured acceptance: a paper preset's radio and compute, or this host's,
# with the per-task α that `multispin measure` measured for a real pair's default draft under the
# testbed's sampling policy (T = 1, top-k 1024), read from the shipped profiles when the package
# loads, so that the numbers cannot drift from the files. A preset whose profiles are not all
# shipped is not offered.
MEASURED_PRESETS = {
    # name: (base preset, pair, draft, what the compute is)
    "measured-smollm2-a100": ("paper-qwen", "smollm2-135m", "q5g64", "Qwen2.5-14B on an A100 as published"),
    "measured-smollm2-host": ("smollm2-cpu", "smollm2-135m", "q5g64", "SmolLM2-135M measured on this 2-core host"),
    "measured-qwen-a100": ("paper-qwen", "qwen2.5-coder-0.5b", "q4g128", "Qwen2.5-14B on an A100 as published"),
}
MEASURED_TASKS = ("humaneval", "mt_bench_math", "mt_bench", "sharegpt")
MEASURED_POLICY = {"temperature": 1.0, "top_k": 1024, "top_p": 1.0}


def _measured_preset(name: str, base: str, pair: str, draft: str, compute: str) -> dict[str, Any] | None:
    table = acceptance_table(pair, MEASURED_POLICY).get(draft, {})
    if not set(MEASURED_TASKS) <= set(table):
        return None
    data = copy.deepcopy(PRESETS[base])
    data["name"] = name
    data["tasks"] = {
        "acceptance": {t: round(table[t], 4) for t in MEASURED_TASKS},
        "assumed": False,
        "source": (
            f"MEASURED acceptance, {compute} compute: alpha per task of the {draft} draft of {pair} "
            f"(multispin measure, T = 1, top-k 1024, gamma 8, seed 0; data/profiles/{pair}/, "
            f"docs/acceptance.md). mt_bench_math is MT-Bench's math category, the offline stand-in "
            f"for GSM8K; sharegpt stands in for no paper task (IFEval is not obtainable offline)."
        ),
    }
    if pair == "smollm2-135m":
        data["payload"] = {**data["payload"], "vocab_size": 49_152}
    return data


@lru_cache(maxsize=1)
def _preset_tables() -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(every preset, the measured presets whose shipped profiles are damaged with the loader's
    line), built on first use from the shipped profiles, never at import. A damaged preset is not
    offered, and asking for it gives the loader's line (the file and the field); every other preset
    and verb still works."""
    presets, damaged = dict(PRESETS), {}
    for name, args in MEASURED_PRESETS.items():
        try:
            data = _measured_preset(name, *args)
        except ConfigError as exc:
            damaged[name] = str(exc)
            continue
        if data is not None:
            presets[name] = data
    return presets, damaged


def all_presets() -> dict[str, dict[str, Any]]:
    """Every preset: the paper's, the host's, then those on measured acceptance."""
    return _preset_tables()[0]


def damaged_presets() -> dict[str, str]:
    """Measured presets withheld because a shipped profile is damaged: name -> the loader's line."""
    return _preset_tables()[1]


def preset_names() -> list[str]:
    """The paper's presets, the host's, then those on measured acceptance."""
    return list(all_presets())


def _unknown_preset(name: Any) -> ConfigError:
    if name in damaged_presets():
        return ConfigError(f"preset: {name}: {damaged_presets()[name]}", locs=(("preset",),))
    return ConfigError(
        f"preset: unknown preset {name!r}{did_you_mean(name, preset_names())} (allowed: {', '.join(preset_names())})",
        locs=(("preset",),),
    )


def _deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    # one DL budget: an override in one unit replaces the preset's other unit
    radio_over = over.get("radio") if isinstance(over.get("radio"), dict) else {}
    if "radio" in out and isinstance(out["radio"], dict):
        if "p_dl_w" in radio_over and "p_dl_dbm" not in radio_over:
            out["radio"].pop("p_dl_dbm", None)
        if "p_dl_dbm" in radio_over and "p_dl_w" not in radio_over:
            out["radio"].pop("p_dl_w", None)
    return out


def get_preset(name: str) -> Scenario:
    """A preset scenario by name: ``paper-qwen``, ``paper-r1`` or ``smollm2-cpu`` (see `PRESETS`)."""
    if name not in all_presets():
        raise _unknown_preset(name)
    return _validate(copy.deepcopy(all_presets()[name]))


def scenario_from_dict(data: dict[str, Any]) -> Scenario:
    """Validate a scenario dict; ``preset: NAME`` starts from that preset and overrides its fields.

    Keys may be dotted (``{"radio.p_dl_dbm": 22}`` is ``{"radio": {"p_dl_dbm": 22}}``)."""
    if not isinstance(data, dict):
        raise ConfigError(f"scenario: must be a table of fields (got {type(data).__name__})")
    data = expand_dotted(data)
    name = data.pop("preset", None)
    if name is not None:
        if name not in all_presets():
            raise _unknown_preset(name)
        data = _deep_merge(all_presets()[name], data)
    else:
        _check_complete(data)
    return _validate(data)


def _check_complete(data: dict[str, Any]) -> None:
    """A scenario without ``preset:`` must give every required table; say so in one line and
    suggest starting from a preset instead of listing each missing field."""
    required = [f for f, info in Scenario.model_fields.items() if info.is_required()]
    missing = [f for f in required if f not in data]
    if missing:
        raise ConfigError(
            f"preset: not given, and {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing; "
            f"start from a preset (`preset: paper-qwen`, allowed: {', '.join(preset_names())}) "
            f"or give every field (`multispin scenario show paper-qwen` prints one)"
        )


def load_scenario(path: str | Path) -> Scenario:
    """Load a scenario from a YAML (.yaml/.yml), TOML (.toml) or JSON (.json) file.

    The file may start from a preset (``preset: paper-qwen``) and set any field, nested or
    dotted. Errors name the file with line and column.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"scenario: no such file {str(p)!r}")
    suffix = p.suffix.lower()
    if suffix not in FILE_SUFFIXES:
        raise ConfigError(f"scenario: unknown file type {suffix!r} (allowed: {', '.join(FILE_SUFFIXES)})")
    text = p.read_text()
    data = parse_text(text, suffix, repr(str(p)))
    try:
        return scenario_from_dict(expand_dotted(data))
    except ConfigError as exc:
        at = locate(text, exc.locs[0]) if getattr(exc, "locs", None) else None
        where = f"{p}:{at[0]}:{at[1]}" if at else str(p)
        raise ConfigError(f"{where}: {exc}") from None


# ---------------------------------------------------------------------------- acceptance profiles


def parse_acceptance_profile(data: dict[str, Any]) -> dict[str, float]:
    """Per-task α from an acceptance-profile dict.

    Accepted shapes: ``{"tasks": {"gsm8k": 0.91, ...}}`` or, per task, a statistics object with
    ``alpha`` or ``token_acceptance_rate`` (what ``multispin.speculative.stats.AcceptanceStats.to_dict``
    writes): ``{"tasks": {"gsm8k": {"token_acceptance_rate": 0.91, "num_drafts": 500, ...}}}``.
    """
    tasks = data.get("tasks") if isinstance(data, dict) else None
    if not isinstance(tasks, dict) or not tasks:
        raise ConfigError("acceptance_profile.tasks: must be a non-empty table task -> acceptance rate in (0, 1)")
    out: dict[str, float] = {}
    for task, v in tasks.items():
        if isinstance(v, dict):
            v = v.get("alpha", v.get("token_acceptance_rate"))
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < float(v) < 1:
            raise ConfigError(f"acceptance_profile.tasks.{task}: must be in (0, 1) (got {v!r})")
        out[str(task)] = float(v)
    return out


def load_acceptance_profile(path: str | Path) -> dict[str, float]:
    """Read a measured acceptance-profile JSON (see `parse_acceptance_profile`)."""
    return parse_acceptance_profile(read_profile(path, "acceptance_profile"))
