"""`reproduce` without --quick says how long it will take and where
it writes before it starts; the report's code version is `git describe` of the checkout (the
package version outside one); durations read in a sensible unit."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest

from multispin import __version__
from multispin._version import source_version
from multispin.errors import ConfigError


def _fake_run(calls):
    def run(cfg, command=""):
        calls.append(cfg)
        return SimpleNamespace(report=cfg.out / "report.md", claims=[], wall_s=0.0)

    return run


def test_full_reproduce_states_duration_and_folder_first(multispin, monkeypatch, tmp_path):
    from multispin.experiments.reproduce import pipeline

    calls = []
    monkeypatch.setattr(pipeline, "reproduce", _fake_run(calls))
    res = multispin("reproduce", "--out", str(tmp_path / "r"), "--workers", "2")
    assert res.code == 0 and len(calls) == 1
    first = res.err.splitlines()[0]
    assert first.startswith("the full reproduction: about 31 CPU-minutes of drops, ≈ 16 min on 2 idle core(s)")
    assert f"output in {tmp_path / 'r'}/ (report.md)" in first and "--quick" in first
    res = multispin("reproduce", "--quick", "--out", str(tmp_path / "q"), "--workers", "2")
    assert res.code == 0 and res.err == ""  # --quick: a few minutes, nothing to warn about
    res = multispin("reproduce", "--out", str(tmp_path / "f"), "--figure", "fig2", "--workers", "1")
    assert res.err.startswith("figure(s) fig2: part of about 31 CPU-minutes")


def test_source_version_is_git_describe_in_a_checkout():
    got = source_version()
    try:
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"],
            capture_output=True,
            text=True,
            cwd=__import__("pathlib").Path(__file__).parent,
        ).stdout.strip()
    except OSError:
        described = ""
    assert got == (described or __version__)


def test_source_version_outside_a_checkout_is_the_package_version(monkeypatch):
    import multispin._version as v

    def no_git(*a, **k):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", no_git)
    assert v.source_version() == __version__


def test_report_durations_read_in_seconds_or_minutes():
    from multispin.experiments.reproduce.report import _duration

    assert _duration(20) == "20 s" and _duration(900) == "15 min"


def test_no_line_is_cut_or_left_dangling(multispin):
    res = multispin("optimize", "--devices", "3", "--n-saa", "30", "--no-baselines")
    assert res.code == 0
    assert not [line for line in res.out.splitlines() if line.rstrip() != line.rstrip().rstrip(";")]
    assert "compute: T_ver0=" in res.out and "N_SAA=30" in res.out
    res = multispin("generate", "--pair", "tiny", "--devices", "1", "--max-new-tokens", "4")
    assert res.code == 0 and "…" not in res.out and "UL / DL" in res.out


def test_one_vocabulary_of_policy_names(multispin):
    """all_ul (not all-ul) in the CLI's help, the optimiser's baselines (API and --json) and the
    testbed's summary; the hyphenated spellings are refused."""
    import json

    from multispin import api
    from multispin.experiments.testbed import TestbedConfig
    from multispin.vocabulary import RUN_POLICIES as POLICIES

    help_text = multispin("testbed", "-h").out + multispin("demo", "-h").out
    assert "all_ul" in help_text and not [w for w in ("all-ul", "all-dl", "target-only") if w in help_text]
    res = multispin("optimize", "--devices", "3", "--n-saa", "30", "--json")
    baselines = json.loads(res.out)["baselines"]
    assert {"all_ul", "all_dl", "random"} <= set(baselines) and {"all_ul", "all_dl", "random"} <= set(POLICIES)
    assert set(api.plan(api.scenario(devices=3, n_saa=30)).baselines) == set(baselines)
    assert TestbedConfig.make(pair="tiny", policy="all_ul").policy == "all_ul"
    for old in ("all-ul", "target-only"):
        with pytest.raises(ConfigError, match="policy"):
            TestbedConfig.make(pair="tiny", policy=old)
    res = multispin("testbed", "--policy", "all-most")
    assert res.code == 2 and "'all_ul'" in res.err and "all-ul" not in res.err.replace("all-most", "")


def test_draft_policy_and_mode_policy_have_separate_names(multispin):
    """optimize --draft-policy (how γ is chosen), testbed --policy (the run policy: the built-in
    correction modes compared, or your own as module:attr); optimize's --policy takes only your own
    policy, and a draft-length search given there is pointed to --draft-policy."""
    import json

    from multispin import api
    from multispin.commands.optimize import DRAFT_POLICIES
    from multispin.optimize.baselines import DRAFT_POLICIES as OPTIMISER_DRAFT_POLICIES

    assert DRAFT_POLICIES is OPTIMISER_DRAFT_POLICIES  # one tuple, the vocabulary's
    out = multispin("optimize", "-h").out
    assert "--draft-policy" in out and "MODULE:ATTR" in out
    new = multispin("optimize", "--devices", "3", "--n-saa", "30", "--draft-policy", "best_uniform", "--json")
    old = multispin("optimize", "--devices", "3", "--n-saa", "30", "--policy", "best_uniform", "--json")
    assert new.code == 0 and old.code == 2 and "--draft-policy best_uniform" in old.err
    assert json.loads(new.out)["draft_policy"] == "best_uniform" and "policy" not in json.loads(new.out)
    sc = api.scenario(devices=3, n_saa=30)
    assert json.loads(api.plan(sc, draft_policy="best_uniform").to_json()) == json.loads(new.out)
    with pytest.raises(ConfigError, match="draft_policy|--draft-policy"):
        api.plan(sc, policy="best_uniform")
