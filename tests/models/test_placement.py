"""`--device auto|cpu|cuda`. CPU is the default and what CI runs; the CUDA
path is checked here with stand-in modules (where it moves what, in which dtype); running it on a
GPU needs a GPU machine (benchmarks/bench_engine.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from multispin.errors import ConfigError
from multispin.models import placement
from multispin.models.base import LoadedPair


@dataclass
class _Module:
    moves: list = field(default_factory=list)

    def to(self, **kwargs):
        self.moves.append(kwargs)
        return self


def _pair():
    return LoadedPair(
        name="fake", tokenizer=None, target=_Module(), drafts={"a": _Module(), "b": _Module()}, vocab_size=8
    )


def test_cpu_is_the_default_and_leaves_the_pair_as_loaded():
    pair = _pair()
    assert placement.place_pair(pair) is pair
    assert placement.place_pair(pair, "cpu") is pair and pair.target.moves == []


def test_auto_falls_back_to_cpu_and_cuda_without_a_gpu_is_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert placement.resolve_device("auto") == "cpu"
    with pytest.raises(ConfigError, match=r"^device: cuda requested but torch sees no CUDA GPU"):
        placement.resolve_device("cuda")
    with pytest.raises(ConfigError, match="device: unknown value 'tpu' .allowed: auto, cpu, cuda"):
        placement.resolve_device("tpu")


def test_on_cuda_the_target_goes_in_bfloat16_and_drafts_follow_unless_told(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    pair = _pair()
    placed = placement.place_pair(pair, "auto")
    assert pair.target.moves == [{"device": "cuda", "dtype": torch.bfloat16}]
    assert all(m.moves == [{"device": "cuda"}] for m in pair.drafts.values())
    assert placed.notes == {"device": "cuda", "target_dtype": "bfloat16"}
    server_side = placement.place_pair(_pair(), "cuda", drafts=False)
    assert all(m.moves == [] for m in server_side.drafts.values())  # device processes fork: CPU


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a GPU: --device cuda is valid")
def test_cli_device_cuda_without_a_gpu_is_a_one_line_error(multispin):
    res = multispin("generate", "--pair", "tiny", "--devices", "1", "--device", "cuda")
    assert res.code == 2 and res.err.startswith("error: device: cuda requested") and res.err.count("\n") == 1
