"""Where a shipped file came from, and whether it is still what its inputs give.

A producer (`multispin profiles …`) writes beside each shipped file a compact copy of the inputs
it read (``data/profiles/<pair>/inputs/<file name>``: the runs' verdicts, not their text) and, in
the file, a ``provenance`` block taken from the run itself: the command, the seeds of the runs
it read, the git commit and the package version that wrote it, the sha256 of every input, and the
date. Its ``--check`` reads that copy, verifies its sha256, recomputes the file with the same code
and names the first field that differs (`first_difference`).

Values are compared to `CHECKED_DIGITS` significant digits (integers and strings exactly): the
recomputation is deterministic, but a sum's last bits may move with numpy's version, so a value
one step off in its 12th digit is stale and one off in its 16th is not.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

CHECKED_DIGITS = 12

# fields that describe a file rather than result from its inputs: not recomputed
DESCRIPTIVE_FIELDS = frozenset({"provenance", "method", "command", "tokens_method", "tokens_command"})

INPUTS_FOLDER = "inputs"


def canonical_json(doc: Any) -> str:
    """The text an inputs copy is written as (and hashed from): sorted keys, no spaces."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def provenance_block(
    *,
    produced_by: str,
    command: str,
    inputs_file: str,
    inputs_sha256: str,
    sources: Mapping[str, str],
    seeds: Sequence[int],
    git_commit: str | None,
    version: str,
    date: str,
) -> dict:
    """The ``provenance`` block of a shipped file (module docstring); ``sources``: each file or
    folder the producer was given, by name, with its sha256."""
    return {
        "produced_by": produced_by,
        "command": command,
        "inputs": {inputs_file: inputs_sha256},
        "sources": dict(sources),
        "seeds": sorted(int(s) for s in seeds),
        "git_commit": git_commit,
        "multispin_version": version,
        "date": date,
    }


def digit_step(x: float, digits: int = CHECKED_DIGITS) -> float:
    """One step in the ``digits``-th significant digit of ``x`` (1e-12 for 0.83 at 12 digits)."""
    if x == 0 or not math.isfinite(x):
        return 0.0
    return 10.0 ** (math.floor(math.log10(abs(x))) - digits + 1)


def _same_number(a: float, b: float) -> bool:
    """Within half a step of the `CHECKED_DIGITS`-th significant digit of the larger."""
    if a == b:
        return True
    return abs(a - b) <= 0.5 * digit_step(max(abs(a), abs(b)))


def first_difference(shipped: Any, recomputed: Any, path: str = "", ignore=DESCRIPTIVE_FIELDS) -> str | None:
    """The dotted path of the first field where ``shipped`` and ``recomputed`` differ (a key on
    one side only, another type, another string or count, a number off in its `CHECKED_DIGITS`
    significant digits), with both values; ``None`` when they agree. Top-level ``ignore`` keys
    (descriptive fields) are skipped."""
    if isinstance(shipped, Mapping) and isinstance(recomputed, Mapping):
        for key in sorted(set(shipped) | set(recomputed), key=str):
            if not path and key in ignore:
                continue
            where = f"{path}.{key}" if path else str(key)
            if key not in shipped or key not in recomputed:
                side = "shipped file" if key not in shipped else "recomputation"
                return f"{where}: missing from the {side}"
            found = first_difference(shipped[key], recomputed[key], where, ignore)
            if found:
                return found
        return None
    if isinstance(shipped, list) and isinstance(recomputed, list):
        if len(shipped) != len(recomputed):
            return f"{path}: {len(shipped)} entries shipped, {len(recomputed)} recomputed"
        for i, (a, b) in enumerate(zip(shipped, recomputed)):
            found = first_difference(a, b, f"{path}[{i}]", ignore)
            if found:
                return found
        return None
    numbers = (int, float)
    if isinstance(shipped, float) or isinstance(recomputed, float):
        if isinstance(shipped, numbers) and isinstance(recomputed, numbers) and not isinstance(shipped, bool):
            return None if _same_number(float(shipped), float(recomputed)) else _differs(path, shipped, recomputed)
    if type(shipped) is not type(recomputed) or shipped != recomputed:
        return _differs(path, shipped, recomputed)
    return None


def _differs(path: str, shipped: Any, recomputed: Any) -> str:
    return f"{path}: shipped {shipped!r}, recomputed {recomputed!r}"
