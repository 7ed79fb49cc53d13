"""`TargetRows` (the server's lazily warped target rows, torch) against the numpy reference:
`warp` on every row, then `verify` reading the warped array.

p_i(x_i) must agree to 1e-6, whole rows bit for bit, and `verify` must reach the same verdicts
(accepted counts, bonus tokens, rejection rows) for shared uniforms. A negative control shows
the comparison catches a wrong normaliser.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from multispin.speculative.sampling import sample_categorical
from multispin.speculative.target_rows import ArrayRows, TargetRows
from multispin.speculative.verify import RaggedDrafts, verify
from multispin.speculative.warp import SamplingParams, warp

POLICIES = {
    "t1": SamplingParams(),
    "t0.7": SamplingParams(temperature=0.7),
    "top-k": SamplingParams(top_k=50),
    "top-k-t1.3": SamplingParams(temperature=1.3, top_k=200),
    "top-p": SamplingParams(temperature=0.8, top_p=0.9),
    "greedy": SamplingParams(temperature=0.0),
}
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def random_round(seed: int, k: int = 12, gamma_max: int = 8, vocab: int = 4000, sharp: float = 4.0):
    """Target logits for a ragged round and drafts from a noisy copy of them (mixed verdicts)."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, gamma_max + 1, k)
    logits = (rng.standard_normal((int(lens.sum()) + k, vocab)) * sharp).astype(np.float32)
    return rng, lens, logits


def drafts_for(rng, lens, logits, params: SamplingParams) -> RaggedDrafts:
    q_rows = warp(logits + rng.standard_normal(logits.shape).astype(np.float32), params)
    starts = np.concatenate([[0], np.cumsum(lens)]) + np.arange(len(lens) + 1)
    tokens, q_at = [], []
    for j, g in enumerate(lens):
        rows = q_rows[starts[j] : starts[j] + g]
        toks = [int(sample_categorical(r, u)) for r, u in zip(rows, rng.random(g))]
        tokens.append(toks)
        q_at.append([float(r[t]) for r, t in zip(rows, toks)])
    return RaggedDrafts.from_lists(tokens, q_at)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(POLICIES))
def test_prob_at_and_rows_equal_the_reference(name, device):
    params = POLICIES[name]
    rng, lens, logits = random_round(1)
    reference = warp(logits, params)
    lazy = TargetRows(torch.from_numpy(logits).to(device), params)
    rows = rng.integers(0, len(logits), 500)
    # tokens: half at random, half at each row's most likely ids (where the mass is)
    tokens = np.where(
        rng.random(500) < 0.5,
        rng.integers(0, logits.shape[1], 500),
        np.argsort(-logits[rows], axis=1)[np.arange(500), rng.integers(0, 5, 500)],
    )
    np.testing.assert_allclose(lazy.prob_at(rows, tokens), reference[rows, tokens], rtol=0, atol=1e-6)
    assert (lazy.prob_at(rows, tokens) > 0).tolist() == (reference[rows, tokens] > 0).tolist()
    some = rng.integers(0, len(logits), 7)
    if device == "cpu":  # on the CPU the whole rows are warp's own, bit for bit
        assert np.array_equal(lazy.warped(some), reference[some])
    else:
        np.testing.assert_allclose(lazy.warped(some), reference[some], rtol=0, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(POLICIES))
@pytest.mark.parametrize("seed", [2, 3, 4])
def test_verify_reaches_the_reference_verdicts(name, seed, device):
    params = POLICIES[name]
    rng, lens, logits = random_round(seed)
    drafts = drafts_for(rng, lens, logits, params)
    acc_u, bonus_u = rng.random(int(lens.sum())), rng.random(len(lens))
    ref = verify(drafts, ArrayRows(warp(logits, params)), acc_u, bonus_u)
    got = verify(drafts, TargetRows(torch.from_numpy(logits).to(device), params), acc_u, bonus_u)
    for field in ("num_accepted", "rejected", "bonus_token", "rejection_row"):
        assert np.array_equal(getattr(got, field), getattr(ref, field)), field
    # the round is informative: some devices rejected, some accepted everything
    assert 0 < ref.rejected.sum() < len(lens) or name == "greedy"


def test_control_wrong_normaliser_is_caught():
    """Negative control: normalising over the whole row under a top-k policy (the cut forgotten)."""
    params = POLICIES["top-k"]
    rng, _, logits = random_round(1)
    rows = np.arange(len(logits))
    tokens = logits.argmax(axis=1)
    forgot_cut = TargetRows(torch.from_numpy(logits), SamplingParams(temperature=params.temperature))
    diff = np.abs(forgot_cut.prob_at(rows, tokens) - warp(logits, params)[rows, tokens]).max()
    assert diff > 1e-6
