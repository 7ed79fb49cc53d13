"""What a run writes and prints, against files recorded from a run on the tiny pair (no download):
the testbed's summary.json key for key and value for value, and the demo's printed tables and its
summary.json. The runs are deterministic: the tokens, the channel and the virtual clock follow the
seed. Three things do not, and are masked (kept as keys, their values replaced by `MASK`, or
the varying part of a path replaced):

- ``wall_time_s``: the host's stopwatch around the run;
- the run's folder, a fresh temporary one each time: paths under it are written from `TMP`;
- ``multispin_version``: the package's version, which a release bumps without changing the run.

The planner's CPU time per round (``mean_planning_cpu_s``, the demo's ``plan`` column) is measured
with the thread's CPU clock; the runs here stop that clock (`frozen_planning_clock`), so it is 0
and compared like every other value.

A deliberate change of a figure re-records the files: ``MULTISPIN_RECORD_GOLDEN=1 pytest
tests/experiments/test_run_summary_golden.py`` (then read the diff before committing it)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import multispin.runtime.round.planner as planner_module
from multispin.cli import app
from multispin.experiments.testbed import TestbedConfig, run_testbed

# real sockets, processes or models: `make test-fast` leaves these out
pytestmark = pytest.mark.integration

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "run_summary"
RECORD = os.environ.get("MULTISPIN_RECORD_GOLDEN") == "1"
MASK = "<varies from run to run>"
TMP = "<tmp>"  # the run's temporary folder, in every path under it
EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"  # own_policies.py
# (path of keys) -> why its value is not compared
VOLATILE: dict[tuple[str, ...], str] = {
    ("wall_time_s",): "the host's stopwatch",
    ("multispin_version",): "the package's version",
}
DEMO_ARGS = ["--pair", "tiny", "--devices", "2", "--rounds", "4", "--max-new-tokens", "8", "--runner", "thread"]


def masked(doc: dict) -> dict:
    """``doc`` (a copy) with every `VOLATILE` value replaced by `MASK`; a missing key stays missing."""
    doc = json.loads(json.dumps(doc))
    for path in VOLATILE:
        parent = doc
        for key in path[:-1]:
            parent = parent.get(key, {})
        if path[-1] in parent:
            parent[path[-1]] = MASK
    return doc


def differences(got, want, where: str = "") -> list[str]:
    """Every place two JSON documents differ: a key missing on either side, a key out of order, a
    value of another type or another value (floats exactly: a rewrite must not move a digit)."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{where}.{k}: missing" for k in want if k not in got]
        out += [f"{where}.{k}: unexpected" for k in got if k not in want]
        if not out and list(got) != list(want):
            out.append(f"{where}: keys in another order")
        return out + [d for k in want if k in got for d in differences(got[k], want[k], f"{where}.{k}")]
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return [f"{where}: {len(got)} items, want {len(want)}"]
        return [d for i, (g, w) in enumerate(zip(got, want)) for d in differences(g, w, f"{where}[{i}]")]
    if type(got) is not type(want) or got != want:
        return [f"{where}: {got!r}, want {want!r}"]
    return []


def changed_lines(got: str, want: str) -> list[int]:
    """The indices of the lines where two printed outputs differ (a line more or less counts)."""
    a, b = got.splitlines(), want.splitlines()
    return [i for i in range(max(len(a), len(b))) if a[i : i + 1] != b[i : i + 1]]


def check_golden(doc: dict, name: str) -> None:
    """``doc`` masked equals the recorded file ``name`` (or records it, with MULTISPIN_RECORD_GOLDEN=1)."""
    path = GOLDEN / name
    if RECORD:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(masked(doc), indent=2, ensure_ascii=False) + "\n")
    assert differences(masked(doc), json.loads(path.read_text())) == []


@pytest.fixture
def frozen_planning_clock(monkeypatch):
    """The planner's thread-CPU clock stopped: its per-round planning time is 0, not the host's."""
    monkeypatch.setattr(planner_module.time, "thread_time", lambda: 0.0)


def _profiles(folder: Path) -> dict:
    """An acceptance profile per task and a compute profile of the tiny pair, as a user measures them."""
    for task, alpha in (("chat", 0.8), ("code", 0.7)):
        doc = {"pair": "tiny", "vocab_size": 256, "task": task, "tasks": {task: alpha}}
        (folder / f"acc-{task}.json").write_text(json.dumps(doc))
    compute = {"pair": "tiny", "vocab_size": 256, "t_ver0_s": 0.05, "t_ver1_s": 0.004, "r2": 0.97}
    (folder / "compute.json").write_text(json.dumps(compute))
    return {
        "acceptance_profile": [str(folder / "acc-chat.json"), str(folder / "acc-code.json")],
        "compute_profile": str(folder / "compute.json"),
    }


