"""Is a shipped file still what its inputs give? (`stale_field`, behind ``multispin profiles … --check``)

A file written by ``multispin profiles`` has its inputs shipped beside it
(``<pair>/inputs/<file name>``, `provenance`): the check verifies their sha256 against the file's
``provenance``, recomputes the whole file from them with the producer's own code
(`spread.spread_document`, `run_verdicts.run_verdicts_document`,
`coupled_runs.coupled_runs_document`) and names the first field that
differs.

A run-verdicts file shipped before the producers recorded their inputs (no ``provenance``: its
testbed runs were not kept) cannot be recomputed. Its documented sample is, first, what its own
counts determine: each task's pooled α, jobs and trials are recomputed from its ``by_policy``
parts and again from its ``by_prior`` parts (α = Σ accepted / Σ trials, accepted = α·trials of
each part); and, second, its ``tokens_sample``: testbed runs of some of its seeds and policies
re-run and shipped as its inputs copy (``multispin profiles tokens-alpha`` on a legacy file), whose
block is recomputed in full, and whose interval must hold the file's own tokens-matched α
(`sample_difference`). The sample checks the file's α to the sample's interval, not to 12 digits.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

from multispin.acceptance import kinds
from multispin.acceptance.coupled_runs import coupled_runs_document
from multispin.acceptance.provenance import INPUTS_FOLDER, canonical_json, first_difference, sha256_text
from multispin.acceptance.run_verdicts import run_verdicts_document, tokens_sample_block
from multispin.acceptance.spread import spread_document
from multispin.errors import ConfigError

SPREAD = "spread"
RUN_VERDICTS = "run-verdicts"
COUPLED_RUNS_FILE = "coupled-runs"

# kind of shipped file -> the producer's function from its inputs copy to the file
BUILDERS: dict[str, Callable[[Mapping], dict]] = {
    SPREAD: lambda inputs: spread_document(inputs["pair"], inputs["verdicts"]),
    RUN_VERDICTS: run_verdicts_document,
    COUPLED_RUNS_FILE: coupled_runs_document,
}


def file_kind(path: Path) -> str:
    """The kind of shipped file ``path`` is, from its name (``spread-…``, ``run-verdicts-…``)."""
    for kind in BUILDERS:
        if path.name.startswith(kind + "-"):
            return kind
    raise ConfigError(
        f"file: {path.name} is not a file a producer writes (allowed: {', '.join(k + '-*.json' for k in BUILDERS)})"
    )


def inputs_path(path: Path) -> Path:
    """Where the inputs copy of shipped file ``path`` lives."""
    return path.parent / INPUTS_FOLDER / path.name


def stale_field(path: Path) -> str | None:
    """The first field of shipped file ``path`` that its inputs no longer give (``FIELD: shipped X,
    recomputed Y``), or ``None`` when the file is current (module docstring)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    kind = file_kind(path)
    provenance = doc.get("provenance")
    if provenance is None:
        if kind == RUN_VERDICTS:
            return parts_difference(doc) or sample_difference(path, doc)
        return "provenance: missing (no shipped inputs to recompute the file from)"
    name = f"{INPUTS_FOLDER}/{inputs_path(path).name}"
    text, stale = _inputs_text(path, provenance.get("inputs", {}).get(name), "provenance.inputs")
    if stale:
        return stale
    return first_difference(doc, BUILDERS[kind](json.loads(text)))


def _inputs_text(path: Path, recorded: str | None, field: str) -> tuple[str, str | None]:
    """The inputs copy of shipped file ``path`` and, where it is missing or its sha256 is not the
    ``recorded`` one, the stale line (naming ``field``)."""
    copy = inputs_path(path)
    if not copy.is_file():
        return "", f"{field}: {copy.name} is not shipped in {copy.parent}"
    text = copy.read_text(encoding="utf-8")
    if sha256_text(text) != recorded:
        return text, f"{field}: sha256 of {INPUTS_FOLDER}/{copy.name} is {sha256_text(text)}, recorded {recorded}"
    return text, None


def is_legacy(path: Path) -> bool:
    """Whether ``path`` was shipped before the producers recorded their inputs (checked by its parts)."""
    return "provenance" not in json.loads(path.read_text(encoding="utf-8"))


def parts_difference(doc: Mapping) -> str | None:
    """The first task figure of a run-verdicts file that its by-policy or by-prior parts do not
    pool to (module docstring), or ``None``."""
    for task, entry in doc["tasks"].items():
        for split in ("by_policy", "by_prior"):
            parts = list(entry[split].values())
            trials = sum(int(p["trials"]) for p in parts)
            accepted = sum(round(float(p["alpha"]) * int(p["trials"])) for p in parts)
            pooled = {"alpha": accepted / trials, "jobs": sum(int(p["jobs"]) for p in parts), "trials": trials}
            found = first_difference({k: entry[k] for k in pooled}, pooled, f"tasks.{task}")
            if found:
                return f"{found} (the pool of its {split} parts)"
    return None


def sample_difference(path: Path, doc: Mapping) -> str | None:
    """What a legacy run-verdicts file's re-run sample (module docstring) contradicts: its inputs
    copy's sha256, a field of its block, or the file's tokens-matched α outside the sample's
    interval; ``None`` when all hold or the file has no sample."""
    sample = doc.get("tokens_sample")
    if sample is None:
        return None
    text, stale = _inputs_text(path, sample.get("inputs_sha256"), "tokens_sample.inputs")
    if stale:
        return stale
    rebuilt = {k: v for k, v in sample.items() if k in ("seeds", "policies", "runs", "tasks")}
    found = first_difference(rebuilt, tokens_sample_block(json.loads(text)["token_runs"]), "tokens_sample")
    if found:
        return found
    for label, entry in sample["tasks"].items():
        shipped = doc["tasks"].get(label, {}).get("tokens", {}).get("alpha")
        lo, hi = entry["ci95"]
        if shipped is not None and not lo <= float(shipped) <= hi:
            return (
                f"tasks.{label}.tokens.alpha: shipped {shipped}, outside its re-run sample's 95% interval [{lo}, {hi}]"
            )
    return None


def write_inputs(path: Path, inputs: Mapping) -> str:
    """Write the inputs copy of shipped file ``path``; its sha256."""
    copy = inputs_path(path)
    copy.parent.mkdir(parents=True, exist_ok=True)
    text = canonical_json(inputs)
    copy.write_text(text, encoding="utf-8")
    return sha256_text(text)


_ALPHA_LEAVES = ("alpha", "mean", "verdict_alpha_same_rounds")


def stale_kind_label(stale: str, file: str = RUN_VERDICTS) -> str:
    """`` (<kind of α>)`` when a stale field (`stale_field`'s line) of a ``file`` kind of file is an
    α or its interval, else ``""``."""
    field = stale.split(":")[0]
    leaf = field.split(".")[-1].split("[")[0]
    if leaf not in (*_ALPHA_LEAVES, "ci95"):
        return ""
    if file == COUPLED_RUNS_FILE:
        return f" ({kinds.label(kinds.COUPLED_RUNS)})"
    kind = kinds.TOKENS_MATCHED if ".tokens." in field and leaf != "verdict_alpha_same_rounds" else kinds.VERDICT
    return f" ({kinds.label(kind)})"
