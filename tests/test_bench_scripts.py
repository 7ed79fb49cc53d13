"""Benchmark scripts that users run and CI keeps working, run here with tiny settings.

They measure speed (the figures are not checked: performance targets belong in benchmarks/,
not in timed tests), but they also check that both sides emitted the target's greedy tokens,
and that check must catch a broken engine.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import multispin.runtime.roles as roles
from multispin.speculative.sampling import sample_categorical

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


TINY = ["--pair", "tiny", "--draft", "far", "--prompts", "2", "--max-new-tokens", "8", "--reps", "1"]  # "far": rejections


def test_bench_vs_hf_runs_and_checks_tokens(tmp_path):
    out = tmp_path / "vs_hf.json"
    assert _load("bench_vs_hf").main(TINY + ["--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["tokens_equal"] and len(doc["configurations"]) == 3
    spec, batched = list(doc["configurations"].values())[1:]
    # One batched run of 2 devices does fewer draft passes than 2 assisted loops, as it should.
    assert batched["ms_passes"]["draft"] < spec["hf_passes"]["draft"]


def test_control_bench_vs_hf_catches_wrong_tokens(monkeypatch):
    """Negative control: an engine that corrects a rejection from q instead of norm(max(0, p - q))
    keeps the rejected draft token."""
    monkeypatch.setattr(roles, "sample_residual", lambda p, q, u: int(sample_categorical(q, u)))
    assert _load("bench_vs_hf").main(TINY) == 1
