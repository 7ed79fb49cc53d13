"""Weight-quantised draft models: round-to-nearest copies of a target.

No small model shares a tokenizer with the real targets that can be had offline, so drafts are
made from the target itself: every ``nn.Linear`` weight (except the output head ``lm_head``) is
rounded to ``bits`` bits per group of ``group_size`` consecutive input columns, and stored
de-quantised in float32. Fewer bits give a draft that agrees less with the target; several bit
widths give heterogeneous devices.

Scheme: **asymmetric** (min/max) per group, as in GGUF's Q4_1: for a group ``w`` with
``lo = min(w)``, ``hi = max(w)``, ``scale = (hi - lo) / (2**bits - 1)``::

    w_hat = lo + scale * clamp(round((w - lo) / scale), 0, 2**bits - 1)

Asymmetric rounding uses all ``2**bits`` levels whatever the group's offset, which matters at
2-3 bits; pass ``symmetric=True`` for the ``scale = max|w| / (2**(bits-1) - 1)`` variant
(levels ``-qmax..qmax``). A group whose values are all equal is kept exactly. A last group
narrower than ``group_size`` (``in_features`` not a multiple) is quantised on its own.
Rounding is ``torch.round`` (half to even) on CPU float32 arithmetic: the result is
deterministic.

Draft names: ``q<bits>g<group_size>``, e.g. ``q4g64`` (see `parse_draft_name`).
"""

from __future__ import annotations

import copy
import re

import torch  # noqa: TID253  (the models' own module)
from torch import nn  # noqa: TID253

from multispin.errors import ConfigError

MIN_BITS, MAX_BITS = 2, 8
MIN_GROUP = 8

_DRAFT_RE = re.compile(r"^q(\d+)g(\d+)$")


def parse_draft_name(name: str) -> tuple[int, int]:
    """``"q4g64"`` -> ``(4, 64)``. Bits in 2..8, group size a power of two >= 8.

    Raises a one-line ``ConfigError`` otherwise.
    """
    m = _DRAFT_RE.match(str(name).strip().lower())
    hint = (
        f"expected q<bits>g<group> with bits in {MIN_BITS}..{MAX_BITS} and group a power of two "
        f">= {MIN_GROUP}, e.g. q4g64"
    )
    if not m:
        raise ConfigError(f"draft: {name!r} is not a draft name; {hint}")
    bits, group = int(m.group(1)), int(m.group(2))
    if not MIN_BITS <= bits <= MAX_BITS:
        raise ConfigError(f"draft: {name!r} has {bits} bits; {hint}")
    if group < MIN_GROUP or group & (group - 1):
        raise ConfigError(f"draft: {name!r} has group size {group}; {hint}")
    return bits, group


def draft_name(bits: int, group_size: int) -> str:
    """Inverse of `parse_draft_name` (validated)."""
    name = f"q{int(bits)}g{int(group_size)}"
    parse_draft_name(name)
    return name


def quantize_weight(weight: torch.Tensor, bits: int, group_size: int, *, symmetric: bool = False) -> torch.Tensor:
    """Round-to-nearest, per group of ``group_size`` input columns; returns float32 (de-quantised).

    ``weight`` is ``(out_features, in_features)``; groups run along the last axis.
    """
    if weight.dim() != 2:
        raise ValueError(f"expected a 2-D weight, got shape {tuple(weight.shape)}")
    _check_bits_group(bits, group_size)
    w = weight.detach().to(torch.float32)
    rows, cols = w.shape
    full = (cols // group_size) * group_size
    out = torch.empty_like(w)
    if full:
        g = w[:, :full].reshape(rows, full // group_size, group_size)
        out[:, :full] = _round_groups(g, bits, symmetric).reshape(rows, full)
    if full < cols:  # a narrower last group
        g = w[:, full:].reshape(rows, 1, cols - full)
        out[:, full:] = _round_groups(g, bits, symmetric).reshape(rows, cols - full)
    return out


def _round_groups(g: torch.Tensor, bits: int, symmetric: bool) -> torch.Tensor:
    """``g``: (rows, groups, width) float32 -> de-quantised values, same shape (a new tensor)."""
    if symmetric:
        qmax = 2 ** (bits - 1) - 1
        scale = g.abs().amax(dim=-1, keepdim=True) / qmax
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # all-zero group stays 0
        return (g / scale).round_().clamp_(-qmax, qmax).mul_(scale)
    qmax = 2**bits - 1
    lo = g.amin(dim=-1, keepdim=True)
    scale = (g.amax(dim=-1, keepdim=True) - lo) / qmax
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # constant group: q = 0 -> lo
    return (g - lo).div_(scale).round_().clamp_(0, qmax).mul_(scale).add_(lo)


def _check_bits_group(bits: int, group_size: int) -> None:
    if not MIN_BITS <= int(bits) <= MAX_BITS:
        raise ConfigError(f"bits: {bits} is out of range {MIN_BITS}..{MAX_BITS}")
    if int(group_size) < MIN_GROUP or int(group_size) & (int(group_size) - 1):
        raise ConfigError(f"group_size: {group_size} must be a power of two >= {MIN_GROUP}")


def _skipped_weights(model: nn.Module) -> set[int]:
    """ids of weights that are never quantised: the output head and any tied embedding."""
    skip: set[int] = set()
    for getter in ("get_output_embeddings", "get_input_embeddings"):
        fn = getattr(model, getter, None)
        if callable(fn):
            try:
                mod = fn()
            except (NotImplementedError, AttributeError):
                mod = None
            if mod is not None and getattr(mod, "weight", None) is not None:
                skip.add(id(mod.weight))
    return skip


@torch.no_grad()
def quantize_rtn(model: nn.Module, bits: int, group_size: int, *, symmetric: bool = False) -> nn.Module:
    """A deep copy of ``model`` with every ``nn.Linear`` weight round-to-nearest quantised.

    Skipped: modules named ``lm_head`` (any depth) and any linear whose weight is the model's
    output head or input embedding (tied embeddings stay exact). Biases are kept. Quantised
    weights are computed in float32 and stored de-quantised in the weight's own dtype (float32
    for every model the registry loads). ``model`` itself is not modified. The copy is in
    eval mode with gradients off.
    """
    _check_bits_group(bits, group_size)
    draft = copy.deepcopy(model)
    skip = _skipped_weights(draft)
    threads = torch.get_num_threads()
    # Many small element-wise passes: one thread is as fast on an idle CPU and several times
    # faster on a busy one (thread barriers stall when other processes hold the cores).
    torch.set_num_threads(1)
    try:
        for name, module in draft.named_modules():
            if not isinstance(module, nn.Linear):
                continue
            if name.split(".")[-1] == "lm_head" or id(module.weight) in skip:
                continue
            q = quantize_weight(module.weight, bits, group_size, symmetric=symmetric)
            module.weight.copy_(q)  # in place: keeps device and dtype (float32 for our models)
    finally:
        torch.set_num_threads(threads)
    draft.eval()
    for p in draft.parameters():
        p.requires_grad_(False)
    return draft


def quantize_named(model: nn.Module, name: str) -> nn.Module:
    """``quantize_rtn`` from a draft name such as ``"q4g64"``."""
    bits, group = parse_draft_name(name)
    return quantize_rtn(model, bits, group)
