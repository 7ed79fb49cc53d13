"""The ``--scenario`` vocabulary: a preset name or a YAML/TOML/JSON file, plus the flags every
verb that builds a scenario shares (devices, powers, noise figure, seed, N_SAA, split).

Files may nest tables (``radio: {p_dl_dbm: 22}``) or write dotted keys (``radio.p_dl_dbm: 22``),
as the README does. A parse error names the file, line and column; a bad field names the field,
its allowed values and, for a misspelt key, the closest real one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from multispin.errors import ConfigError, did_you_mean

# expand_dotted, load_scenario and FILE_SUFFIXES are re-exported: reading a file is the scenario's
# own job (system/scenario.py), parsing one is system/config_file.py's
from multispin.system.config_file import FILE_SUFFIXES, expand_dotted, locate  # noqa: F401
from multispin.system.scenario import (  # noqa: F401
    PRESETS,
    Scenario,
    all_presets,
    damaged_presets,
    get_preset,
    load_scenario,
    preset_names,
    scenario_from_dict,
)


def resolve_scenario(spec: str | Path | Scenario) -> Scenario:
    """A scenario from a preset name (``paper-qwen``, ``paper-r1``, ``smollm2-cpu``), a scenario
    file (``.yaml``, ``.yml``, ``.toml``, ``.json``), or a Scenario (returned as is)."""
    if isinstance(spec, Scenario):
        return spec
    text = str(spec)
    if text in all_presets():
        return get_preset(text)
    p = Path(text)
    if p.suffix.lower() in FILE_SUFFIXES or p.exists():
        return load_scenario(p)
    if text in damaged_presets():
        raise ConfigError(f"scenario: {text}: {damaged_presets()[text]}")
    raise ConfigError(
        f"scenario: unknown preset {text!r}{did_you_mean(text, preset_names())} "
        f"(allowed: {', '.join(preset_names())}, or a {'/'.join(FILE_SUFFIXES)} file)"
    )


# The scenario field each command-line flag (and each keyword of `multispin.scenario`) sets.
FLAG_FIELDS = {
    "devices": "devices.count",
    "p_dl_dbm": "radio.p_dl_dbm",
    "p_ul_dbm": "radio.p_ul_dbm",
    "noise_figure_db": "radio.noise_figure_db",
    "seed": "seed",
    "n_saa": "optimizer.n_saa",
    "split": "radio.bandwidth_split",
    "speed_kmh": "channel.speed_kmh",
    "pilot_snr_db": "channel.pilot_snr_db",
    "csi_planning": "channel.planning",
    "objective": "optimizer.objective",
    "energy_weight": "optimizer.energy_weight_tokens_per_j",
}


def with_overrides(scenario: Scenario, /, **flags: Any) -> Scenario:
    """The scenario with the fields the command-line flags set, named as in `FLAG_FIELDS`
    (``None`` keeps the scenario's value)."""
    unknown = sorted(set(flags) - set(FLAG_FIELDS))
    if unknown:  # a programming error, not a user's: the flags are fixed by the verbs
        raise TypeError(f"with_overrides: unknown flag(s) {unknown} (allowed: {', '.join(FLAG_FIELDS)})")
    changes = {FLAG_FIELDS[k]: v for k, v in flags.items() if v is not None}
    return scenario.override(changes) if changes else scenario


# ---------------------------------------------------------------------------- starting points


def scenario_yaml(name: str) -> str:
    """A preset written as a YAML scenario file to start from (every field, with units)."""
    sc = resolve_scenario(name)
    head = (
        f"# multispin scenario, from preset {name!r}. Edit any field, then:\n"
        f"#   multispin optimize --scenario THIS_FILE.yaml\n"
        f"# Fields and ranges: multispin scenario schema\n"
    )
    return head + yaml.safe_dump(sc.to_dict(), sort_keys=False, allow_unicode=True)


def scenario_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file (what [`load_scenario`][multispin.system.scenario_io.load_scenario] accepts, without ``preset``)."""
    schema = Scenario.model_json_schema()
    schema["properties"] = {
        "preset": {
            "type": "string",
            "enum": preset_names(),
            "description": "start from this preset and override its fields",
        },
        **schema.get("properties", {}),
    }
    return schema