# each case a shape of summary.json: the default (forecast and the model at the run's rounds), the
# user's own profiles (their source and the compute fit's R²), a user's policy (no forecast)
CASES = {
    "adaptive": lambda folder: dict(policy="adaptive"),
    "profiles": lambda folder: dict(policy="all_dl", **_profiles(folder)),
    "user-policy": lambda folder: dict(user_policy="own_policies:AllDL", seed=4),
}


@pytest.fixture(scope="module", params=list(CASES))
def testbed_summary(request, tmp_path_factory) -> tuple[str, dict]:
    """(case, summary.json) of a five-round run of three devices (virtual clock) of a `CASES` case,
    with the paths under its temporary folder written from `TMP`."""
    folder = tmp_path_factory.mktemp("testbed")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(planner_module.time, "thread_time", lambda: 0.0)
        mp.syspath_prepend(str(EXAMPLES))
        cfg = TestbedConfig.make(
            pair="tiny",
            devices=3,
            rounds=5,
            max_new_tokens=200,
            runner="thread",
            out=folder / "run",
            **CASES[request.param](folder),
        )
        run_testbed(cfg)
    sys.modules.pop("own_policies", None)
    text = (folder / "run" / "summary.json").read_text()
    return request.param, json.loads(text.replace(json.dumps(str(folder))[1:-1], TMP))


def test_testbed_summary_json_equals_the_recorded_one(testbed_summary):
    case, doc = testbed_summary
    check_golden(doc, f"testbed_summary-{case}.json")


@pytest.mark.parametrize(
    "perturb",
    [
        pytest.param(lambda d: d.update(goodput_tokens_per_s=d["goodput_tokens_per_s"] * (1 + 1e-15)), id="a-digit"),
        pytest.param(lambda d: d["service"].update(jain_index=0.5), id="nested-value"),
        pytest.param(lambda d: d.update(extra=1), id="a-key-more"),
        pytest.param(lambda d: d.pop("alpha_prior"), id="a-key-less"),
        pytest.param(lambda d: d.update(rounds=float(d["rounds"])), id="int-as-float"),
        pytest.param(lambda d: d.update(wall_time_s=-1.0), id="volatile-is-masked"),
    ],
)
def test_the_golden_comparison_fails_on_one_changed_value(testbed_summary, perturb):
    """Negative control: one value moved (or a key added or lost) is a difference; a masked
    value is not."""
    case, doc = testbed_summary
    doc = json.loads(json.dumps(doc))
    perturb(doc)
    want = json.loads((GOLDEN / f"testbed_summary-{case}.json").read_text())
    found = differences(masked(doc), want)
    if doc.get("wall_time_s") == -1.0:
        assert found == []
    else:
        assert found, "the comparison missed a changed value"


def test_key_order_is_part_of_the_comparison():
    assert differences({"b": 1, "a": 2}, {"a": 2, "b": 1}) == [": keys in another order"]


def test_demo_prints_the_recorded_tables_and_writes_the_recorded_summary(tmp_path, frozen_planning_clock):
    res = CliRunner().invoke(app, ["demo", *DEMO_ARGS, "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert str(tmp_path) not in res.stdout  # the folder is printed on stderr only
    table = GOLDEN / "demo_output.txt"
    if RECORD:
        table.write_text(res.stdout)
    assert changed_lines(res.stdout, table.read_text()) == []
    text = (tmp_path / "summary.json").read_text()
    check_golden(json.loads(text.replace(json.dumps(str(tmp_path))[1:-1], TMP)), "demo_summary.json")


def test_the_output_comparison_fails_on_one_changed_character():
    """Negative control: the recorded output with one cell changed differs on that line alone."""
    text = (GOLDEN / "demo_output.txt").read_text()
    lines = text.splitlines()
    row = next(i for i, ln in enumerate(lines) if ln.startswith("│") and "adaptive" in ln)
    changed = "\n".join(lines[:row] + [lines[row].replace(" ok ", " no ", 1)] + lines[row + 1 :])
    assert changed_lines(changed, text) == [row]
    assert changed_lines(text + "one more line\n", text) == [len(lines)]
