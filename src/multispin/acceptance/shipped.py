"""The one reader of the measured files shipped with the package, per model pair.

Layout (package data, ``multispin/data/profiles/<pair>/``):

* ``acceptance-<draft>-<task>-<policy>.json``: what ``multispin measure --out`` writes for one
  draft, one prompt set and one sampling policy (α = E[Σ min(p, q)] with its 95% CI,
  per-position acceptance, mean accepted length, the i.i.d. check; ``docs/acceptance.md`` is
  the table of them all, with the commands that measured them);
* ``run-verdicts-<draft>-<policy>.json``: the α testbed runs showed, as their verdicts' rate and
  as the tokens-matched rate (`acceptance.run_verdicts`, `shipped_tokens_matched_alpha`);
* ``coupled-runs-<draft>-<policy>.json``: the coupled rule's α testbed runs showed
  (`acceptance.coupled_runs`, `shipped_coupled_alpha`);
* ``spread-<draft>-<policy>.json``: the spread of α between prompts (`acceptance.spread`);
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

import re
from functools import lru_cache
from pathlib import Path

from multispin.acceptance.kinds import (
    COUPLED_RUNS,
    COUPLED_SCALED,
    PLANNED,
    SHRUNK,
    TEACHER_FORCED,
    TOKENS_MATCHED,
    AlphaKind,
    shipped_kind,
)
from multispin.acceptance.shrinkage import gap_prior, shrunk_alpha
from multispin.datafile import SHIPPED_REPAIR, finite_number, read_json_object, require

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


def shipped_files(pair: str, kind: str) -> list[dict]:
    """Every ``<kind>-*.json`` file shipped for ``pair`` in its profile folder, whose ``pair``
    field (where it has one) is ``pair`` (``[]`` without any)."""
    folder = profile_folder(pair)
    d = profile_dir(folder) if folder else None
    if d is None:
        return []
    files = [read_shipped(p, kind) for p in sorted(d.glob(f"{kind}-*.json"))]
    return [f for f in files if f.get("pair", folder) == pair]


# per kind of shipped file: the fields of each task entry that must be finite numbers, and their range
_TASK_NUMBERS = {
    "acceptance": (("alpha",), (0.0, 1.0)),
    "run-verdicts": (("alpha", "tokens.alpha"), (0.0, 1.0)),
    "coupled-runs": (("alpha",), (0.0, 1.0)),
    "spread": (("sd",), (0.0, 1.0)),
}


@lru_cache(maxsize=256)
def read_shipped(path: Path, kind: str) -> dict:
    """A shipped ``<kind>-*.json`` file, checked: an object with ``draft``, ``sampling`` and
    ``tasks`` whose numbers are finite and in range; one `ConfigError` line naming the file and
    the field otherwise (a damaged install, repaired by reinstalling). Read once per process: the
    files are package data and do not change while it runs."""
    data = read_json_object(path, SHIPPED_REPAIR)
    require(data, path, "draft", str, SHIPPED_REPAIR)
    require(data, path, "sampling", dict, SHIPPED_REPAIR)
    tasks = require(data, path, "tasks", dict, SHIPPED_REPAIR)
    fields, (low, high) = _TASK_NUMBERS.get(kind, ((), (0.0, 1.0)))
    if kind == "acceptance":
        finite_number(data.get("alpha"), path, "alpha", low, high, SHIPPED_REPAIR)
    for task, entry in tasks.items():
        for field in fields:
            value: object = entry
            for key in field.split("."):
                value = value.get(key) if isinstance(value, dict) else (value if key == "alpha" else None)
            if value is None and field == "tokens.alpha":
                continue  # older run-verdicts files have no tokens-matched α
            finite_number(value, path, f"tasks.{task}.{field}", low, high, SHIPPED_REPAIR)
    return data


def acceptance_profiles(pair: str) -> list[dict]:
    """Every acceptance profile shipped for ``pair`` (``[]`` without profiles)."""
    return shipped_files(pair, "acceptance")


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


def device_alpha(pair: str, draft: str, task: str, sampling=None, kind: str = TEACHER_FORCED) -> float | None:
    """The shipped α of one kind (`acceptance.kinds`: ``teacher_forced``, ``shrunk``,
    ``tokens_matched`` or ``planned``) of ``draft`` for a testbed device of ``task`` (chat:
    ShareGPT, code: HumanEval, see ``TASK_SOURCE``; or a prompt-set label) under ``sampling``, or
    ``None`` when it was not measured."""
    kind = shipped_kind(kind)
    label = TASK_SOURCE.get(task, task)
    if kind == TEACHER_FORCED:
        return acceptance_table(pair, sampling).get(draft, {}).get(label)
    if kind in (TOKENS_MATCHED, PLANNED):
        in_runs = shipped_tokens_matched_alpha(pair, draft, task, sampling)
        if in_runs is not None or kind == TOKENS_MATCHED:
            return in_runs
    for data in acceptance_profiles(pair):
        if str(data["draft"]) == draft and _same_policy(data, sampling) and label in data["tasks"]:
            entry = data["tasks"][label]
            alpha = entry["alpha"] if isinstance(entry, dict) else entry
            # a label beside the profile's own (MT-Bench math) has no verdicts of its own
            return shipped_shrunk_alpha(data) if float(alpha) == float(data["alpha"]) else float(alpha)
    return None


RUN_VERDICTS_SCHEMA = "multispin.run-verdicts"


def run_verdict_files(pair: str) -> list[dict]:
    """Every run-verdicts file shipped for ``pair`` (`acceptance.run_verdicts`)."""
    return [f for f in shipped_files(pair, "run-verdicts") if f.get("schema") == RUN_VERDICTS_SCHEMA]


def shipped_tokens_matched_alpha(pair: str, draft: str, task: str, sampling=None) -> float | None:
    """The α testbed runs of ``draft`` on a device of ``task`` (chat, code; or a prompt-set label)
    under ``sampling`` showed, or ``None`` where none was measured: the tokens-matched α where the
    file has it (`run_verdicts.tokens_matched_alpha`), else the rate of their verdicts."""
    label = TASK_SOURCE.get(task, task)
    for data in run_verdict_files(pair):
        if str(data["draft"]) == draft and _same_policy(data, sampling) and label in data["tasks"]:
            entry = data["tasks"][label]
            return float(entry.get("tokens", entry)["alpha"])
    return None


@lru_cache(maxsize=1)
def shipped_gap_prior() -> tuple[float, float]:
    """`shrinkage.gap_prior` over every acceptance profile the package ships."""
    return gap_prior([read_shipped(p, "acceptance") for p in sorted(PROFILES_ROOT.glob("*/acceptance-*.json"))])


def shipped_shrunk_alpha(profile: dict) -> float:
    """`shrinkage.shrunk_alpha` of ``profile`` on the shipped profiles' gap prior."""
    return shrunk_alpha(profile, shipped_gap_prior())


