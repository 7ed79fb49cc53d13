"""The tokens a device is expected to keep from a round, given its draft: the acceptance test's
own expectation, with the acceptance uniforms averaged out.

The server accepts draft token x_i while u_i ≤ β_i = min(1, p_i(x_i) / q̂_i(x_i)), with u_i
uniform and drawn for nothing else. Given the draft (tokens, q̂, and the target rows the server
has already computed for every drafted position) the accepted length L therefore has
P(L ≥ k) = β_1 ⋯ β_k, and the tokens kept, κ(L) (the accepted prefix and the bonus or correction
token, cut at the first EOS and the budget, as the engine commits them), have the exact
conditional mean E[κ(L) | draft] = Σ_l P(L = l) κ(l).

Replacing the realised κ(L) by that mean is a control variate whose mean is known exactly: the
difference κ(L) − E[κ(L) | draft] has mean 0 given everything before the acceptance test (a
martingale difference), so sums over rounds keep their expectation, and the variance of the
acceptance uniforms (most of a round's token count, `experiments.paired`) goes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def accept_probabilities(p_at_x: np.ndarray, q_at_x: np.ndarray) -> np.ndarray:
    """β_i = min(1, p_i(x_i) / q̂_i(x_i)): the chance the test u_i q̂_i(x_i) ≤ p_i(x_i) passes."""
    p, q = np.asarray(p_at_x, dtype=np.float64), np.asarray(q_at_x, dtype=np.float64)
    return np.minimum(1.0, p / q)


def draft_survival(beta: np.ndarray) -> float:
    """P(L = γ | draft) = β_1 ⋯ β_γ: every drafted token passes (1 at γ = 0), so the device is
    rejected, and moves a correction, with 1 minus it."""
    return float(np.prod(np.asarray(beta, dtype=np.float64)))


def kept_length(accepted: int, draft_tokens: Sequence[int], eos_ids: Sequence[int], budget: int) -> int:
    """κ(l): how many tokens the engine commits when `accepted` draft tokens pass (the accepted
    prefix plus the bonus or correction token, cut after the first EOS and at the budget)."""
    n = accepted + 1
    for i, tok in enumerate(draft_tokens[:accepted]):
        if tok in eos_ids:
            n = i + 1
            break
    return max(0, min(n, budget))


def expected_kept(beta: np.ndarray, draft_tokens: Sequence[int], eos_ids: Sequence[int], budget: int) -> float:
    """E[κ(L) | draft] with P(L ≥ k) = β_1 ⋯ β_k (module docstring); κ as `kept_length`."""
    beta = np.asarray(beta, dtype=np.float64)
    gamma = beta.size
    at_least = np.concatenate([[1.0], np.cumprod(beta), [0.0]])  # P(L ≥ l), l = 0 .. γ + 1
    p_l = at_least[:-1] - at_least[1:]  # P(L = l), l = 0 .. γ
    kept = np.array([kept_length(n, draft_tokens, eos_ids, budget) for n in range(gamma + 1)], dtype=np.float64)
    return float(p_l @ kept)
