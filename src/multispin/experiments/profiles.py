"""The producers of the shipped acceptance files (``multispin profiles …``): read the runs, fit, write
the file with its provenance and its inputs copy, and check a shipped file against its inputs.

* ``spread``: the between-prompt spread (`acceptance.spread.spread_document`) from verdicts
  documents (``tools/forecast_gap.py verdicts``: per-prompt verdict rounds of a real model);
* ``run-alpha``: the run-verdicts file (`acceptance.run_verdicts.run_verdicts_document`) from
  testbed runs: their folders (``summary.json`` + ``rounds.jsonl``) or calibration lines
  (``tools/forecast_gap.py calibrate``);
* ``tokens-alpha``: adds the tokens-matched α of run folders to the pair's run-verdicts file;
* ``coupled-alpha``: the coupled-runs file (`acceptance.coupled_runs.coupled_runs_document`) from
  the folders of testbed runs whose devices verified coupled (``all_coupled``, ``three_way``).

Everything a file records is read from the runs it was given (pair, draft, sampling policy, seeds,
policies, the prior each run planned on), not typed in; `acceptance.provenance` says what the
``provenance`` block holds and `acceptance.recompute` how ``--check`` uses it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from multispin._version import __version__
from multispin.acceptance import kinds
from multispin.acceptance.coupled_runs import coupled_draft_rounds
from multispin.acceptance.provenance import INPUTS_FOLDER, provenance_block
from multispin.acceptance.recompute import (
    BUILDERS,
    COUPLED_RUNS_FILE,
    RUN_VERDICTS,
    SPREAD,
    file_kind,
    inputs_path,
    is_legacy,
    write_inputs,
)
from multispin.acceptance.recompute import stale_field as recompute_stale_field
from multispin.acceptance.run_verdicts import draft_rounds, job_verdicts, tokens_sample_block
from multispin.acceptance.shipped import PROFILES_ROOT, device_alpha, profile_folder
from multispin.errors import ConfigError
from multispin.experiments.acceptance import policy_label
from multispin.experiments.run_summary import RunSummary
from multispin.runtime.wire.round_row import RoundRow

SOURCE_ROOT = Path(__file__).resolve().parents[3]  # the checkout, where the package runs from one


@dataclass(frozen=True)
class Written:
    """A file a producer wrote, and one line per task saying what it holds."""

    path: Path
    lines: list[str]


def git_commit(root: Path = SOURCE_ROOT) -> str | None:
    """The commit of the checkout the package runs from (``-dirty`` when it has changes), or
    ``None`` outside one."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def source_sha256(path: Path) -> str:
    """sha256 of a file, or of a run folder's summary.json and rounds.jsonl."""
    h = hashlib.sha256()
    for part in [path / "summary.json", path / "rounds.jsonl"] if path.is_dir() else [path]:
        h.update(part.read_bytes())
    return h.hexdigest()


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not a JSON file ({exc})") from None


