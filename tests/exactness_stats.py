"""The chi-square check the exactness tests share: emitted tokens against the target's law."""

from __future__ import annotations

import numpy as np
from scipy import stats


def min_p_value(tokens: np.ndarray, marginals: np.ndarray) -> float:
    """Smallest chi-square p-value over positions: tokens (devices, positions) against the exact
    marginal law of each position, marginals (positions, V); cells expecting < 5 merged."""
    vocab = marginals.shape[1]
    worst = 1.0
    for pos in range(marginals.shape[0]):
        observed = np.bincount(tokens[:, pos], minlength=vocab).astype(float)
        expected = marginals[pos] / marginals[pos].sum() * len(tokens)
        if np.any((expected == 0) & (observed > 0)):
            return 0.0
        big = expected >= 5
        obs = np.append(observed[big], observed[~big].sum())
        exp = np.append(expected[big], expected[~big].sum())
        keep = exp > 0
        worst = min(worst, stats.chisquare(obs[keep], exp[keep]).pvalue)
    return worst
