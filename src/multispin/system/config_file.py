"""Reading a configuration file into a plain dict: YAML, TOML or JSON text (a parse error names the
line and column), dotted keys expanded into nested tables, and the line and column where a key
path is written, for an error about its value. Knows nothing of what the dict describes, so the
scenario (`.scenario`) and the ``--scenario`` vocabulary ([`.scenario_io`][multispin.system.scenario_io]) both use it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from multispin.errors import ConfigError

FILE_SUFFIXES = (".yaml", ".yml", ".toml", ".json")


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
            twice = sorted(set(node[leaf]) & set(value))
            if twice:
                raise ConfigError(f"{key}.{twice[0]}: set twice (once as a dotted key, once in a table)")
            node[leaf] = {**node[leaf], **value}
        elif leaf in node:
            raise ConfigError(f"{key}: set twice (once as a dotted key, once in a table)")
        else:
            node[leaf] = value
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that holds one key twice (the YAML spec says keys
    are unique; PyYAML would keep the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in first:
                raise ConfigError(f"{key}: duplicate key at lines {first[key]} and {line} (a key is written once)")
            first[key] = line
        return super().construct_mapping(node, deep=deep)


def _unique_json_pairs(text: str):
    """json.loads' object_pairs_hook refusing a key written twice in one object, naming its lines."""

    def hook(pairs: list[tuple[str, Any]]) -> dict:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                lines = [i + 1 for i, ln in enumerate(text.splitlines()) if re.search(rf'"{re.escape(key)}"\s*:', ln)]
                at = " and ".join(map(str, lines[:2])) if len(lines) >= 2 else "?"
                raise ConfigError(f"{key}: duplicate key at lines {at} (a key is written once)")
            out[key] = value
        return out

    return hook


def parse_text(text: str, suffix: str, where: str) -> Any:
    """The data in ``text``, read as the file type ``suffix`` (one of `FILE_SUFFIXES`);
    a ConfigError names ``where`` and, when the parser says it, the line and column."""
    try:
        if suffix in (".yaml", ".yml"):
            return yaml.load(text, Loader=_UniqueKeyLoader) or {}  # noqa: S506 (a SafeLoader)
        if suffix == ".toml":
            try:  # lazy: TOML is the rare format, and this module is on the CLI start-up path
                import tomllib  # noqa: PLC0415
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]  # noqa: PLC0415
            return tomllib.loads(text)
        return json.loads(text, object_pairs_hook=_unique_json_pairs(text))
    except ConfigError as exc:  # a key written twice
        raise ConfigError(f"config: {where}: {exc}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"config: cannot parse {where}{at}: {exc.problem or exc.context}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"config: cannot parse {where} at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except Exception as exc:  # tomllib says "... (at line L, column C)" itself
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"config: cannot parse {where}: {first}") from None


def locate(text: str, loc) -> tuple[int, int] | None:
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
