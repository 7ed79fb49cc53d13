"""Measured profiles shipped with the package, per model pair.

Layout (package data, ``multispin/data/profiles/<pair>/``):

* ``acceptance-<draft>-<task>-<policy>.json``: what ``multispin measure --out`` writes for one
  draft, one prompt set and one sampling policy (α = E[Σ min(p, q)] with its 95% CI,
  per-position acceptance, mean accepted length, the i.i.d. check; ``docs/acceptance.md`` is
  the table of them all, with the commands that measured them);
* ``compute.json``: what ``multispin profile --out`` writes on the host that measured it
  (T_ver^0, T_ver^1, T_ver^tok, each draft's seconds per token, host facts).

Draft, task and policy are read from each file's content (``draft``, ``tasks``, ``sampling``),
not from its name.
A pair with no folder (any name that is not a plain folder name, e.g. ``DRAFT:TARGET``) has no
profiles: the functions return an empty table or ``None``, never raise.

Use them with [`Scenario.with_acceptance_profile`][multispin.system.scenario.Scenario.with_acceptance_profile] and
[`with_compute_profile`][multispin.system.scenario.Scenario.with_compute_profile].
"""

from __future__ import annotations

import json
import re
from pathlib import Path

PROFILES_ROOT = Path(__file__).resolve().parent.parent / "data" / "profiles"

_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _plain(name) -> bool:
    return isinstance(name, str) and bool(_PLAIN_NAME.match(name)) and ".." not in name


def profile_dir(pair: str) -> Path | None:
    """The folder holding ``pair``'s measured profiles, or ``None`` when there is none."""
    if not _plain(pair):
        return None
    d = PROFILES_ROOT / pair
    return d if d.is_dir() else None


def profile_folder(pair: str) -> str | None:
    """The folder name of ``pair``'s acceptance profiles: its own, or for a cross-vocabulary pair
    ``DRAFT:TARGET`` the target's (beside the target's own drafts; a profile's ``pair`` field
    tells them apart). ``None`` for a name that is not a pair's."""
    parts = pair.split(":") if isinstance(pair, str) else []
    if len(parts) not in (1, 2) or not all(_plain(p) for p in parts):
        return None
    return parts[-1]


# The prompt set a testbed device of each task is given (models.prompts, source "auto").
TASK_SOURCE = {"chat": "sharegpt", "code": "humaneval"}


def acceptance_profiles(pair: str) -> list[dict]:
    """Every acceptance profile shipped for ``pair`` (``[]`` without profiles)."""
    folder = profile_folder(pair)
    d = profile_dir(folder) if folder else None
    if d is None:
        return []
    profiles = [json.loads(p.read_text()) for p in sorted(d.glob("acceptance-*.json"))]
    return [p for p in profiles if p.get("pair", folder) == pair]


def _same_policy(profile: dict, sampling) -> bool:
    if sampling is None:
        return True
    want = sampling if isinstance(sampling, dict) else sampling.model_dump()
    return all(profile["sampling"].get(k) == v for k, v in want.items())


def acceptance_table(pair: str, sampling=None) -> dict[str, dict[str, float]]:
    """Measured α per draft and task, ``{draft: {task: alpha}}`` (tasks as the profiles label
    them: humaneval, mt_bench, mt_bench_math, sharegpt), of the profiles measured under
    ``sampling`` (a ``SamplingParams`` or its dict; ``None``: any policy); ``{}`` without profiles."""
    table: dict[str, dict[str, float]] = {}
    for data in acceptance_profiles(pair):
        if not _same_policy(data, sampling):
            continue
        for task, entry in data["tasks"].items():
            alpha = entry["alpha"] if isinstance(entry, dict) else entry
            table.setdefault(str(data["draft"]), {})[str(task)] = float(alpha)
    return table


def compute_profile_path(pair: str) -> Path | None:
    """``compute.json`` of ``pair`` (for ``Scenario.with_compute_profile``), or ``None``."""
    d = profile_dir(pair)
    if d is None:
        return None
    path = d / "compute.json"
    return path if path.is_file() else None


def device_alpha(pair: str, draft: str, task: str, sampling=None) -> float | None:
    """Measured α of one draft for a testbed device of ``task`` (chat: ShareGPT, code: HumanEval,
    see ``TASK_SOURCE``) under ``sampling``, or ``None`` when it was not measured."""
    row = acceptance_table(pair, sampling).get(draft, {})
    return row.get(TASK_SOURCE.get(task, task))
