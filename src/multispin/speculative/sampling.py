"""Inverse-CDF sampling from explicit uniforms: the same (probs, u) always gives the same token,
on the server and on a device alike.

Two forms of one rule: `sample_categorical` over numpy rows (the reference, and a device's
drafting from its decoded q̂ rows) and `sample_rows` over torch rows on their own device (the
server's bonus and correction tokens, batched, next to the target's logits). On the CPU both
accumulate the same float64 values in the same order, so they pick the same token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def sample_categorical(probs: np.ndarray, u: np.ndarray | float) -> np.ndarray | int:
    """Token index per row of `probs` (shape (V,) or (N, V)) for uniforms u in [0, 1).

    Picks the first index whose cumulative mass exceeds u * total, so a zero-probability token is
    never returned. Accumulates in float64 and scales u by the row's own total, so rows that
    sum to 1 only approximately (a float32 softmax over 151k ids is off by up to ~4e-5) behave.
    """
    p = np.asarray(probs, dtype=np.float64)
    single = p.ndim == 1
    p2 = p[None, :] if single else p
    uu = np.atleast_1d(np.asarray(u, dtype=np.float64))
    if uu.shape[0] != p2.shape[0]:
        raise ValueError(f"u: need one uniform per row ({p2.shape[0]}), got {uu.shape[0]}")
    cdf = np.cumsum(p2, axis=-1)
    total = cdf[:, -1]
    if np.any(total <= 0) or not np.all(np.isfinite(total)):
        raise ValueError("probs: every row needs positive, finite total mass")
    target = uu * total
    idx = (cdf <= target[:, None]).sum(axis=-1)
    # Rounding can push the target past the last cumulative value; take the last positive entry.
    last_positive = p2.shape[1] - 1 - np.argmax(p2[:, ::-1] > 0, axis=-1)
    idx = np.minimum(idx, last_positive)
    return int(idx[0]) if single else idx


def sample_rows(probs: torch.Tensor, u) -> torch.Tensor:
    """`sample_categorical` for a tensor of rows (N, V) on any device: int64 token ids (N,) on
    that device, one uniform per row (`u`: a sequence, array or tensor of N floats)."""
    import torch

    if probs.ndim != 2:
        raise ValueError(f"probs: need rows of shape (N, V) (got {tuple(probs.shape)})")
    p = probs.to(torch.float64)
    uu = torch.as_tensor(
        np.asarray(u, dtype=np.float64) if not torch.is_tensor(u) else u, dtype=torch.float64, device=p.device
    ).reshape(-1)
    if uu.shape[0] != p.shape[0]:
        raise ValueError(f"u: need one uniform per row ({p.shape[0]}), got {uu.shape[0]}")
    cdf = torch.cumsum(p, dim=-1)
    total = cdf[:, -1]
    if not bool(torch.all((total > 0) & torch.isfinite(total))):
        raise ValueError("probs: every row needs positive, finite total mass")
    target = uu * total
    # cdf never decreases (non-negative terms), so the count of entries <= u * total is a search
    idx = torch.searchsorted(cdf, target[:, None], right=True)[:, 0]
    # Rounding can push the target past the last cumulative value; take the last positive entry.
    # Below the total the count already stops there (cdf is the total from that entry on), so
    # only such rows (u within an ulp of 1) pay for the search.
    past = target >= total
    if bool(past.any()):
        ids = torch.arange(p.shape[1], device=p.device)
        last_positive = torch.where(p[past] > 0, ids, -1).amax(dim=-1)
        idx[past] = torch.minimum(idx[past], last_positive)
    return idx
