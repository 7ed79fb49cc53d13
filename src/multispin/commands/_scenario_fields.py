"""Which scenario fields each verb that takes ``--scenario`` uses, and the one-line refusal of a
field the verb would otherwise ignore.

A setting accepted and then silently dropped misleads (the same goodput at every pilot SNR reads as
"robust to channel errors"), so every leaf of the scenario schema is classified here for every verb
(tests/commands/test_scenario_fields.py walks the schema): ``USED`` by the verb, or ``IGNORED``
with the reason, and a scenario that *sets* an ignored field is refused before any work starts.

"Sets" means: differs from what the scenario starts from. A preset sets nothing; a file sets the
fields whose values differ from its ``preset:`` (or, for the full dump ``multispin scenario show``
writes, from the preset its ``name`` names), or from the schema's defaults where the file starts
from none; ``sweep --set``/``--over`` set their fields.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from multispin.errors import ConfigError

VERBS = ("optimize", "sweep", "testbed", "demo")

_RUNNING_PAYLOAD = (
    "the running system sends what its sampling and codecs choose (--top-k, --ul-codec, "
    "--dl-codec) at the pair's vocabulary and charges those bits; the payload model is "
    "optimize's, sweep's and reproduce's"
)
_ONE_KNOWN_ROUND = (
    "optimize plans one round on a channel known exactly; mobility, pilot SNR and robust "
    "planning are studied by `multispin sweep`, testbed and demo"
)
_NO_DEADLINE = "the optimiser's model has no correction deadline, only the running system's clock has (testbed, demo)"

# verb -> dotted prefix -> why the verb does not use the field (a prefix covers the table's fields)
IGNORED: dict[str, dict[str, str]] = {
    "optimize": {
        **{f: _ONE_KNOWN_ROUND for f in ("channel.speed_kmh", "channel.pilot_snr_db", "channel.planning")},
        "channel.correction_deadline_s": _NO_DEADLINE,
    },
    "sweep": {
        "channel.correction_deadline_s": _NO_DEADLINE,
    },
    "testbed": {"payload.": _RUNNING_PAYLOAD},
    "demo": {"payload.": _RUNNING_PAYLOAD},
}

_EVERY_VERB = ("name", "devices.", "tasks.", "radio.", "compute.", "optimizer.", "seed")
_CHANNEL_KNOWLEDGE = ("channel.speed_kmh", "channel.carrier_hz", "channel.pilot_snr_db", "channel.planning")
# every verb that draws a channel: the carrier of a 3GPP path-loss law, and a trace of gains
_OWN_CHANNEL = ("channel.carrier_hz", "channel.trace")
# verb -> dotted prefixes the verb uses (testbed and demo: tasks and devices.acceptance are the online
# estimator's prior where the pair ships no measured α; compute and draft latencies are the virtual clock's)
USED: dict[str, tuple[str, ...]] = {
    "optimize": _EVERY_VERB + ("payload.", "energy.") + _OWN_CHANNEL,
    "sweep": tuple(p for p in _EVERY_VERB if p != "optimizer.")
    # each optimizer field by name: a field added later is classified for sweep, not used by default
    + ("optimizer.gamma_max", "optimizer.n_saa", "optimizer.objective", "optimizer.energy_weight_tokens_per_j")
    + ("payload.", "energy.")
    + _CHANNEL_KNOWLEDGE
    + ("channel.trace",),
    "testbed": _EVERY_VERB + ("channel.", "energy."),
    "demo": _EVERY_VERB + ("channel.", "energy."),
}


def _under(field: str, prefixes: Iterable[str]) -> bool:
    return any(field == p or (p.endswith(".") and field.startswith(p)) for p in prefixes)


def schema_fields(model: type | None = None, prefix: str = "") -> list[str]:
    """Every leaf of the scenario schema by dotted name (a table of tasks counts as one leaf)."""
    from pydantic import BaseModel

    from multispin.system.scenario import Scenario

    model = model or Scenario
    out = []
    for name, info in model.model_fields.items():
        ann = info.annotation
        if get_origin(ann) is Union:
            ann = next((a for a in get_args(ann) if a is not type(None)), ann)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += schema_fields(ann, f"{prefix}{name}.")
        else:
            out.append(prefix + name)
    return out


def why_ignored(verb: str, field: str) -> str | None:
    """The reason ``verb`` does not use ``field``; None where it uses it."""
    for prefix, why in IGNORED[verb].items():
        if _under(field, [prefix]):
            return why
    return None


def uses(verb: str, field: str) -> bool:
    return _under(field, USED[verb])


def _leaves(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, Mapping) and not prefix.endswith("acceptance."):
        out: dict[str, Any] = {}
        for k, v in data.items():
            key = f"{prefix}{k}"
            if key in ("tasks.acceptance", "preset"):
                out[key] = v
            else:
                out.update(_leaves(v, key + "."))
        return out
    return {prefix.rstrip("."): data}


def _schema_defaults() -> dict[str, Any]:
    """The defaults of the schema's optional tables (required tables have none)."""
    from multispin.system.scenario import ChannelConfig, OptimizerConfig, PayloadConfig

    return {
        **_leaves(
            {
                "payload": PayloadConfig().model_dump(mode="json"),
                "optimizer": OptimizerConfig().model_dump(mode="json"),
                "channel": ChannelConfig().model_dump(mode="json"),
            }
        ),
        "seed": 0,
    }


