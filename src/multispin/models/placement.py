"""Where the models of a pair run: ``cpu`` (the default, what CI tests), ``cuda`` (the target in
bfloat16, so the batched verification pass runs on the GPU at half the memory of float32), or
``auto`` (cuda when torch sees one, else cpu).

The token math (``speculative/``) stays in numpy on the CPU: logits come back as float32 arrays, so
the accept/reject decisions do not depend on where the forward pass ran beyond the model's own
numerics (bfloat16 logits differ from float32 ones; exactness is with respect to the target as
run)."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from multispin.errors import ConfigError
from multispin.models.base import LoadedPair

Placement = Literal["auto", "cpu", "cuda"]


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` or ``cpu``; ``cuda`` without a GPU is a one-line error."""
    if device not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"device: unknown value {device!r} (allowed: auto, cpu, cuda)")
    if device == "cpu":
        return "cpu"
    import torch

    available = torch.cuda.is_available()
    if device == "cuda" and not available:
        raise ConfigError(
            f"device: cuda requested but torch sees no CUDA GPU (torch {torch.__version__}; allowed here: cpu, auto)"
        )
    return "cuda" if available else "cpu"


def place_pair(pair: LoadedPair, device: str = "cpu", drafts: bool = True) -> LoadedPair:
    """The pair with its models on ``device`` (see the module docstring). On the CPU the pair is
    returned as loaded; on CUDA the models are moved (the registry's cached pair moves with
    them: one process uses one placement). ``drafts=False`` leaves the drafts on the CPU: the
    networked server forks device processes, and a CUDA context does not survive a fork."""
    where = resolve_device(device)
    if where == "cpu":
        return pair
    import torch

    target = pair.target.to(device=where, dtype=torch.bfloat16)
    moved = {name: m.to(device=where) for name, m in pair.drafts.items()} if drafts else pair.drafts
    return replace(pair, target=target, drafts=moved, notes={**pair.notes, "device": where, "target_dtype": "bfloat16"})
