"""The ``--scenario`` vocabulary: a preset name or a YAML/TOML/JSON file, plus the flags every
verb that builds a scenario shares (devices, powers, noise figure, seed, N_SAA, split).

Files may nest tables (``radio: {p_dl_dbm: 22}``) or write dotted keys (``radio.p_dl_dbm: 22``),
as the README does. A parse error names the file, line and column; a bad field names the field,
its allowed values and, for a misspelt key, the closest real one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Optional, Union

import yaml

from multispin.errors import ConfigError, did_you_mean
from multispin.system.scenario import PRESETS, Scenario, get_preset, preset_names, scenario_from_dict

FILE_SUFFIXES = (".yaml", ".yml", ".toml", ".json")


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
) -> Scenario:
    """The scenario with the fields the command-line flags set (``None`` keeps the scenario's)."""
    named = {
        "devices.count": devices, "radio.p_dl_dbm": p_dl_dbm, "radio.p_ul_dbm": p_ul_dbm,
        "radio.noise_figure_db": noise_figure_db, "seed": seed, "optimizer.n_saa": n_saa,
        "radio.bandwidth_split": split,
    }
    changes = {k: v for k, v in named.items() if v is not None}
    return scenario.override(changes) if changes else scenario


# ---------------------------------------------------------------------------- files

def expand_dotted(data: Any) -> Any:
    """``{"radio.p_dl_dbm": 22}`` → ``{"radio": {"p_dl_dbm": 22}}`` (merging with nested tables)."""
    if not isinstance(data, dict):
        return data
    out: dict[str, Any] = {}
    for key, value in data.items():
        value = expand_dotted(value)
        parts = str(key).split(".")
        node = out
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                if child is not None:
                    raise ConfigError(f"{key}: {part} is both a value and a table")
                child = node[part] = {}
            node = child
        leaf = parts[-1]
        if isinstance(value, dict) and isinstance(node.get(leaf), dict):
            node[leaf] = {**node[leaf], **value}
        else:
            node[leaf] = value
    return out


def _parse(text: str, suffix: str, where: str) -> Any:
    try:
        if suffix in (".yaml", ".yml"):
            return yaml.safe_load(text) or {}
        if suffix == ".toml":
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            return tomllib.loads(text)
        return json.loads(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"config: cannot parse {where}{at}: {exc.problem or exc.context}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"config: cannot parse {where} at line {exc.lineno}, column {exc.colno}: "
                          f"{exc.msg}") from None
    except Exception as exc:  # tomllib says "... (at line L, column C)" itself
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"config: cannot parse {where}: {first}") from None


def locate(text: str, loc) -> Optional[tuple[int, int]]:
    """(line, column), 1-based, where the key path ``loc`` is written in a YAML, TOML or JSON
    text: each key is searched after its parent, as a key (``key:``, ``key =``, ``"key":``,
    ``[key]``) or the head of a dotted key (``key.``)."""
    lines = text.splitlines()
    start, found = 0, None
    for part in (p for p in loc if isinstance(p, str)):
        pat = re.compile(r"(?:^|[\s{,.\"'\[])(" + re.escape(part) + r")[\"']?\s*(?:[:=.\]])")
        for i in range(start, len(lines)):
            m = pat.search(lines[i].split("#", 1)[0])
            if m:
                found, start = (i + 1, m.start(1) + 1), i
                break
    return found


def load_scenario(path: Union[str, Path]) -> Scenario:
    """Load a scenario from a YAML (.yaml/.yml), TOML (.toml) or JSON (.json) file.

    The file may start from a preset (``preset: paper-qwen``) and set any field, nested or
    dotted. Errors name the file with line and column.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config: no such file {str(p)!r}")
    suffix = p.suffix.lower()
    if suffix not in FILE_SUFFIXES:
        raise ConfigError(f"config: unknown file type {suffix!r} (allowed: {', '.join(FILE_SUFFIXES)})")
    text = p.read_text()
    data = _parse(text, suffix, repr(str(p)))
    try:
        return scenario_from_dict(expand_dotted(data))
    except ConfigError as exc:
        at = locate(text, exc.locs[0]) if getattr(exc, "locs", None) else None
        where = f"{p}:{at[0]}:{at[1]}" if at else str(p)
        raise ConfigError(f"{where}: {exc}") from None


# ---------------------------------------------------------------------------- starting points

def scenario_yaml(name: str) -> str:
    """A preset written as a YAML scenario file to start from (every field, with units)."""
    sc = resolve_scenario(name)
    head = (f"# multispin scenario, from preset {name!r}. Edit any field, then:\n"
            f"#   multispin optimize --scenario THIS_FILE.yaml\n"
            f"# Fields and ranges: multispin scenario schema\n")
    return head + yaml.safe_dump(sc.to_dict(), sort_keys=False, allow_unicode=True)


def scenario_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file (what :func:`load_scenario` accepts, without ``preset``)."""
    schema = Scenario.model_json_schema()
    schema["properties"] = {"preset": {"type": "string", "enum": preset_names(),
                                       "description": "start from this preset and override its fields"},
                            **schema.get("properties", {})}
    return schema
