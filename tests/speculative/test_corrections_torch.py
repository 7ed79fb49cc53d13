"""The server's corrections and bonus draws on torch (`residual_rows`, `sample_residuals`,
`sample_rows`, `warp_tensor`), batched over rows on the rows' device, against the numpy
reference (`residual_distribution`, `sample_categorical`, `warp`).

Distributions must agree to 1e-6 and the tokens must be identical for shared uniforms, on rows
shaped like the engine's (warped target rows against noisy, partly zero draft rows, degenerate
p = q rows included). Negative controls: a residual of the wrong sign fails both comparisons,
an un-normalised one fails the distribution comparison.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from multispin.speculative.residual import residual_distribution, residual_rows, sample_residual, sample_residuals
from multispin.speculative.sampling import sample_categorical, sample_rows
from multispin.speculative.warp import SamplingParams, warp, warp_tensor

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
VOCAB = 20_000
POLICIES = {
    "t1": SamplingParams(),
    "top-k": SamplingParams(temperature=0.8, top_k=300),
    "top-p": SamplingParams(top_p=0.9),
    "greedy": SamplingParams(temperature=0.0),
}


def rows_pair(seed: int, params: SamplingParams, n: int = 24) -> tuple[np.ndarray, np.ndarray]:
    """Warped target rows p and draft rows q (the target's logits plus noise); the last row has
    q = p exactly (no residual mass: the correction falls back to p)."""
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((n, VOCAB)) * 3).astype(np.float32)
    p = warp(logits, params)
    q = warp(logits + rng.standard_normal(logits.shape).astype(np.float32) * 0.5, params)
    q[-1] = p[-1]
    return p, q


def uniforms(seed: int, n: int) -> np.ndarray:
    u = np.random.default_rng(seed).random(n)
    u[:2] = [0.0, 1.0 - 1e-16]  # the ends of [0, 1)
    return u


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(POLICIES))
def test_residual_rows_equal_the_reference(name, device):
    p, q = rows_pair(1, POLICIES[name])
    got = residual_rows(torch.from_numpy(p).to(device), q)  # q moves to p's device
    assert got.device.type == device
    np.testing.assert_allclose(got.cpu().numpy(), residual_distribution(p, q), rtol=0, atol=1e-6)
    assert ((got.cpu().numpy() > 0) == (residual_distribution(p, q) > 0)).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(POLICIES))
@pytest.mark.parametrize("seed", [2, 3])
def test_correction_tokens_equal_the_reference(name, seed, device):
    p, q = rows_pair(seed, POLICIES[name])
    reference = residual_distribution(p, q)
    for draw in range(20):  # 20 uniforms per row, shared by both sides
        u = uniforms(100 * seed + draw, len(p))
        got = sample_residuals(torch.from_numpy(p).to(device), torch.from_numpy(q).to(device), u)
        assert got.device.type == device
        assert got.cpu().tolist() == sample_categorical(reference, u).tolist()
    # the one-row form both roles call (UL at the server, DL on the device)
    assert sample_residual(torch.from_numpy(p[0]).to(device), q[0], 0.37) == int(sample_categorical(reference[0], 0.37))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(POLICIES))
def test_warp_tensor_and_sample_rows_equal_the_reference(name, device):
    """The bonus draw: warped rows sampled on the rows' device."""
    params = POLICIES[name]
    logits = (np.random.default_rng(4).standard_normal((24, VOCAB)) * 3).astype(np.float32)
    rows = warp_tensor(torch.from_numpy(logits).to(device), params)
    assert rows.device.type == device
    reference = warp(logits, params)
    np.testing.assert_allclose(rows.cpu().numpy(), reference, rtol=0, atol=1e-6)
    for draw in range(20):
        u = uniforms(draw, len(logits))
        assert sample_rows(rows, u).cpu().tolist() == sample_categorical(reference, u).tolist()


def test_sample_rows_skips_zero_mass_like_the_reference():
    p = np.array([[0.0, 0.25, 0.0, 0.75, 0.0], [0.5, 0.5, 0.0, 0.0, 0.0]])
    for u in (0.0, 0.2499, 0.25, 0.999999999, 1.0 - 1e-17):
        uu = np.full(2, u)
        assert sample_rows(torch.from_numpy(p), uu).tolist() == sample_categorical(p, uu).tolist()


@pytest.mark.parametrize("bad", [np.zeros((1, 4)), np.array([[0.5, np.nan, 0.1, 0.0]])])
def test_sample_rows_rejects_rows_without_mass(bad):
    with pytest.raises(ValueError, match="probs"):
        sample_rows(torch.from_numpy(bad), [0.5])
    with pytest.raises(ValueError, match="u: need one uniform per row"):
        sample_rows(torch.ones(2, 4), [0.5])


def test_control_wrong_sign_residual_is_caught():
    """Negative control: max(0, q - p) (the sign flipped) differs from the reference by far more
    than 1e-6 and picks other tokens for the same uniforms."""
    p, q = rows_pair(5, POLICIES["t1"])
    u = uniforms(5, len(p))
    wrong = residual_rows(torch.from_numpy(q), p)
    assert np.abs(wrong.numpy() - residual_distribution(p, q)).max() > 1e-6
    picked = sample_rows(wrong, u).tolist()
    reference = sample_categorical(residual_distribution(p, q), u).tolist()
    assert sum(a != b for a, b in zip(picked, reference)) > len(p) // 2


def test_control_unnormalised_residual_is_caught():
    """Negative control: max(0, p - q) without its normalisation fails the 1e-6 comparison (the
    sampler scales u by each row's total, so the tokens alone would not show it)."""
    p, q = rows_pair(6, POLICIES["t1"])
    unnormalised = np.maximum(p.astype(np.float64) - q, 0.0)
    assert np.abs(unnormalised - residual_rows(torch.from_numpy(p), q).numpy()).max() > 1e-6
