"""`multispin profiles … --check`: every shipped run-verdicts file is what its parts (legacy) or its
inputs give, and a copy moved one step in one value is caught, naming the value (the negative
controls). The shipped spread file is recomputed from its shipped inputs; a spread file without
inputs is never current.

The producers themselves run on recorded testbed runs of the tiny pair (tests/acceptance/data/
tiny-runs/seed-S: `summary.json` and `rounds.jsonl` as `multispin testbed --pair tiny --devices 4
--rounds 12 --max-new-tokens 24 --seed S --policy P --out tests/acceptance/data/tiny-runs/seed-S`
wrote them, P adaptive for seeds 1 and 2, all_dl for 3, all_coupled for 4, three_way for 5) and on
seeded synthetic verdicts: what they write is current, and stale once one value moves.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from multispin.acceptance.provenance import digit_step, first_difference
from multispin.acceptance.recompute import inputs_path
from multispin.acceptance.shipped import PROFILES_ROOT
from multispin.experiments.run_summary import RunSummary

RUNS = Path(__file__).parent / "data" / "tiny-runs"
RUN_VERDICTS_FILE = PROFILES_ROOT / "smollm2-135m" / "run-verdicts-q5g64-t1-topk1024.json"
SPREAD_FILE = PROFILES_ROOT / "smollm2-135m" / "spread-q5g64-t1-topk1024.json"


def _copy(path: Path, into: Path) -> Path:
    """``path`` and its inputs copy (where shipped) under ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    out = into / path.name
    shutil.copy(path, out)
    if inputs_path(path).is_file():
        inputs_path(out).parent.mkdir(exist_ok=True)
        shutil.copy(inputs_path(path), inputs_path(out))
    return out


def _move(path: Path, field: str, step=None) -> None:
    """Move ``field`` (dotted) of the JSON file ``path`` one step: a count by 1, a number by one
    step in its 12th significant digit."""
    doc = json.loads(path.read_text())
    *parents, leaf = field.split(".")
    node = doc
    for key in parents:
        node = node[key]
    value = node[leaf]
    node[leaf] = value + (step if step is not None else 1 if isinstance(value, int) else digit_step(value))
    path.write_text(json.dumps(doc, indent=2) + "\n")


# ---- the comparison ---------------------------------------------------------------------------


def test_first_difference_names_the_field_and_checks_twelve_digits():
    a = {"tasks": {"chat": {"alpha": 0.8270475798992909, "jobs": 583, "ci95": [0.82, 0.83]}}, "method": "x"}
    assert first_difference(a, json.loads(json.dumps(a))) is None
    moved = json.loads(json.dumps(a))
    moved["tasks"]["chat"]["alpha"] += digit_step(0.8270475798992909)
    assert first_difference(a, moved).startswith("tasks.chat.alpha: shipped 0.8270475798992909")
    moved["tasks"]["chat"]["alpha"] = 0.8270475798992909 + 3e-16  # a sum's last bits: not stale
    assert first_difference(a, moved) is None
    moved["tasks"]["chat"]["jobs"] = 584
    assert first_difference(a, moved).startswith("tasks.chat.jobs:")
    moved = json.loads(json.dumps(a))
    moved["tasks"]["chat"]["ci95"] = [0.82]
    assert first_difference(a, moved) == "tasks.chat.ci95: 2 entries shipped, 1 recomputed"
    assert first_difference(a, {**a, "method": "other words"}) is None  # descriptive, not recomputed
    assert first_difference({"x": 1}, {"x": 1, "y": 2}) == "y: missing from the shipped file"


# ---- the shipped files ------------------------------------------------------------------------


@pytest.mark.parametrize("verb", ["run-alpha", "tokens-alpha", "spread", "coupled-alpha"])
def test_every_shipped_file_is_current(multispin, verb):
    run = multispin("profiles", verb, "--check")
    assert run.code == 0, run.err
    assert run.out.count("current: ") >= 1 and "stale" not in run.out + run.err


