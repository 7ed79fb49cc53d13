"""Cached weights are checked against the sha256 written at conversion, once per process. Before,
only file sizes were checked: a byte flipped in the cached model.safetensors gave exit 0 and a
different text, without a word. Here a converted model (the tiny target, saved by a stand-in
converter from a stand-in verified source) has one byte flipped inside its weights: the load is
refused in one line naming the file and the repair, and the negative control shows the flipped
byte really is in the weights a load without the check would use (the greedy text changes)."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest
import torch

from multispin.errors import ModelError
from multispin.models import acquire
from multispin.models.tiny import _build_target

NAME = "test-tiny-weights"
GGUF = b"a stand-in for a verified GGUF source"
PROMPT = [5, 17, 99, 42]


@pytest.fixture
def source(tmp_path, monkeypatch):
    """A registered model whose verified source is a local file, converted by saving the tiny target."""
    local = tmp_path / "local"
    local.mkdir()
    (local / "tiny.gguf").write_bytes(GGUF)
    src = acquire.ModelSource(NAME, "test", (), "tiny.gguf", hashlib.sha256(GGUF).hexdigest(), len(GGUF))
    monkeypatch.setitem(acquire.MODEL_SOURCES, NAME, src)
    monkeypatch.setattr(acquire, "_VERIFIED", {})
    return local


def _convert(gguf: Path, out: Path) -> dict:
    _build_target(0).save_pretrained(out, safe_serialization=True)
    return {}


def _ensure(local: Path, root: Path) -> Path:
    return acquire.ensure_model(NAME, local_path=local, root=root, converter=_convert)


def _load(directory: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float64).eval()


def _greedy(directory: Path, steps: int = 8) -> list[int]:
    model, ids = _load(directory), list(PROMPT)
    with torch.no_grad():
        for _ in range(steps):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(PROMPT) :]


def _weight_that_decides(directory: Path, token: int) -> int:
    """A column j of lm_head's row ``token`` whose weight (|w| < 1) pulls the token's logit at the
    prompt's end down: made 2¹⁰²⁴ times larger, that logit becomes hugely negative."""
    model = _load(directory)
    with torch.no_grad():
        hidden = model.model(torch.tensor([PROMPT])).last_hidden_state[0, -1]
    row = model.lm_head.weight[token]
    pulls = (hidden * row < 0) & (row.abs() < 1)
    return int(torch.where(pulls, hidden.abs(), torch.zeros_like(hidden)).argmax())


def _flip_a_byte_in(path: Path, tensor: str, row: int, column: int) -> None:
    """XOR 0x40 into the top byte of float64 ``tensor[row, column]``: exponent bit 10, which is 0
    for |w| < 1, so w grows by 2¹⁰²⁴ with its sign kept."""
    data = bytearray(path.read_bytes())
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    begin, _ = header[tensor]["data_offsets"]
    width = header[tensor]["shape"][1]
    offset = 8 + header_len + begin + 8 * (row * width + column) + 7  # little endian: byte 7 is the top one
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


def test_a_flipped_byte_in_the_cached_weights_is_refused_in_one_line(source, tmp_path):
    root = tmp_path / "cache"
    directory = _ensure(source, root)
    manifest = json.loads((directory / acquire.MANIFEST_NAME).read_text())
    assert set(manifest["sha256"]) == set(manifest["files"])  # written at conversion
    before = _greedy(directory)

    weights = directory / "model.safetensors"
    _flip_a_byte_in(weights, "lm_head.weight", before[0], _weight_that_decides(directory, before[0]))
    assert weights.stat().st_size == manifest["files"]["model.safetensors"]  # the size check alone passes

    acquire._VERIFIED.clear()  # a new process
    with pytest.raises(ModelError) as exc:
        _ensure(source, root)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"{weights}: sha256 ")
    assert f"delete {directory}" in msg
    # negative control: without the check, the flipped byte is in the weights and the text changes
    assert _greedy(directory) != before


def test_verified_once_per_process_and_again_when_a_file_changes(source, tmp_path, monkeypatch):
    root = tmp_path / "cache"
    directory = _ensure(source, root)
    calls: list[str] = []
    real = acquire.sha256_file
    monkeypatch.setattr(acquire, "sha256_file", lambda p: calls.append(str(p)) or real(p))
    acquire._VERIFIED.clear()
    _ensure(source, root)
    first = len(calls)
    assert first == len(json.loads((directory / acquire.MANIFEST_NAME).read_text())["files"])
    _ensure(source, root)
    assert len(calls) == first  # once per process
    config = directory / "config.json"
    config.write_text(config.read_text().replace('"bos_token_id": 1', '"bos_token_id": 3'))
    with pytest.raises(ModelError, match="config.json: sha256"):
        _ensure(source, root)  # a changed file is hashed again (and refused)


def test_a_manifest_from_before_the_hashes_gets_them_recorded(source, tmp_path):
    root = tmp_path / "cache"
    directory = _ensure(source, root)
    path = directory / acquire.MANIFEST_NAME
    manifest = json.loads(path.read_text())
    recorded = manifest.pop("sha256")
    path.write_text(json.dumps(manifest))
    acquire._VERIFIED.clear()
    _ensure(source, root)
    assert json.loads(path.read_text())["sha256"] == recorded
