"""Every JSON document multispin prints or writes starts with who wrote it and in which shape:
``multispin_version`` (the package), ``schema`` (what kind of document) and ``schema_version``
(bumped when a field of that kind changes meaning or goes away; adding a field does not bump it),
so a script that reads old outputs can tell them apart."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from multispin._version import __version__

FIRST_SCHEMA_VERSION = 1  # every kind of document not in SCHEMA_VERSIONS
# the kinds of document whose fields changed since version 1, and how
SCHEMA_VERSIONS = {
    "optimize": 2,  # 2: "policy" (the draft-length search) is "draft_policy"
    "testbed-summary": 2,  # 2: policy names all_ul, all_dl, target_only (were all-ul, all-dl, target-only)
    "demo-summary": 2,  # 2: the same policy names
}


def versioned(doc: dict[str, Any], schema: str) -> dict[str, Any]:
    """``doc`` with the version fields first (a field of ``doc`` with the same name wins)."""
    return {
        "multispin_version": __version__,
        "schema": f"multispin.{schema}",
        "schema_version": SCHEMA_VERSIONS.get(schema, FIRST_SCHEMA_VERSION),
        **doc,
    }


def json_safe(v: Any) -> Any:
    """``v`` with numpy scalars as Python numbers and NaN/inf as ``None`` (strict JSON)."""
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def write_json(doc: Any, path: Path, indent: int | None = None) -> None:
    """``doc`` as a JSON file at ``path`` (its folder made if missing), ending in a newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=indent) + "\n", encoding="utf-8")