@pytest.mark.parametrize(
    ("verb", "shipped", "field", "kind"),
    [
        ("run-alpha", RUN_VERDICTS_FILE, "tasks.sharegpt.alpha", " (verdict-rate α)"),
        ("run-alpha", RUN_VERDICTS_FILE, "tasks.humaneval.trials", ""),
        ("tokens-alpha", RUN_VERDICTS_FILE, "tasks.humaneval.jobs", ""),
        ("tokens-alpha", RUN_VERDICTS_FILE, "tokens_sample.tasks.humaneval.rounds", ""),
        ("spread", SPREAD_FILE, "tasks.humaneval.sd", ""),
        ("spread", SPREAD_FILE, "tasks.sharegpt.mean", " (verdict-rate α)"),
    ],
)
def test_a_shipped_file_moved_one_step_is_stale(multispin, tmp_path, verb, shipped, field, kind):
    copy = _copy(shipped, tmp_path)
    assert multispin("profiles", verb, "--check", "--file", str(copy)).code == 0
    _move(copy, field)
    run = multispin("profiles", verb, "--check", "--file", str(copy))
    assert run.code == 1
    assert f"stale: {copy}: {field}: shipped " in run.err
    assert run.err.rstrip().endswith(kind.strip() or run.err.rstrip()[-1])


def test_a_spread_file_without_inputs_is_never_current(multispin, tmp_path):
    """A spread file with no inputs (no provenance) cannot be recomputed, so its check fails,
    naming why, rather than passing a file it cannot check."""
    copy = _copy(SPREAD_FILE, tmp_path)
    doc = json.loads(copy.read_text())
    del doc["provenance"]
    copy.write_text(json.dumps(doc))
    run = multispin("profiles", "spread", "--check", "--file", str(copy))
    assert run.code == 1 and "provenance: missing (no shipped inputs to recompute the file from)" in run.err


def test_a_shipped_spread_with_edited_inputs_is_stale(multispin, tmp_path):
    """Its inputs copy is the one its provenance hashed: one verdict changed is caught."""
    copy = _copy(SPREAD_FILE, tmp_path)
    inputs = json.loads(inputs_path(copy).read_text())
    inputs["verdicts"][0]["prompts"][0]["accepted"][0] += 1
    inputs_path(copy).write_text(json.dumps(inputs))
    run = multispin("profiles", "spread", "--check", "--file", str(copy))
    assert run.code == 1 and "provenance.inputs: sha256 of inputs/" in run.err


# ---- the producers on recorded runs -----------------------------------------------------------


def _produce(multispin, tmp_path, verb, *sources) -> Path:
    run = multispin("profiles", verb, "--pair", "tiny", "--out", str(tmp_path), *map(str, sources))
    assert run.code == 0, run.err
    return Path(run.out.strip().splitlines()[-1].split()[1])


def test_run_alpha_records_the_runs_and_is_current_until_a_value_moves(multispin, tmp_path):
    path = _produce(multispin, tmp_path, "run-alpha", RUNS / "seed-1", RUNS / "seed-3")
    doc = json.loads(path.read_text())
    assert path.name == "run-verdicts-close-t1-topk256.json"  # draft and policy read from the runs
    assert doc["runs"] == {
        "devices": 4,
        "rounds": 12,
        "max_new_tokens": 24,
        "policies": ["adaptive", "all_dl"],
        "seeds": [1, 3],
    }
    prov = doc["provenance"]
    assert prov["seeds"] == [1, 3] and set(prov["sources"]) == {"seed-1", "seed-3"}
    assert prov["command"].startswith("multispin profiles run-alpha --pair tiny ")
    assert multispin("profiles", "run-alpha", "--check", "--file", str(path)).code == 0
    for field, kind in (
        ("tasks.humaneval.tokens.alpha", "(tokens-matched run α)"),
        ("tasks.sharegpt.by_policy.all_dl.trials", ""),
    ):
        copy = _copy(path, tmp_path / field)  # a folder per control
        _move(copy, field)
        run = multispin("profiles", "run-alpha", "--check", "--file", str(copy))
        assert run.code == 1 and f"{field}: shipped" in run.err and kind in run.err


def test_tokens_alpha_adds_other_runs_and_is_checked(multispin, tmp_path):
    _produce(multispin, tmp_path, "run-alpha", RUNS / "seed-1", RUNS / "seed-3")
    path = _produce(multispin, tmp_path, "tokens-alpha", RUNS / "seed-2", RUNS / "seed-3")
    doc = json.loads(path.read_text())
    assert doc["tokens_runs"] == {"seeds": [2, 3], "policies": ["adaptive", "all_dl"], "runs": 2}
    assert doc["runs"]["seeds"] == [1, 3] and doc["provenance"]["seeds"] == [1, 2, 3]
    assert multispin("profiles", "tokens-alpha", "--check", "--file", str(path)).code == 0
    _move(path, "tokens_runs.runs")
    run = multispin("profiles", "tokens-alpha", "--check", "--file", str(path))
    assert run.code == 1 and "tokens_runs.runs: shipped 3, recomputed 2" in run.err


