"""Acceptance of coupled verification (docs/system-model.md, the coupled model), exact and bounded.

Coupled verification draws the draft token y = argmax_x (log q(x) + G(x)) and the target token
x* = argmax_x (log p(x) + G(x)) with the *same* Gumbel vector G, and accepts when y = x*. For
one position the match probability is (Daliri, Musco, Suresh, arXiv 2408.07978)

    P(y = x*) = Σ_x 1 / Σ_y max(p(y)/p(x), q(y)/q(x)),

the sum over the common support (a token with p(x) = 0 or q(x) = 0 is never both argmaxes, so it
contributes 0). Standard speculative sampling accepts with 1 − TV, TV = 1 − Σ_x min(p, q), and
the coupled rate is at least (1 − TV)/(1 + TV).

Evaluation in O(V log V) per row instead of O(V²): with r(y) = p(y)/q(y) (∞ where q(y) = 0),
max(p(y)/p(x), q(y)/q(x)) is p(y)/p(x) when r(y) ≥ r(x) and q(y)/q(x) otherwise (equal at a tie),
so after sorting by r the inner sum is a suffix sum of p over p(x) plus a prefix sum of q over q(x).
Pure numpy, no randomness.
"""

from __future__ import annotations

import numpy as np

from multispin.errors import ConfigError


def _rows(p, q) -> tuple[np.ndarray, np.ndarray]:
    pa = np.atleast_2d(np.asarray(p, dtype=np.float64))
    qa = np.atleast_2d(np.asarray(q, dtype=np.float64))
    if pa.shape != qa.shape or pa.ndim != 2:
        raise ConfigError(f"p, q: need the same shape (rows, V) (got {pa.shape} and {qa.shape})")
    if np.any(pa < 0) or np.any(qa < 0) or not (np.all(np.isfinite(pa)) and np.all(np.isfinite(qa))):
        raise ConfigError("p, q: must be finite probabilities ≥ 0")
    return pa, qa


def coupled_acceptance(p, q) -> np.ndarray:
    """P(Gumbel-coupled draft token = target token) per row of ``p``, ``q`` (rows, V) or (V,).

    Rows are normalised first (so warped, unnormalised rows are accepted); returns (rows,)."""
    pa, qa = _rows(p, q)
    pa = pa / pa.sum(axis=1, keepdims=True)
    qa = qa / qa.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(qa > 0, pa / qa, np.inf)
    ratio = np.where((pa == 0) & (qa == 0), -np.inf, ratio)  # off both supports: first, weight 0
    order = np.argsort(ratio, axis=1, kind="stable")
    ps = np.take_along_axis(pa, order, axis=1)
    qs = np.take_along_axis(qa, order, axis=1)
    suffix_p = np.cumsum(ps[:, ::-1], axis=1)[:, ::-1]  # Σ_{j ≥ i} p_j in ratio order
    prefix_q = np.cumsum(qs, axis=1) - qs  # Σ_{j < i} q_j
    both = (ps > 0) & (qs > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        denom = np.where(both, suffix_p / np.where(both, ps, 1.0) + prefix_q / np.where(both, qs, 1.0), np.inf)
    return np.sum(np.where(both, 1.0 / denom, 0.0), axis=1)


def total_variation(p, q) -> np.ndarray:
    """TV(p, q) = 1 − Σ min(p, q) per row (rows normalised first)."""
    pa, qa = _rows(p, q)
    pa = pa / pa.sum(axis=1, keepdims=True)
    qa = qa / qa.sum(axis=1, keepdims=True)
    return 1.0 - np.minimum(pa, qa).sum(axis=1)


def standard_acceptance(p, q) -> np.ndarray:
    """Speculative sampling's acceptance per row: 1 − TV(p, q)."""
    return 1.0 - total_variation(p, q)


def coupled_lower_bound(p, q) -> np.ndarray:
    """(1 − TV)/(1 + TV) per row: the coupled acceptance is never below it."""
    tv = total_variation(p, q)
    return (1.0 - tv) / (1.0 + tv)
