"""What the exactness tests share: the target's law by enumeration, and the chi-square check of
emitted tokens against it."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
from scipy import stats

from multispin.models.synthetic import MarkovTable
from multispin.speculative.warp import SamplingParams, warp


def exact_marginals(
    table: MarkovTable, prompt: Sequence[int], n_positions: int, sampling: SamplingParams
) -> np.ndarray:
    """Law of emitted tokens 1..n_positions under the target `table` alone, by enumeration:
    (n_positions, V)."""
    vocab = table.vocab_size
    marg = np.zeros((n_positions, vocab))
    for seq in itertools.product(range(vocab), repeat=n_positions):
        prob, prefix = 1.0, list(prompt)
        for tok in seq:
            prob *= float(warp(table.next_logits(prefix), sampling)[tok])
            prefix.append(tok)
        for i, tok in enumerate(seq):
            marg[i, tok] += prob
    return marg


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