def fields_set(spec: str | Path | Any) -> set[str]:
    """The dotted fields that ``--scenario spec`` sets (module doc): none for a preset."""
    from multispin.system.config_file import expand_dotted, parse_text
    from multispin.system.scenario import Scenario, all_presets, get_preset

    if isinstance(spec, Scenario) or str(spec) in all_presets():
        return set()
    p = Path(str(spec))
    if not p.is_file():
        return set()
    raw = expand_dotted(parse_text(p.read_text(), p.suffix.lower(), repr(str(p))))
    if not isinstance(raw, dict):
        return set()
    named = _leaves(raw)
    named.pop("preset", None)
    start = raw.get("preset") or raw.get("name")
    base = _leaves(get_preset(start).to_dict()) if start in all_presets() else _schema_defaults()
    return {k for k, v in named.items() if k != "name" and (k not in base or base[k] != v)}


def refuse_ignored(verb: str, fields: Iterable[str], where: str) -> None:
    """One ConfigError naming the first field of ``fields`` that ``verb`` does not use, and why."""
    for field in sorted(fields):
        why = why_ignored(verb, field)
        if why is not None:
            raise ConfigError(
                f"{field}: set in {where}, but `multispin {verb}` does not use it: {why}; remove it there"
            )


def check_scenario_fields(verb: str, spec, extra: Iterable[str] = ()) -> set[str]:
    """Refuse a scenario (``--scenario spec``, plus ``extra`` fields set by flags) that sets a field
    ``verb`` ignores; returns the fields the file sets (a verb's own defaults yield to them)."""
    from multispin.system.scenario import all_presets

    given = fields_set(spec)
    if str(spec) not in all_presets():
        refuse_ignored(verb, given, str(spec))
    refuse_ignored(verb, extra, "the flags")
    return given


# testbed and demo run fewer devices and SAA samples than the paper's presets (real models on one
# host): their own defaults, which a scenario *file* that sets the field overrides (a 3-device file
# runs 3 devices); a flag overrides both
RUNNING_DEFAULTS = {
    "devices": ("devices.count", 8),
    "seed": ("seed", 0),
    "n_saa": ("optimizer.n_saa", 300),
    "split": ("radio.bandwidth_split", "equal"),
}


def running_values(spec, given: set[str], defaults: dict[str, Any] | None = None, **flags: Any) -> dict[str, Any]:
    """testbed/demo: each of ``flags`` (None: not given) as the flag, the file or the verb says
    (``defaults``: the verb's own, over RUNNING_DEFAULTS)."""
    from multispin.system.scenario_io import resolve_scenario

    out = {}
    sc = None
    for name, value in flags.items():
        field, default = RUNNING_DEFAULTS[name]
        default = (defaults or {}).get(name, default)
        if value is None and field in given:
            sc = sc or resolve_scenario(spec)
            node: Any = sc
            for part in field.split("."):
                node = getattr(node, part)
            value = node
        out[name] = default if value is None else value
    return out