def run_folder(folder: Path) -> tuple[RunSummary, list[RoundRow]]:
    """A testbed run's summary.json (`RunSummary`) and its rounds."""
    where = folder / "summary.json"
    doc = _read_json(where)
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: not a JSON object (a testbed run's folder is needed)")
    try:
        summary = RunSummary.from_json(doc)
    except ValueError as exc:  # another schema, or a key missing: the message names it
        raise ConfigError(f"{where}: {exc}") from None
    text = (folder / "rounds.jsonl").read_text(encoding="utf-8")
    return summary, [RoundRow.from_dict(json.loads(line)) for line in text.splitlines() if line.strip()]


def _run_identity(summary: RunSummary, where: Path) -> dict:
    """What names a run in a producer's inputs: its seed, policy, pair and its one draft."""
    drafts = set(summary.acceptance.drafts)
    if len(drafts) != 1:
        raise ConfigError(f"{where}: drafts: the run's devices drafted with {sorted(drafts)}, one draft needed")
    return {"seed": summary.seed, "policy": summary.policy, "pair": summary.pair, "draft": drafts.pop()}


def calibration_line(summary: RunSummary, rows: Sequence[RoundRow], where: Path = Path(".")) -> dict:
    """One run as a run-verdicts input (`acceptance.run_verdicts`): its seed, policy, pair, draft,
    sampling, shape, its jobs' verdicts and the prior each task planned on, all from the run."""
    acceptance = summary.acceptance
    return {
        **_run_identity(summary, where),
        "sampling": summary.payload.sampling,
        "shape": summary.shape,
        "jobs": [j.to_dict() for j in job_verdicts(rows, acceptance.tasks_by_device())],
        "planned_with": dict(zip(acceptance.tasks, acceptance.prior)),
    }


def token_run(summary: RunSummary, rows: Sequence[RoundRow], where: Path = Path(".")) -> dict:
    """One run as a tokens-matched input: its seed, policy, tasks, jobs' verdicts and drafting rounds."""
    tasks = summary.acceptance.tasks_by_device()
    return {
        **_run_identity(summary, where),
        "sampling": summary.payload.sampling,
        "tasks": sorted(set(summary.acceptance.tasks)),
        "jobs": [j.to_dict() for j in job_verdicts(rows, tasks)],
        "rounds": [[r.task, r.gamma, r.expected_tokens] for r in draft_rounds(rows, tasks)],
    }


def coupled_token_run(summary: RunSummary, rows: Sequence[RoundRow], where: Path = Path(".")) -> dict:
    """One run as a coupled-runs input: its seed, policy, tasks and coupled drafting rounds."""
    tasks = summary.acceptance.tasks_by_device()
    budget = summary.shape.get("max_new_tokens")
    return {
        **_run_identity(summary, where),
        "sampling": summary.payload.sampling,
        "tasks": sorted(set(summary.acceptance.tasks)),
        "rounds": [[r.task, r.gamma, r.expected_tokens] for r in coupled_draft_rounds(rows, tasks, budget)],
    }


def _calibration_lines(path: Path) -> list[dict]:
    """`calibration_line`s of a run folder, or of a calibration file (one JSON line per run)."""
    if path.is_dir():
        return [calibration_line(*run_folder(path), where=path)]
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _one(values: Sequence, field: str, pair: str) -> object:
    """The one value every input agrees on for ``field``."""
    distinct = {json.dumps(v, sort_keys=True) for v in values if v is not None}
    if len(distinct) != 1:
        raise ConfigError(f"{field}: the inputs of {pair} disagree or do not say ({sorted(distinct) or 'none'})")
    return json.loads(distinct.pop())


def _target(pair: str, name: str, out: Path | None) -> Path:
    """Where a producer writes ``name``: ``out`` if given, else the pair's shipped folder."""
    if out is not None:
        return out / name
    folder = profile_folder(pair)
    if folder is None:
        raise ConfigError(f"pair: {pair!r} is not a pair name (DRAFT:TARGET or a registry name)")
    return PROFILES_ROOT / folder / name


def _ship(path: Path, doc: dict, inputs: dict, command: str, sources: Sequence[Path], seeds: Sequence[int]) -> None:
    """Write ``doc`` to ``path`` with its inputs copy and provenance block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sha = write_inputs(path, inputs)
    doc["provenance"] = provenance_block(
        produced_by=" ".join(command.split()[:3]),
        command=command,
        inputs_file=f"{INPUTS_FOLDER}/{inputs_path(path).name}",
        inputs_sha256=sha,
        sources={p.name: source_sha256(p) for p in sources},
        seeds=seeds,
        git_commit=git_commit(),
        version=__version__,
        date=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def produce_spread(pair: str, files: Sequence[Path], command: str, out: Path | None = None) -> Written:
    """Fit each task's between-prompt spread from verdicts documents and write the pair's spread file."""
    verdicts = [_read_json(f) for f in files]
    for f, doc in zip(files, verdicts):
        if doc.get("pair") != pair:
            raise ConfigError(f"{f}: pair: the verdicts are of {doc.get('pair')!r}, not {pair!r}")
    inputs = {"pair": pair, "verdicts": verdicts}
    doc = BUILDERS[SPREAD](inputs)
    path = _target(pair, f"spread-{doc['draft']}-{policy_label(doc['sampling'])}.json", out)
    _ship(path, doc, inputs, command, files, [int(v["seed"]) for v in verdicts])
    lines = [
        f"{label}: mean {kinds.label(kinds.VERDICT)} {t['mean']:.3f}, between-prompt sd {t['sd']:.3f} "
        f"({t['sd_ci95'][0]:.3f}-{t['sd_ci95'][1]:.3f}; whole-job sd {t['whole_job_sd']:.3f}), {t['jobs']} jobs"
        for label, t in doc["tasks"].items()
    ]
    return Written(path, lines)


def _run_inputs(pair: str, lines: Sequence[Mapping]) -> dict:
    """The run-verdicts inputs of ``lines`` (draft and sampling from the runs; the shrunk α as the
    prior of a run that recorded none)."""
    draft = str(_one([line.get("draft") for line in lines], "draft", pair))
    sampling = _one([line.get("sampling") for line in lines], "sampling", pair)
    assert isinstance(sampling, dict)
    tasks = sorted({j["task"] for line in lines for j in line["jobs"]})
    fallback = {t: device_alpha(pair, draft, t, sampling, kind=kinds.SHRUNK) for t in tasks}
    return {"pair": pair, "draft": draft, "sampling": sampling, "calibration": list(lines), "fallback_prior": fallback}


def _rate_lines(doc: Mapping) -> list[str]:
    lines = []
    for label, entry in doc["tasks"].items():
        lo, hi = entry["ci95"]
        line = f"{label}: {kinds.label(kinds.VERDICT)} {entry['alpha']:.4f} ({lo:.4f}-{hi:.4f}), {entry['jobs']} jobs"
        if "tokens" in entry:
            t = entry["tokens"]
            line += (
                f"; {kinds.label(kinds.TOKENS_MATCHED)} {t['alpha']:.4f} ({t['ci95'][0]:.4f}-{t['ci95'][1]:.4f}), "
                f"{t['rounds']} rounds"
            )
        lines.append(line)
    return lines


def produce_run_alpha(pair: str, sources: Sequence[Path], command: str, out: Path | None = None) -> Written:
    """Pool testbed runs' verdicts per task (and per policy and per prior the runs planned on) and
    write the pair's run-verdicts file; run folders also give its tokens-matched α."""
    lines = [line for s in sources for line in _calibration_lines(s)]
    for line in lines:
        if line.get("pair", pair) != pair:
            raise ConfigError(f"pair: seed {line['seed']} is a run of {line['pair']!r}, not {pair!r}")
    inputs = _run_inputs(pair, lines)
    folders = [s for s in sources if s.is_dir()]
    if folders:
        inputs["token_runs"] = [token_run(*run_folder(f), where=f) for f in folders]
    doc = BUILDERS[RUN_VERDICTS](inputs)
    path = _target(pair, f"run-verdicts-{doc['draft']}-{policy_label(doc['sampling'])}.json", out)
    _ship(path, doc, inputs, command, sources, doc["runs"]["seeds"])
    return Written(path, _rate_lines(doc))


def produce_tokens_alpha(pair: str, folders: Sequence[Path], command: str, out: Path | None = None) -> Written:
    """Add the tokens-matched α of the runs in ``folders`` to the pair's run-verdicts file (which
    must have been written by ``run-alpha``, with its inputs copy)."""
    runs = [token_run(*run_folder(f), where=f) for f in folders]
    draft = _one([r["draft"] for r in runs], "draft", pair)
    sampling = _one([r["sampling"] for r in runs], "sampling", pair)
    assert isinstance(sampling, dict)
    path = _target(pair, f"run-verdicts-{draft}-{policy_label(sampling)}.json", out)
    if not path.is_file():
        raise ConfigError(
            f"pair: {path} has no shipped inputs (run `multispin profiles run-alpha --pair {pair}` on its runs first)"
        )
    if is_legacy(path):
        return _ship_tokens_sample(path, runs, command, folders)
    inputs = json.loads(inputs_path(path).read_text(encoding="utf-8"))
    inputs["token_runs"] = runs
    doc = BUILDERS[RUN_VERDICTS](inputs)
    seeds = sorted({*doc["runs"]["seeds"], *doc["tokens_runs"]["seeds"]})
    _ship(path, doc, inputs, command, folders, seeds)
    return Written(path, _rate_lines(doc))


def _ship_tokens_sample(path: Path, runs: list[dict], command: str, folders: Sequence[Path]) -> Written:
    """Ship ``runs`` as the re-run sample of legacy run-verdicts file ``path`` (its own runs were
    not kept, `acceptance.recompute`): their inputs copy and the ``tokens_sample`` block, the
    file's own figures untouched."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    sha = write_inputs(path, {"token_runs": runs})
    block = tokens_sample_block(runs)
    doc["tokens_sample"] = {
        **block,
        "inputs_sha256": sha,
        "command": command,
        "sources": {p.name: source_sha256(p) for p in folders},
        "git_commit": git_commit(),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    lines = []
    for label, t in block["tasks"].items():
        shipped = doc["tasks"].get(label, {}).get("tokens", {}).get("alpha")
        lines.append(
            f"{label}: re-run sample's {kinds.label(kinds.TOKENS_MATCHED)} {t['alpha']:.4f} "
            f"({t['ci95'][0]:.4f}-{t['ci95'][1]:.4f}), {t['runs']} runs; the file's {shipped:.4f}"
        )
    return Written(path, lines)


def produce_coupled_alpha(pair: str, folders: Sequence[Path], command: str, out: Path | None = None) -> Written:
    """Fit each task's coupled tokens-matched α from the coupled rounds of the runs in ``folders``
    and write the pair's coupled-runs file."""
    runs = [coupled_token_run(*run_folder(f), where=f) for f in folders]
    for f, run in zip(folders, runs):
        if run["pair"] != pair:
            raise ConfigError(f"{f}: pair: the run is of {run['pair']!r}, not {pair!r}")
        if not run["rounds"]:
            raise ConfigError(f"{f}: policy: the run verified no device coupled ({run['policy']!r})")
    draft = str(_one([r["draft"] for r in runs], "draft", pair))
    sampling = _one([r["sampling"] for r in runs], "sampling", pair)
    assert isinstance(sampling, dict)
    inputs = {"pair": pair, "draft": draft, "sampling": sampling, "runs": runs}
    doc = BUILDERS[COUPLED_RUNS_FILE](inputs)
    path = _target(pair, f"coupled-runs-{draft}-{policy_label(sampling)}.json", out)
    _ship(path, doc, inputs, command, folders, doc["runs"]["seeds"])
    lines = [
        f"{label}: {kinds.label(kinds.COUPLED_RUNS)} {t['alpha']:.4f} ({t['ci95'][0]:.4f}-{t['ci95'][1]:.4f}), "
        f"{t['rounds']} rounds of {t['runs']} runs"
        for label, t in doc["tasks"].items()
    ]
    return Written(path, lines)


def shipped_files_of(kind: str) -> list[Path]:
    """Every shipped file of ``kind`` (spread, run-verdicts, coupled-runs), of every pair."""
    return sorted(PROFILES_ROOT.glob(f"*/{kind}-*.json"))


@dataclass(frozen=True)
class CheckResult:
    path: Path
    stale: str | None  # the first field that differs, or None
    legacy: bool  # checked by its parts only (`acceptance.recompute`)


def check(kind: str, files: Sequence[Path] | None = None) -> list[CheckResult]:
    """`acceptance.recompute.stale_field` of each of ``files`` (default: every shipped file of ``kind``)."""
    paths = list(files) if files else shipped_files_of(kind)
    if not paths:
        raise ConfigError(f"file: no {kind} file to check")
    results = []
    for p in paths:
        if file_kind(p) != kind:
            raise ConfigError(f"file: {p.name} is not a {kind} file")
        results.append(CheckResult(p, recompute_stale_field(p), is_legacy(p)))
    return results
