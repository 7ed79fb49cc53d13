"""The correction distribution norm(max(0, p - q)) and the one sampler both modes call.

In UL mode the server calls `sample_residual(p, q_hat, u)` with the decoded draft row; in DL
mode the device calls it with the decoded target row. Same inputs and u give the same token.

The correction runs on torch, batched over rows (`residual_rows`, `sample_residuals`), on the
device of the target row p: the server's p_j stays on the target's GPU, and only the decoded q̂_j
(a codec's numpy row) moves there. `residual_distribution` is the numpy reference it equals.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from multispin.speculative.sampling import sample_rows

if TYPE_CHECKING:
    import torch

# Below this residual mass, p and q agree to rounding: a rejection then has probability ~0 and
# the residual is numerical noise, so the correction is drawn from p (the law it converges to).
_RESIDUAL_FLOOR = 1e-9


def residual_distribution(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """norm(max(0, p - q)) along the last axis (float64): the numpy reference of `residual_rows`."""
    p64 = np.asarray(p, dtype=np.float64)
    diff = np.maximum(p64 - np.asarray(q, dtype=np.float64), 0.0)
    mass = diff.sum(axis=-1, keepdims=True)
    degenerate = mass <= _RESIDUAL_FLOOR
    safe = np.where(degenerate, 1.0, mass)
    return np.where(degenerate, p64 / p64.sum(axis=-1, keepdims=True), diff / safe)


def residual_rows(p, q) -> torch.Tensor:
    """norm(max(0, p - q)) along the last axis, float64, on p's device (p, q: tensors or arrays
    of one shape (..., V); q is moved to p's device)."""
    import torch

    p64 = torch.as_tensor(p).to(torch.float64)
    diff = (p64 - torch.as_tensor(q).to(device=p64.device, dtype=torch.float64)).clamp_min_(0.0)
    mass = diff.sum(dim=-1, keepdim=True)
    degenerate = (mass <= _RESIDUAL_FLOOR)[..., 0]
    out = diff.div_(torch.where(degenerate[..., None], torch.ones_like(mass), mass))
    if bool(degenerate.any()):  # rare: rows other than those are not touched again
        out[degenerate] = p64[degenerate] / p64[degenerate].sum(dim=-1, keepdim=True)
    return out


def sample_residuals(p, q, u) -> torch.Tensor:
    """Correction tokens (int64, on p's device) for rows p, q of shape (N, V), one uniform each."""
    return sample_rows(residual_rows(p, q), u)


def sample_residual(p, q, u: float) -> int:
    """Correction token after a rejection, from the full target row p and full draft row q
    (each (V,), a tensor on any device or an array)."""
    import torch

    p = torch.as_tensor(p)
    return int(sample_residuals(p.reshape(1, -1), torch.as_tensor(q).reshape(1, -1), [u])[0])
