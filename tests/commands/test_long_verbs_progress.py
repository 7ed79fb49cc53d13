"""`measure` and `profile` say how far they are (per prompt, per batch
size, with the time left), an undefined estimate is one line saying why instead of a NaN row,
and numpy's RuntimeWarnings never reach the user. Run as a user runs them: a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from multispin import cli

SRC = str(Path(cli.__file__).parents[1])  # this checkout's package
# the verbs run as subprocesses, each loading the tiny pair (4–12 CPU-s each): integration tests,
# which `make test` runs and `make test-fast` leaves out
integration = pytest.mark.integration


def _multispin(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run(
        [sys.executable, "-m", "multispin", *args], capture_output=True, text=True, env=env, timeout=300
    )


@integration
def test_measure_without_full_rounds_says_why_and_shows_no_nan():
    res = _multispin(
        "measure",
        "--pair",
        "tiny",
        "--prompts",
        "2",
        "--max-new-tokens",
        "8",
        "--draft-len",
        "8",
        "--source",
        "builtin",
    )
    assert res.returncode == 0, res.stderr
    assert "nan" not in res.stdout.lower()
    assert "Warning" not in res.stderr, res.stderr  # numpy's RuntimeWarnings stay inside
    note = " ".join(res.stdout.split())
    assert "note: mean accepted length and per-position acceptance: no round drafted the full γ = 8" in note
    assert "α = E[Σ min(p, q)]" in res.stdout  # the defined estimates are still there
    # progress on stderr (no terminal: one line per tenth), per token generated and per prompt scored
    lines = res.stderr.splitlines()
    assert "target text: 16/16 tokens" in res.stderr and "scoring α: 2/2 prompts (" in res.stderr
    assert lines[-1].startswith("verdicts close: 16/16 tokens (")
    assert any("left)" in line for line in lines)  # an estimate of the time left on the way


@integration
def test_measure_json_is_strict_json_with_the_notes():
    res = _multispin(
        "measure",
        "--pair",
        "tiny",
        "--prompts",
        "2",
        "--max-new-tokens",
        "8",
        "--draft-len",
        "8",
        "--source",
        "builtin",
        "--json",
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert doc["mean_accepted_length"] is None and doc["per_position_rate"] == [None] * 8
    assert len(doc["notes"]) == 1 and doc["vocab_size"] == 256


@integration
def test_profile_reports_each_batch_size():
    res = _multispin(
        "profile", "--pair", "tiny", "--max-batch", "2", "--max-draft-len", "1", "--repeats", "1", "--json"
    )
    assert res.returncode == 0, res.stderr
    assert "timing drafts: 3/3 drafts" in res.stderr
    assert "timing verification: 1/2 batch sizes" in res.stderr and "timing verification: 2/2 batch sizes" in res.stderr
    assert "Warning" not in res.stderr


def test_undefined_positions_are_named_in_one_note():
    import numpy as np

    from multispin.experiments.acceptance import undefined_notes

    notes = undefined_notes(0.4, 10, np.array([0.5, 0.2, np.nan, np.nan, 0.1, np.nan]), 6)
    assert notes == [
        "acceptance at position 3–4, 6: no round reached it (every draft was rejected earlier); "
        "more --prompts give it samples"
    ]
    assert undefined_notes(0.4, 10, np.array([0.5, 0.2]), 2) == []