def test_tokens_alpha_needs_a_run_verdicts_file(multispin, tmp_path):
    """No run-verdicts file to add the runs to: one line, exit 2."""
    runs = (str(RUNS / "seed-1"), str(RUNS / "seed-2"))
    run = multispin("profiles", "tokens-alpha", "--pair", "tiny", "--out", str(tmp_path), *runs)
    assert run.code == 2 and "has no shipped inputs" in run.err
    assert len(run.err.strip().splitlines()) == 1


def _legacy_with_sample(multispin, tmp_path, tokens_alpha: float) -> Path:
    """A legacy run-verdicts file (the shipped one, renamed for the tiny pair's draft) whose chat
    tokens-matched α is ``tokens_alpha``, given the tiny runs of seeds 1 and 2 as its re-run sample."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    legacy = tmp_path / "run-verdicts-close-t1-topk256.json"
    doc = json.loads(RUN_VERDICTS_FILE.read_text())
    doc["tasks"]["sharegpt"]["tokens"]["alpha"] = tokens_alpha
    legacy.write_text(json.dumps(doc))
    runs = (str(RUNS / "seed-1"), str(RUNS / "seed-2"))
    run = multispin("profiles", "tokens-alpha", "--pair", "tiny", "--out", str(tmp_path), *runs)
    assert run.code == 0, run.err
    assert "re-run sample's tokens-matched run α" in run.out
    return legacy


def test_a_legacy_files_tokens_alpha_is_checked_against_its_rerun_sample(multispin, tmp_path):
    """The sample's block is recomputed from its shipped inputs, and the file's own tokens-matched
    α must lie in the sample's interval: a file whose α is far from its runs' (0.5, the control)
    is stale, and one inside the interval is current until its sample moves."""
    legacy = _legacy_with_sample(multispin, tmp_path, 0.5)
    sample = json.loads(legacy.read_text())["tokens_sample"]
    lo, hi = sample["tasks"]["sharegpt"]["ci95"]
    assert sample["seeds"] == [1, 2] and sample["runs"] == 2 and 0.5 < lo
    run = multispin("profiles", "tokens-alpha", "--check", "--file", str(legacy))
    assert run.code == 1 and "outside its re-run sample's 95% interval" in run.err
    inside = _legacy_with_sample(multispin, tmp_path / "in", (lo + hi) / 2)
    assert multispin("profiles", "tokens-alpha", "--check", "--file", str(inside)).code == 0
    _move(inside, "tokens_sample.tasks.sharegpt.rounds")
    run = multispin("profiles", "tokens-alpha", "--check", "--file", str(inside))
    assert run.code == 1 and "tokens_sample.tasks.sharegpt.rounds: shipped" in run.err


def _synthetic_verdicts(task: str, seed: int) -> dict:
    """160 prompts' γ = 8 verdict rounds with each prompt's own α (sd 0.05 around 0.85)."""
    rng = np.random.default_rng(seed)
    prompts = []
    for alpha in np.clip(rng.normal(0.85, 0.05, 160), 0.05, 0.99):
        runs = [int(np.argmin(np.append(rng.random(8) < alpha, False))) for _ in range(8)]
        prompts.append({"accepted": runs})
    sampling = {"temperature": 1.0, "top_k": 256, "top_p": 1.0}
    return {"pair": "tiny", "task": task, "seed": seed, "draft": "close", "sampling": sampling, "prompts": prompts}


def test_spread_is_fitted_recorded_and_checked(multispin, tmp_path):
    files = []
    for task, seed in (("chat", 1), ("code", 2)):
        files.append(tmp_path / f"v-{task}.json")
        files[-1].write_text(json.dumps(_synthetic_verdicts(task, seed)))
    path = _produce(multispin, tmp_path / "out", "spread", *files)
    doc = json.loads(path.read_text())
    assert path.name == "spread-close-t1-topk256.json" and doc["provenance"]["seeds"] == [1, 2]
    assert 0.02 < doc["tasks"]["humaneval"]["sd"] < 0.08  # the spread the verdicts were drawn with
    assert multispin("profiles", "spread", "--check", "--file", str(path)).code == 0
    _move(path, "tasks.humaneval.sd")
    run = multispin("profiles", "spread", "--check", "--file", str(path))
    assert run.code == 1 and "tasks.humaneval.sd: shipped" in run.err


def test_check_refuses_a_file_of_another_kind(multispin, tmp_path):
    run = multispin("profiles", "spread", "--check", "--file", str(RUN_VERDICTS_FILE))
    assert run.code == 2 and "is not a spread file" in run.err
    run = multispin("profiles", "run-alpha", "--pair", "tiny")
    assert run.code == 2 and "INPUTS" in run.err


@pytest.mark.parametrize(
    ("summary", "said"),
    [
        ('{"pair": "tiny"}', "summary.json lacks 'policy'"),
        ('{"schema": "multispin.optimize", "pair": "tiny"}', "is not a testbed summary"),
        ("[1]", "not a JSON object"),
    ],
)
def test_a_folder_that_is_not_a_run_is_one_line(multispin, tmp_path, summary, said):
    (tmp_path / "summary.json").write_text(summary)
    (tmp_path / "rounds.jsonl").write_text("")
    run = multispin("profiles", "run-alpha", "--pair", "tiny", "--out", str(tmp_path / "out"), str(tmp_path))
    assert run.code == 2 and said in run.err
    assert len(run.err.strip().splitlines()) == 1


def test_a_summary_cut_to_the_fields_a_producer_reads_is_refused(multispin, tmp_path):
    """The producers read a run's summary.json through `RunSummary` only: a summary cut to the
    fields they use (what these fixtures once were) is not a run's, and a key missing is named."""
    for name in ("summary.json", "rounds.jsonl"):
        shutil.copy(RUNS / "seed-1" / name, tmp_path / name)
    whole = json.loads((tmp_path / "summary.json").read_text())
    used = ("schema", "pair", "policy", "tasks", "drafts", "alpha_prior", "config", "payload")
    (tmp_path / "summary.json").write_text(json.dumps({k: whole[k] for k in used}))
    run = multispin("profiles", "run-alpha", "--pair", "tiny", "--out", str(tmp_path / "out"), str(tmp_path))
    assert run.code == 2 and "summary.json lacks 'clock'" in run.err


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_the_recorded_runs_are_whole_summaries(seed):
    """Each recorded run's summary.json is what `RunSummary` writes, key for key and value for
    value: the producers' fixtures are real runs, not documents cut to what a producer reads."""
    doc = json.loads((RUNS / f"seed-{seed}" / "summary.json").read_text())
    rebuilt = RunSummary.from_json(doc).to_json()
    version = "multispin_version"  # the package's, which a release bumps without changing the run
    assert {**rebuilt, version: doc[version]} == doc
    assert doc["config"] == {**doc["config"], "pair": "tiny", "devices": 4, "rounds": 12, "seed": seed}


