"""Shipped and user data files go through one loader (`multispin.datafile`): a file that is not
JSON, lacks ``tasks`` or holds a NaN α is one line naming the file and the field, where it used to
be a 44-76 line traceback (or, for NaN, a line that did not name the file); a damaged shipped
profile no longer breaks every verb at import. ``optimizer.gamma_max: 0`` is outside the documented
range (it was inside, and ended in an IndexError)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from multispin.acceptance import shipped as profiles
from multispin.acceptance.spread import spread_files
from multispin.errors import ConfigError

PAIR = "smollm2-135m"
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A copy of the shipped profiles that the loader reads instead of the package's."""
    copy = tmp_path / "profiles"
    shutil.copytree(profiles.PROFILES_ROOT, copy)
    monkeypatch.setattr(profiles, "PROFILES_ROOT", copy)
    profiles.read_shipped.cache_clear()  # each file is read once per process: a test edits its copy first
    return copy / PAIR


def _first(folder: Path, kind: str) -> Path:
    return sorted(folder.glob(f"{kind}-*.json"))[0]


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))  # json.dumps writes NaN as the bare word, as Python readers accept


READERS = {
    "acceptance": lambda: profiles.acceptance_profiles(PAIR),
    "run-verdicts": lambda: profiles.run_verdict_files(PAIR),
    "spread": lambda: spread_files(PAIR),
}
FIRST_TASK_NUMBER = {
    "acceptance": ("alpha", lambda e: e.__setitem__("alpha", float("nan"))),
    "run-verdicts": ("tokens.alpha", lambda e: e["tokens"].__setitem__("alpha", float("nan"))),
    "spread": ("sd", lambda e: e.__setitem__("sd", float("inf"))),
}


def _one_line_naming(exc: pytest.ExceptionInfo, path: Path, field: str | None) -> None:
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: " + (f"{field}: " if field else "")), msg
    assert "reinstall" in msg


@pytest.mark.parametrize("kind", sorted(READERS))
def test_intact_copies_load(root, kind):
    """Negative control: the copied files are what the readers read, and they pass the checks."""
    assert READERS[kind]()


@pytest.mark.parametrize("kind", sorted(READERS))
def test_a_file_that_is_not_json_is_one_line_naming_it(root, kind):
    bad = _first(root, kind)
    bad.write_text('{"tasks": ')
    with pytest.raises(ConfigError) as exc:
        READERS[kind]()
    _one_line_naming(exc, bad, None)
    assert "not valid JSON at line 1" in str(exc.value)


@pytest.mark.parametrize("kind", sorted(READERS))
def test_a_file_without_tasks_is_one_line_naming_the_field(root, kind):
    bad = _first(root, kind)
    _edit(bad, lambda d: d.pop("tasks"))
    with pytest.raises(ConfigError, match="tasks: missing") as exc:
        READERS[kind]()
    _one_line_naming(exc, bad, "tasks")


@pytest.mark.parametrize("kind", sorted(READERS))
def test_a_non_finite_number_names_the_file_and_the_field(root, kind):
    bad = _first(root, kind)
    field, spoil = FIRST_TASK_NUMBER[kind]
    task = next(iter(json.loads(bad.read_text())["tasks"]))
    _edit(bad, lambda d: spoil(d["tasks"][task]))
    with pytest.raises(ConfigError, match="must be a finite number") as exc:
        READERS[kind]()
    _one_line_naming(exc, bad, f"tasks.{task}.{field}")


def _cli_with_root(root: Path, *args: str) -> subprocess.CompletedProcess:
    """The command line in a fresh interpreter whose shipped profiles are ``root``'s parent (the
    switch comes before anything reads them)."""
    code = (
        "import sys, pathlib; from multispin.acceptance import shipped as profiles; "
        f"profiles.PROFILES_ROOT = pathlib.Path({str(root.parent)!r}); "
        "from multispin import cli; cli.main(sys.argv[1:])"
    )
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120)


def test_a_damaged_shipped_profile_is_one_line_and_other_verbs_still_run(root):
    good = _cli_with_root(root, "scenario", "show", "measured-smollm2-host")
    assert good.returncode == 0, good.stderr  # negative control: the intact copy serves the preset
    bad = _first(root, "acceptance")
    bad.write_text("not json")
    shown = _cli_with_root(root, "scenario", "show", "measured-smollm2-host")
    assert shown.returncode == 2
    assert shown.stderr.count("\n") == 1 and str(bad) in shown.stderr, shown.stderr
    other = _cli_with_root(root, "scenario", "show", "paper-qwen")
    assert other.returncode == 0, other.stderr


def test_a_user_profile_that_is_not_json_is_one_line(multispin, tmp_path):
    bad = tmp_path / "mine.json"
    bad.write_text("[1, 2")
    run = multispin("optimize", "--devices", "4", "--acceptance-profile", str(bad))
    assert run.code == 2
    assert run.err.startswith(f"error: --acceptance-profile: {bad}: not valid JSON") and run.err.count("\n") == 1


def test_gamma_max_zero_is_outside_the_documented_range(multispin, tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("preset: paper-qwen\noptimizer:\n  gamma_max: 0\n")
    run = multispin("optimize", "--scenario", str(scenario), "--devices", "4")
    assert run.code == 2 and run.err.count("\n") == 1
    assert "optimizer.gamma_max: must be in [1, 64] (got 0)" in run.err
    scenario.write_text("preset: paper-qwen\noptimizer:\n  gamma_max: 1\n")
    assert multispin("optimize", "--scenario", str(scenario), "--devices", "4").code == 0  # the bound itself plans


def test_a_run_folder_whose_json_files_are_not_objects_is_read_as_empty(tmp_path):
    """run.json or a cached chunk holding JSON that is not an object (a list) used to end in an
    AttributeError traceback; read through the loader, they count as absent."""
    from multispin.commands._checks import check_reproduce_out
    from multispin.experiments.reproduce.runner import _read_cache, cache_cpu_seconds

    (tmp_path / "run.json").write_text("[1, 2]")
    check_reproduce_out(tmp_path, False, {"quick": True})  # no previous run to protect
    chunk = tmp_path / "cache" / "point" / "0.json"
    chunk.parent.mkdir(parents=True)
    chunk.write_text('["not", "a", "chunk"]')
    assert _read_cache(chunk, "key") is None
    assert cache_cpu_seconds(tmp_path) == 0.0
    chunk.write_text(json.dumps({"key": "key", "rows": [], "cpu_s": 2.5}))  # control: a good chunk is read
    assert _read_cache(chunk, "key") == ([], 2.5) and cache_cpu_seconds(tmp_path) == 2.5
