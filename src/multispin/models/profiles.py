"""Measured profiles shipped with the package, per model pair.

Layout (package data, ``multispin/data/profiles/<pair>/``):

* ``acceptance-<draft>-<task>-<policy>.json``: what ``multispin measure --out`` writes for one
  draft, one prompt set and one sampling policy (α = E[Σ min(p, q)] with its 95% CI,
  per-position acceptance, mean accepted length, the i.i.d. check; ``docs/acceptance.md`` is
  the table of them all, with the commands that measured them);
* the α a running system sees (`run_alpha`): a profile's teacher-forced α corrected by its own
  verdict rounds, shrunk across every shipped profile (empirical Bayes; docs/acceptance.md says
  why the planner uses it);
* ``run-verdicts-<draft>-<policy>.json``: the α testbed runs showed, as their verdicts' rate and
  as the rate whose i.i.d. tokens are their drafting rounds' (`models.run_verdicts`,
  `in_run_alpha`); the planner prefers the latter where shipped;
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

import numpy as np

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
    "spread": (("sd",), (0.0, 1.0)),
}


def read_shipped(path: Path, kind: str) -> dict:
    """A shipped ``<kind>-*.json`` file, checked: an object with ``draft``, ``sampling`` and
    ``tasks`` whose numbers are finite and in range; one `ConfigError` line naming the file and
    the field otherwise (a damaged install, repaired by reinstalling)."""
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


ALPHA_KINDS = ("teacher_forced", "shrunk", "run")


def device_alpha(pair: str, draft: str, task: str, sampling=None, kind: str = "teacher_forced") -> float | None:
    """Measured α of one draft for a testbed device of ``task`` (chat: ShareGPT, code: HumanEval,
    see ``TASK_SOURCE``) under ``sampling``, or ``None`` when it was not measured. ``kind``:
    ``teacher_forced`` (the profile's E[Σ min(p, q)], the table of docs/acceptance.md),
    ``shrunk`` (`run_alpha`: the teacher-forced α corrected by the profile's own verdict rounds)
    or ``run`` (what the planner plans on: the rate testbed runs' own verdicts showed where the
    package ships it, `models.run_verdicts`, else the shrunk estimate)."""
    if kind not in ALPHA_KINDS:
        raise ValueError(f"kind: unknown value {kind!r} (allowed: {', '.join(ALPHA_KINDS)})")
    label = TASK_SOURCE.get(task, task)
    if kind == "teacher_forced":
        return acceptance_table(pair, sampling).get(draft, {}).get(label)
    if kind == "run":
        in_runs = in_run_alpha(pair, draft, task, sampling)
        if in_runs is not None:
            return in_runs
    for data in acceptance_profiles(pair):
        if str(data["draft"]) == draft and _same_policy(data, sampling) and label in data["tasks"]:
            entry = data["tasks"][label]
            alpha = entry["alpha"] if isinstance(entry, dict) else entry
            # a label beside the profile's own (MT-Bench math) has no verdicts of its own
            return run_alpha(data) if float(alpha) == float(data["alpha"]) else float(alpha)
    return None


RUN_VERDICTS_SCHEMA = "multispin.run-verdicts"


def run_verdict_files(pair: str) -> list[dict]:
    """Every run-verdicts file shipped for ``pair`` (`models.run_verdicts`)."""
    return [f for f in shipped_files(pair, "run-verdicts") if f.get("schema") == RUN_VERDICTS_SCHEMA]


def in_run_alpha(pair: str, draft: str, task: str, sampling=None) -> float | None:
    """The α testbed runs of ``draft`` on a device of ``task`` (chat, code; or a prompt-set label)
    under ``sampling`` showed, or ``None`` where none was measured: the tokens-matched α where the
    file has it (the rate whose i.i.d. tokens are the runs' drafting rounds' tokens,
    `run_verdicts.tokens_matched_alpha`), else the rate of their verdicts."""
    label = TASK_SOURCE.get(task, task)
    for data in run_verdict_files(pair):
        if str(data["draft"]) == draft and _same_policy(data, sampling) and label in data["tasks"]:
            entry = data["tasks"][label]
            return float(entry.get("tokens", entry)["alpha"])
    return None


# ---- the α a running system sees --------------------------------------------------------------
#
# Teacher forcing scores every position of the target's text; a run tests only the positions its
# verdicts reach: the position after a bonus (which follows a fully accepted draft, an easy
# stretch) is never drafted, the position after a rejection always is. When acceptance varies
# along a text (easy and hard stretches), the run's positions are the harder ones, so the i.i.d.
# rate its verdicts see is lower than E[Σ min(p, q)]. Each profile's verdict rounds measure that
# rate directly, but from few prompts (8-16); `run_alpha` combines the two: the gap δ = verdict
# α − teacher-forced α of each profile is shrunk towards the gap across all shipped profiles
# (normal-normal empirical Bayes, method-of-moments spread), and added to the teacher-forced α.


def verdict_alpha(profile: dict) -> tuple[float, float] | None:
    """(α, trials) of a profile's verdict rounds under the i.i.d. model: accepted tokens over
    accepted tokens plus rejections (the estimator the running system uses), or ``None`` without
    verdict rounds."""
    check, rounds = profile.get("iid_check") or {}, profile.get("num_rounds", 0)
    length = [float(x) for x in check.get("measured", [])]
    if not rounds or not length or not np.all(np.isfinite(length)):
        return None
    accepted = length[-1] - 1.0  # per round
    all_accepted = length[-1] - (length[-2] if len(length) > 1 else 1.0)  # P(every position accepted)
    tested = accepted + 1.0 - all_accepted
    if tested <= 0:
        return None
    return accepted / tested, rounds * tested


def _gap_and_variance(profile: dict) -> tuple[float, float] | None:
    v = verdict_alpha(profile)
    if v is None:
        return None
    alpha, trials = v
    # binomial variance: verdicts of one prompt are correlated, so this is a lower bound and the
    # spread across profiles (τ²) absorbs the rest
    return alpha - float(profile["alpha"]), max(alpha * (1 - alpha), 1e-4) / trials


def gap_prior(profiles: list[dict]) -> tuple[float, float]:
    """(μ, τ²) of the gap δ = verdict α − teacher-forced α across ``profiles`` (precision-weighted
    mean, method-of-moments spread; (0, 0) with fewer than two profiles with verdicts)."""
    pairs = [x for x in (_gap_and_variance(p) for p in profiles) if x is not None]
    if len(pairs) < 2:
        return 0.0, 0.0
    d, var = (np.array(x) for x in zip(*pairs))
    w = 1.0 / var
    mu = float(np.sum(w * d) / np.sum(w))
    q = float(np.sum(w * (d - mu) ** 2))
    tau2 = max(0.0, (q - (d.size - 1)) / (np.sum(w) - np.sum(w**2) / np.sum(w)))
    return mu, float(tau2)


@lru_cache(maxsize=1)
def shipped_gap_prior() -> tuple[float, float]:
    """`gap_prior` over every acceptance profile the package ships."""
    return gap_prior([read_shipped(p, "acceptance") for p in sorted(PROFILES_ROOT.glob("*/acceptance-*.json"))])


def run_alpha(profile: dict, prior: tuple[float, float] | None = None) -> float:
    """The α a running system's verdicts see for ``profile``: its teacher-forced α plus the
    empirical-Bayes estimate of its gap (``prior``: (μ, τ²) of the gap, default the shipped
    profiles'); the teacher-forced α itself when the profile has no verdict rounds."""
    own = _gap_and_variance(profile)
    if own is None:
        return float(profile["alpha"])
    mu, tau2 = shipped_gap_prior() if prior is None else prior
    gap, var = own
    weight = tau2 / (tau2 + var) if tau2 > 0 else 0.0
    return float(np.clip(float(profile["alpha"]) + mu + weight * (gap - mu), 0.0, 1.0))