def planned_kind(pair: str, draft: str, task: str, sampling=None) -> AlphaKind | None:
    """The kind of α ``device_alpha(kind="planned")`` returns for this device: tokens-matched where
    a run-verdicts file is shipped, shrunk where only a profile is, ``None`` where neither is."""
    if shipped_tokens_matched_alpha(pair, draft, task, sampling) is not None:
        return TOKENS_MATCHED
    return SHRUNK if device_alpha(pair, draft, task, sampling, kind=SHRUNK) is not None else None


COUPLED_RUNS_SCHEMA = "multispin.coupled-runs"


def shipped_coupled_alpha(pair: str, draft: str, task: str, sampling=None) -> float | None:
    """The coupled rule's α testbed runs of ``draft`` showed on a device of ``task`` under
    ``sampling`` (`acceptance.coupled_runs`), or ``None`` where none was measured."""
    label = TASK_SOURCE.get(task, task)
    for data in shipped_files(pair, "coupled-runs"):
        if str(data["draft"]) == draft and _same_policy(data, sampling) and label in data["tasks"]:
            return float(data["tasks"][label]["alpha"])
    return None


def teacher_forced_coupled_ratio(pair: str, draft: str, task: str, sampling=None) -> float | None:
    """Coupled α / standard α teacher-forced on the same rows (a profile's ``coupled`` block), or
    ``None`` where the profile of ``draft`` and ``task`` has none. Under greedy decoding the two
    rules accept alike at every position (both test arg-max agreement): the ratio is 1 there."""
    label = TASK_SOURCE.get(task, task)
    for data in acceptance_profiles(pair):
        if str(data["draft"]) != draft or not _same_policy(data, sampling) or label not in data["tasks"]:
            continue
        if float(data["sampling"].get("temperature", 1.0)) == 0.0:
            return 1.0
        coupled = data.get("coupled")
        if coupled and data.get("source") == label:
            return float(coupled["ratio"])
    return None


def coupled_prior(pair: str, draft: str, task: str, sampling, planned: float) -> tuple[float, AlphaKind] | None:
    """What a run's coupled devices of ``draft`` and ``task`` plan on, and its kind: the coupled
    runs' α where shipped, else ``planned`` (the standard rule's planned α) × the teacher-forced
    coupled ratio of the draft's profile; ``None`` where neither is shipped (the caller assumes,
    `system.coupled_alpha`)."""
    in_runs = shipped_coupled_alpha(pair, draft, task, sampling)
    if in_runs is not None:
        return in_runs, COUPLED_RUNS
    ratio = teacher_forced_coupled_ratio(pair, draft, task, sampling)
    return (planned * ratio, COUPLED_SCALED) if ratio is not None else None