# ---- the coupled runs' α ---------------------------------------------------------------------


def test_coupled_alpha_is_fitted_from_the_coupled_rounds_recorded_and_checked(multispin, tmp_path):
    path = _produce(multispin, tmp_path, "coupled-alpha", RUNS / "seed-4", RUNS / "seed-5")
    doc = json.loads(path.read_text())
    assert path.name == "coupled-runs-close-t1-topk256.json"
    assert doc["runs"] == {"policies": ["all_coupled", "three_way"], "seeds": [4, 5], "runs": 2}
    assert doc["provenance"]["seeds"] == [4, 5]
    for entry in doc["tasks"].values():
        assert 0.5 < entry["alpha"] < 1 and entry["ci95"][0] <= entry["alpha"] <= entry["ci95"][1]
    assert multispin("profiles", "coupled-alpha", "--check", "--file", str(path)).code == 0
    _move(path, "tasks.sharegpt.alpha")
    run = multispin("profiles", "coupled-alpha", "--check", "--file", str(path))
    assert run.code == 1 and "tasks.sharegpt.alpha: shipped" in run.err
    assert run.err.rstrip().endswith("(coupled tokens-matched run α)")


def test_coupled_alpha_refuses_a_run_with_no_coupled_device(multispin, tmp_path):
    run = multispin("profiles", "coupled-alpha", "--pair", "tiny", "--out", str(tmp_path), str(RUNS / "seed-1"))
    assert run.code == 2 and "the run verified no device coupled ('adaptive')" in run.err
