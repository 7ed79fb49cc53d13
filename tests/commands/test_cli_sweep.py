"""Every verb × bad values (out of range, wrong type, bad choice, missing file, conflicting flags,
unknown flag): exit 2, exactly one line on stderr that starts with ``error:``, no traceback.

The cases are chosen to fail before any model loads, so the sweep runs in seconds in-process;
two subprocess runs check the installed entry point the same way."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from multispin import cli

MISSING = "no/such/file"

CASES = {
    "generate": [
        ["--devices", "0"],
        ["--devices", "abc"],
        ["--mode", "sideways"],
        ["--draft-len", "21"],
        ["--top-p", "0"],
        ["--log-level", "loud"],
        ["--device", "tpu"],
        ["--bogus"],
    ],
    "measure": [["--task", "poetry"], ["--prompts", "1"], ["--source", "web"], ["--draft-len", "x"]],
    "profile": [["--max-batch", "0"], ["--repeats", "x"], ["--threads", "0"]],
    "testbed": [
        ["--devices", "0"],
        ["--clock", "sundial"],
        ["--policy", "best"],
        ["--scenario", f"{MISSING}.yaml"],
        ["--scenario", "paper-qwen", "--preset", "paper-r1"],
        ["--pdl-dbm", "loud"],
        ["--rounds", "0"],
    ],
    "demo": [
        ["--devices", "0"],
        ["--scenario", "gpt-4"],
        ["--noise-figure-db", "99"],
        ["--rounds", "1"],
        ["--seeds", "0"],
        ["--sweep", "qos"],
        ["--pair", "tiny", "--draft", "nope", "--rounds", "3"],
    ],
    "optimize": [
        ["--devices", "0"],
        ["--scenario", f"{MISSING}.yaml"],
        ["--compute-profile", f"{MISSING}.json"],
        ["--acceptance-profile", f"{MISSING}.json"],
        ["--scenario", "paper-qwen", "--config", "x.yaml"],
        ["--draft", "q4g64"],
        ["--round", "-1"],
        ["--noise-figure-db", "-3"],
        ["--n-saa", "0"],
        ["--devices", "100000"],
        ["--policy", "magic"],
        ["--draft-policy", "magic"],
    ],
    "serve": [["--port", "70000"], ["--mode", "x"], ["--devices", "0"], ["--pair", "tiny"]],
    "device": [
        ["--server", "127.0.0.1", "--device-id", "0", "--prompt", "x"],
        ["--server", "tcp://h:0", "--device-id", "0", "--prompt", "x"],
        ["--device-id", "-1", "--prompt", "x"],
        ["--prompt", "x"],
        ["--device-id", "0", "--prompt", "x", "--server-timeout", "0"],
    ],
    "reproduce": [
        ["--workers", "0"],
        ["--scenario", "x"],
        ["--drops", "0"],
        ["--preset", "paper-r1", "--scenario", "all"],
        ["--out", "/proc/no/such/dir", "--quick", "--figure", "fig1_mode_split"],  # an unwritable path
    ],
    "sweep": [
        ["--over", "radio.p_dl_dbm"],
        ["--over", "radio.p_dl_dbm=999"],
        ["--over", "radio.nothere=1"],
        ["--over", "radio.p_dl_dbm=10", "--policies", "target_only"],
        ["--over", "radio.p_dl_dbm=10", "--drops", "1"],
        ["--over", "seed=1,2"],
        ["--over", "radio.p_dl_dbm=10", "--set", "radio.bandwidth_hz=1,2"],
    ],
    "scenario": [["show", "nope"], ["show"], ["bogus"], ["show", f"{MISSING}.toml"]],
    "profiles": [
        ["frob"],
        ["spread", "--pair", "nope", MISSING],
        ["run-alpha", "--pair", "smollm2-135m", MISSING],
        ["tokens-alpha", "--check", "--file", MISSING],
    ],
    "keys": [
        ["device", "k", "--device-id", "-1"],
        ["device", "k", "--device-id", "x"],
        ["frob"],
        ["device", "k", "--device-id", "0", "--allow", MISSING],
    ],
}


def test_every_verb_is_swept():
    verbs = set(cli.app.registered_commands and [c.name or c.callback.__name__ for c in cli.app.registered_commands])
    verbs |= {g.name for g in cli.app.registered_groups}
    assert verbs == set(CASES), "add the new verb's bad values to CASES"


@pytest.mark.parametrize(
    "verb, args",
    [(v, a) for v, cases in CASES.items() for a in cases],
    ids=lambda x: x if isinstance(x, str) else " ".join(x),
)
def test_bad_value_is_one_line_and_exit_2(multispin, monkeypatch, verb, args):
    monkeypatch.delenv("MULTISPIN_SECRET", raising=False)
    if verb == "device":
        monkeypatch.setenv("MULTISPIN_SECRET", "test-secret-0123456789")
    res = multispin(verb, *args)
    assert res.code == 2, (res.code, res.err, res.out[-500:])
    assert "Traceback" not in res.err + res.out
    assert res.err.startswith("error: ") and res.err.count("\n") == 1, repr(res.err)  # nothing else


def test_unknown_verb_and_bare_command(multispin):
    res = multispin("frobnicate")
    assert res.code == 2 and res.err.strip().count("\n") == 0 and "frobnicate" in res.err
    res = multispin()
    assert res.code == 2 and "optimize" in res.out + res.err  # the help, listing the verbs


@pytest.mark.parametrize(
    "args", [["optimize", "--devices", "abc"], ["device", "--server", "x", "--device-id", "0", "--prompt", "p"]]
)
def test_installed_entry_point_prints_one_line(args):
    env = {"MULTISPIN_SECRET": "test-secret-0123456789", "PATH": ""}
    res = subprocess.run(
        [sys.executable, "-c", "from multispin.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


# ---------------------------------------------------------------------------- no phantom flags

# `--flag` spellings in the source that belong to other programs, not to `multispin`.
FOREIGN_FLAGS = {
    "--no-deps",
    "--only-binary",
    "--progress-bar",
    "--disable-pip-version-check",  # pip download
    "--always",
    "--dirty",
    "--show-toplevel",
    "--tags",  # git describe / rev-parse (_version.source_version)
    "--porcelain",
    "--untracked-files",  # git status (experiments.profiles: a provenance's commit, -dirty)
}


def _all_flags() -> set[str]:
    from typer.main import get_command

    flags: set[str] = set()

    def walk(cmd):
        for p in getattr(cmd, "params", []):
            flags.update(o for o in list(p.opts) + list(p.secondary_opts) if o.startswith("--"))
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    walk(get_command(cli.app))
    return flags


def test_no_message_names_a_flag_that_does_not_exist():
    """An error recommended `--local <dir>`, which no verb has."""
    src = Path(cli.__file__).parent
    known = _all_flags() | FOREIGN_FLAGS | {"--help"}
    phantom = {}
    for path in src.rglob("*.py"):
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", path.read_text()):
            if flag not in known:
                phantom.setdefault(flag, str(path.relative_to(src)))
    assert not phantom, f"flags named in messages or docs that no verb has: {phantom}"
