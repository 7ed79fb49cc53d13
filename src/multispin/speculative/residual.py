"""The correction distribution norm(max(0, p - q)) and the one sampler both modes call.

In UL mode the server calls `sample_residual(p, q_hat, u)` with the decoded draft row; in DL
mode the device calls it with the decoded target row. Same inputs and u give the same token.
"""

from __future__ import annotations

import numpy as np

from multispin.speculative.sampling import sample_categorical

# Below this residual mass, p and q agree to rounding: a rejection then has probability ~0 and
# the residual is numerical noise, so the correction is drawn from p (the law it converges to).
_RESIDUAL_FLOOR = 1e-9


def residual_distribution(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """norm(max(0, p - q)) along the last axis (float64)."""
    p64 = np.asarray(p, dtype=np.float64)
    diff = np.maximum(p64 - np.asarray(q, dtype=np.float64), 0.0)
    mass = diff.sum(axis=-1, keepdims=True)
    degenerate = mass <= _RESIDUAL_FLOOR
    safe = np.where(degenerate, 1.0, mass)
    return np.where(degenerate, p64 / p64.sum(axis=-1, keepdims=True), diff / safe)


def sample_residual(p: np.ndarray, q: np.ndarray, u: float) -> int:
    """Correction token after a rejection, from the full target row p and full draft row q."""
    return int(sample_categorical(residual_distribution(p, q), u))
