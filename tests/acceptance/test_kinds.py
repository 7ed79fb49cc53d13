"""One vocabulary of α kinds, the shipped files' one reader, and the label every α line carries."""

from __future__ import annotations

import json

import pytest

from multispin.acceptance import kinds
from multispin.acceptance.shipped import device_alpha, planned_kind, read_shipped, shipped_tokens_matched_alpha
from multispin.errors import ConfigError

SAMPLED = {"temperature": 1.0, "top_k": 1024, "top_p": 1.0}


def test_every_kind_has_a_meaning_an_estimator_and_a_label():
    for kind in kinds.AlphaKind.__args__:  # type: ignore[attr-defined]
        meaning, where = kinds.KINDS[kind]
        assert meaning and where
        assert kinds.label(kind).endswith("α") and kind.split("_")[0] in kinds.label(kind).replace("-", "_")


def test_an_unknown_kind_is_one_line_naming_the_allowed():
    with pytest.raises(ConfigError, match=r"alpha kind: unknown value 'run' \(allowed: teacher_forced, shrunk"):
        device_alpha("smollm2-135m", "q5g64", "chat", SAMPLED, kind="run")


def test_the_planned_kind_says_which_alpha_the_plans_start_from():
    # the demo's default draft ships runs: its plans start from the tokens-matched α
    assert planned_kind("smollm2-135m", "q5g64", "chat", SAMPLED) == kinds.TOKENS_MATCHED
    planned = device_alpha("smollm2-135m", "q5g64", "chat", SAMPLED, kind="planned")
    assert planned == shipped_tokens_matched_alpha("smollm2-135m", "q5g64", "chat", SAMPLED)
    # another draft has a profile but no runs: the shrunk α, and the label says so
    assert planned_kind("smollm2-135m", "q4g64", "chat", SAMPLED) == kinds.SHRUNK
    assert device_alpha("smollm2-135m", "q4g64", "chat", SAMPLED, kind="planned") == device_alpha(
        "smollm2-135m", "q4g64", "chat", SAMPLED, kind="shrunk"
    )
    # nothing shipped: None, printed as the scenario's assumed α
    assert planned_kind("tiny", "close", "chat", SAMPLED) is None
    assert kinds.planned_alpha_source([None, None]) == "from the scenario's (assumed)"
    assert kinds.planned_alpha_source(["tokens_matched"] * 2) == "from tokens-matched run α"
    mixed = kinds.planned_alpha_source(["tokens_matched", "shrunk", "shrunk"])
    assert mixed == "from tokens-matched run α ×1, shrunk profile α ×2"


def test_a_shipped_file_is_read_once_per_process(tmp_path):
    """The files are package data: read on first use and cached (the loader's one-line errors are
    tests/acceptance/test_data_files.py's)."""
    good = tmp_path / "acceptance-x-chat-t1.json"
    good.write_text(json.dumps({"draft": "x", "sampling": {}, "tasks": {"chat": {"alpha": 0.8}}, "alpha": 0.8}))
    assert read_shipped(good, "acceptance")["alpha"] == 0.8
    good.write_text(json.dumps({"draft": "x", "sampling": {}, "tasks": {"chat": {"alpha": 0.1}}, "alpha": 0.1}))
    assert read_shipped(good, "acceptance")["alpha"] == 0.8  # cached
    read_shipped.cache_clear()  # control: a fresh read sees the edit
    assert read_shipped(good, "acceptance")["alpha"] == 0.1
