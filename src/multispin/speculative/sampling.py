"""Inverse-CDF sampling from explicit uniforms: the same (probs, u) always gives the same token,
on the server and on a device alike."""

from __future__ import annotations

import numpy as np


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
