"""Measured profiles shipped with the package, per model pair.

Layout (package data, ``multispin/data/profiles/<pair>/``):

* ``acceptance-<draft>-<task>.json``: what ``multispin measure --out`` writes for one draft and
  one task (α = E[Σ min(p, q)] with its 95% CI, per-position acceptance, mean accepted length);
* ``compute.json``: what ``multispin profile --out`` writes on the host that measured it
  (T_ver^0, T_ver^1, T_ver^tok, each draft's seconds per token, host facts).

Draft and task are read from each file's content (``draft``, ``tasks``), not from its name.
A pair with no folder (any name that is not a plain folder name, e.g. ``DRAFT:TARGET``) has no
profiles: the functions return an empty table or ``None``, never raise.

Use them with :meth:`multispin.system.scenario.Scenario.with_acceptance_profile` and
:meth:`~multispin.system.scenario.Scenario.with_compute_profile`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

PROFILES_ROOT = Path(__file__).resolve().parent.parent / "data" / "profiles"

_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def profile_dir(pair: str) -> Path | None:
    """The folder holding ``pair``'s measured profiles, or ``None`` when there is none."""
    if not isinstance(pair, str) or not _PLAIN_NAME.match(pair) or ".." in pair:
        return None
    d = PROFILES_ROOT / pair
    return d if d.is_dir() else None


def acceptance_table(pair: str) -> dict[str, dict[str, float]]:
    """Measured α per draft and task: ``{draft: {task: alpha}}``; ``{}`` without profiles."""
    d = profile_dir(pair)
    if d is None:
        return {}
    table: dict[str, dict[str, float]] = {}
    for path in sorted(d.glob("acceptance-*.json")):
        data = json.loads(path.read_text())
        draft = str(data["draft"])
        for task, entry in data["tasks"].items():
            alpha = entry["alpha"] if isinstance(entry, dict) else entry
            table.setdefault(draft, {})[str(task)] = float(alpha)
    return table


def compute_profile_path(pair: str) -> Path | None:
    """``compute.json`` of ``pair`` (for ``Scenario.with_compute_profile``), or ``None``."""
    d = profile_dir(pair)
    if d is None:
        return None
    path = d / "compute.json"
    return path if path.is_file() else None


def device_alpha(pair: str, draft: str, task: str) -> float | None:
    """Measured α of one draft on one task, or ``None`` when it was not measured."""
    return acceptance_table(pair).get(draft, {}).get(task)
