"""Benchmark scripts that users run and CI keeps working, run here with tiny settings.

They measure speed (the figures are not checked: performance targets belong in benchmarks/,
not in timed tests), but they also check that both sides emitted the target's greedy tokens,
and that check must catch a broken engine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import multispin.runtime.round.roles as roles
from multispin.speculative.sampling import sample_categorical

# real sockets, processes or models: `make test-fast` leaves these out
pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


TINY = [
    "--pair",
    "tiny",
    "--draft",
    "far",
    "--prompts",
    "2",
    "--max-new-tokens",
    "8",
    "--reps",
    "1",
]  # "far": rejections


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


def test_gpu_check_runs_on_the_cpu(tmp_path):
    """`benchmarks/gpu_check.sh --device cpu` end to end with tiny settings: one JSON with every
    stage, and CPU against CPU agrees on every device."""
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run(
        ["bash", str(BENCH / "gpu_check.sh"), "--device", "cpu", "--pair", "tiny", "--quick", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "[gpu_check" in proc.stderr  # progress lines
    doc = json.loads(out.read_text())
    assert {"environment", "verify_grid", "engine", "generate", "testbed"} <= set(doc)
    assert [(r["batch"], r["gamma"]) for r in doc["verify_grid"]["rows"]] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert doc["generate"]["agreement_of_tokens"]["all_equal"]
    assert doc["testbed"]["agreement_of_texts"]["all_equal"] and doc["testbed"]["on_device"]["consistent"]


def test_gpu_check_bad_device_is_one_line(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run(
        ["bash", str(BENCH / "gpu_check.sh"), "--device", "tpu", "--out", str(tmp_path / "x")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("gpu_check: device: unknown value 'tpu'")
    assert "Traceback" not in proc.stderr


def test_gpu_check_agreement_finds_the_first_difference():
    agree = _load("gpu_check").agreement({0: [1, 2, 3], 1: [4, 5]}, {0: [1, 2, 9], 1: [4, 5]})
    assert agree["equal_devices"] == [1] and not agree["all_equal"]
    assert agree["agreeing_prefix"] == {"0": 2, "1": 2}


def test_bench_transport_markov_runs_on_the_loops_public_api():
    """The transport benchmark's Markov row (it also runs against another checkout's src/, so it
    may use only what both protocol versions' loops offer)."""
    row = _load("bench_transport").bench_markov(2, 4)
    assert row["rounds"] == 4 and row["period_ms"] > 0 and row["wall_ms"] > 0
    assert {"overhead_ms", "overhead_share", "period_overhead_ms", "kB_per_round"} <= set(row)


def test_bench_engine_steps_are_warping_or_corrections():
    """The share the benchmark prints sums exactly its warping and correction steps, every one
    timed once per repetition; its acceptance figure is Σ min(p, q), inside (0, 1)."""
    import numpy as np

    bench = _load("bench_engine")
    steps, reference, result, acceptance = bench.engine_round(np.random.default_rng(0), 6, 3, 2048)
    assert all(name.split(":")[0] in ("warping", "corrections") for name in steps)
    assert {name.split(":")[0] for name in steps} == {"warping", "corrections"}
    assert result.rejected.any() and 0 < acceptance < 1
    ms, fwd = bench.repeated(steps, None, 2)
    assert fwd == [] and all(len(v) == 2 for v in ms.values())
    assert bench.spread([3.0, 1.0, 2.0]) == "2.0 (1.0–3.0)"


def test_bench_pool_measures_a_pooled_testbed(tmp_path):
    """bench_pool.py on the tiny pair, one small configuration: a consistent run with its figures."""
    row = _load("bench_pool").measure("tiny", 2, "pool", rounds=5, warmup=1)
    assert "error" not in row, row
    assert row["consistent"] and row["digests_match"] and len(row["texts"]) == 2
    assert row["rounds_per_s"] > 0 and row["cpu_s_per_round"] > 0 and row["peak_pss_gb"] > 0


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads CPU time from /proc")
def test_bench_silent_flood_measures_a_keyed_flood():
    """bench_silent_flood.py, one small row: 30 silent DEALERs with a valid key under the default
    quota of 4 are refused once each (the counts it reports come from the server's log)."""
    row = _load("bench_silent_flood").measure(30, window_s=1.0, warmup_s=1.0, serve_args=[])
    assert row["dealers"] == 30 and row["cpu_core"] >= 0 and row["seconds"] >= 2
    assert row["refusals"].get("too many silent connections of one key", 0) >= 26, row


def test_bench_demo_cpu_splits_a_demos_cpu_by_phase(tmp_path):
    """bench_demo_cpu.py on the tiny pair (its own process: it wraps the demo's functions): the
    phases add up to the total and every run's pool prefilled its prompts (read or computed);
    compare_demo_outputs.py finds the run's folder the same as itself and not as another seed's
    (tests/experiments/test_demo_prefills.py compares shared and fresh pools)."""
    argv = ["--pair", "tiny", "--devices", "2", "--rounds", "2", "--policies", "adaptive", "all_dl"]
    argv += ["--out", str(tmp_path / "out"), "--json", str(tmp_path / "doc.json")]
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent / "src")}
    done = subprocess.run([sys.executable, str(BENCH / "bench_demo_cpu.py"), *argv], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    doc = json.loads((tmp_path / "doc.json").read_text())
    assert doc["prefill_store"] and [r["policy"] for r in doc["runs"]] == ["adaptive", "all_dl"]
    parts = doc["setup_cpu_s"] + doc["rest_cpu_s"] + sum(r["main_cpu_s"] + r["pool_cpu_s"] for r in doc["runs"])
    assert parts == pytest.approx(doc["total_cpu_s"], rel=1e-6)
    assert all(r["pool"]["prefill_alone_tokens"] > 0 and r["pool_cpu_s"] > 0 for r in doc["runs"])
    differences = _load("compare_demo_outputs").differences
    assert differences(tmp_path / "out", tmp_path / "out") == []
    other = tmp_path / "other"
    (other / "seed-0").mkdir(parents=True)
    (other / "seed-0" / "summary.json").write_text(json.dumps({"seed": 1}))
    assert differences(tmp_path / "out", other) != []
    # --rtol: a float field within it is the same, an integer never
    for name, value in (("a", 1.0 + 1e-6), ("b", 1.0 + 1e-3)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({"x": value, "n": 3}))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "summary.json").write_text(json.dumps({"x": 1.0, "n": 3}))
    assert differences(tmp_path / "a", tmp_path / "c", rtol=1e-4) == []
    assert differences(tmp_path / "b", tmp_path / "c", rtol=1e-4) != []
    assert differences(tmp_path / "a", tmp_path / "c") != []  # exact by default
