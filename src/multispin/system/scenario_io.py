"""The ``--scenario`` vocabulary: a preset name or a YAML/TOML/JSON file, plus the flags every
verb that builds a scenario shares (devices, powers, noise figure, seed, N_SAA, split).

Files may nest tables (``radio: {p_dl_dbm: 22}``) or write dotted keys (``radio.p_dl_dbm: 22``),
as the README does. A parse error names the file, line and column; a bad field names the field,
its allowed values and, for a misspelt key, the closest real one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

import yaml

from multispin.errors import ConfigError, did_you_mean
# expand_dotted, load_scenario and FILE_SUFFIXES are re-exported: reading a file is the scenario's
# own job (system/scenario.py), parsing one is system/config_file.py's
from multispin.system.config_file import FILE_SUFFIXES, expand_dotted, locate  # noqa: F401
from multispin.system.scenario import (  # noqa: F401
    PRESETS, Scenario, get_preset, load_scenario, preset_names, scenario_from_dict)


def resolve_scenario(spec: Union[str, Path, Scenario]) -> Scenario:
    """A scenario from a preset name (``paper-qwen``, ``paper-r1``, ``smollm2-cpu``), a scenario
    file (``.yaml``, ``.yml``, ``.toml``, ``.json``), or a Scenario (returned as is)."""
    if isinstance(spec, Scenario):
        return spec
    text = str(spec)
    if text in PRESETS:
        return get_preset(text)
    p = Path(text)
    if p.suffix.lower() in FILE_SUFFIXES or p.exists():
        return load_scenario(p)
    raise ConfigError(f"scenario: unknown preset {text!r}{did_you_mean(text, preset_names())} "
                      f"(allowed: {', '.join(preset_names())}, or a {'/'.join(FILE_SUFFIXES)} file)")


def with_overrides(
    scenario: Scenario,
    *,
    devices: Optional[int] = None,
    p_dl_dbm: Optional[float] = None,
    p_ul_dbm: Optional[float] = None,
    noise_figure_db: Optional[float] = None,
    seed: Optional[int] = None,
    n_saa: Optional[int] = None,
    split: Optional[str] = None,
    speed_kmh: Optional[float] = None,
    pilot_snr_db: Optional[float] = None,
    csi_planning: Optional[str] = None,
) -> Scenario:
    """The scenario with the fields the command-line flags set (``None`` keeps the scenario's)."""
    named = {
        "devices.count": devices, "radio.p_dl_dbm": p_dl_dbm, "radio.p_ul_dbm": p_ul_dbm,
        "radio.noise_figure_db": noise_figure_db, "seed": seed, "optimizer.n_saa": n_saa,
        "radio.bandwidth_split": split,
        "channel.speed_kmh": speed_kmh, "channel.pilot_snr_db": pilot_snr_db, "channel.planning": csi_planning,
    }
    changes = {k: v for k, v in named.items() if v is not None}
    return scenario.override(changes) if changes else scenario


# ---------------------------------------------------------------------------- starting points

def scenario_yaml(name: str) -> str:
    """A preset written as a YAML scenario file to start from (every field, with units)."""
    sc = resolve_scenario(name)
    head = (f"# multispin scenario, from preset {name!r}. Edit any field, then:\n"
            f"#   multispin optimize --scenario THIS_FILE.yaml\n"
            f"# Fields and ranges: multispin scenario schema\n")
    return head + yaml.safe_dump(sc.to_dict(), sort_keys=False, allow_unicode=True)


def scenario_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file (what [`load_scenario`][multispin.system.scenario_io.load_scenario] accepts, without ``preset``)."""
    schema = Scenario.model_json_schema()
    schema["properties"] = {"preset": {"type": "string", "enum": preset_names(),
                                       "description": "start from this preset and override its fields"},
                            **schema.get("properties", {})}
    return schema
