"""One loader for the JSON data files multispin reads: the profiles it ships (acceptance, spread,
run verdicts, compute) and the profiles a user hands it. Whatever is wrong with a file (not there,
not JSON, not an object, a field missing, of the wrong type or not a finite number in its range)
is one `ConfigError` line naming the file and the field, and saying how to repair it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from multispin.errors import ConfigError

# how to repair a file the package ships: its copy in the package is the reference
SHIPPED_REPAIR = "reinstall the multispin package to restore it"


def file_error(path: str | Path, field: str | None, problem: str, repair: str | None = None) -> ConfigError:
    """``FILE: FIELD: PROBLEM (REPAIR)``, the one line every data-file error is."""
    where = f"{path}: {field}: " if field else f"{path}: "
    return ConfigError(where + problem + (f" ({repair})" if repair else ""))


def read_json_object(path: str | Path, repair: str | None = None) -> dict[str, Any]:
    """The JSON object in ``path``; a one-line `ConfigError` naming the file otherwise."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise file_error(p, None, "no such file", repair) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise file_error(p, None, f"cannot be read ({type(exc).__name__}: {exc})", repair) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise file_error(p, None, f"not valid JSON at {where}: {exc.msg}", repair) from None
    except RecursionError:
        raise file_error(p, None, "not valid JSON: nested too deeply", repair) from None
    if not isinstance(data, dict):
        raise file_error(p, None, f"must hold a JSON object (got {type(data).__name__})", repair)
    return data


def require(doc: Mapping[str, Any], path: str | Path, field: str, kind: type | tuple[type, ...], repair=None) -> Any:
    """``doc[field]`` when it is there and of ``kind``; else the one-line error."""
    if field not in doc:
        raise file_error(path, field, "missing", repair)
    value = doc[field]
    if not isinstance(value, kind) or isinstance(value, bool):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise file_error(path, field, f"must be {_article(names)} (got {type(value).__name__})", repair)
    return value


def finite_number(
    value: Any, path: str | Path, field: str, low: float = -math.inf, high: float = math.inf, repair=None
) -> float:
    """``value`` as a float when it is a finite number in [low, high]; else the one-line error
    (NaN and infinities included: JSON files written by Python can hold them)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise file_error(path, field, f"must be a finite number (got {value!r})", repair)
    if not low <= value <= high:
        raise file_error(path, field, f"must be in [{low:g}, {high:g}] (got {value!r})", repair)
    return float(value)


def _article(names: str) -> str:
    return {"dict": "an object", "list": "a list", "str": "a string"}.get(names, f"a {names}")


__all__ = ["SHIPPED_REPAIR", "file_error", "finite_number", "read_json_object", "require"]
