"""The coupled rule's pieces: the noise stream against Philox's specification, Gumbel-max drafting
against q's law, and `verify_coupled` against a one-device-at-a-time reference (greedy included)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from multispin.errors import ProtocolError
from multispin.speculative.coupled import (
    NoiseStream,
    coupled_argmax,
    coupled_draft_token,
    gumbel_argmax,
    philox_key,
    session_key,
    tokens_only,
    verify_coupled,
)
from multispin.speculative.target_rows import ArrayRows

M64 = (1 << 64) - 1


def philox4x64_10(counter: tuple[int, int, int, int], key: tuple[int, int]) -> list[int]:
    """Philox4x64-10 by its specification (Salmon et al. 2011), in plain Python integers."""
    m0, m1 = 0xD2E7470EE14C6C93, 0xCA5A826395121157
    w0, w1 = 0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(10):
        p0, p1 = m0 * c0, m1 * c2
        c0, c1, c2, c3 = (p1 >> 64) ^ c1 ^ k0, p1 & M64, (p0 >> 64) ^ c3 ^ k1, p0 & M64
        k0, k1 = (k0 + w0) & M64, (k1 + w1) & M64
    return [c0, c1, c2, c3]


def test_raw_words_are_philox_by_its_specification():
    noise = NoiseStream(session_key(7, 3))
    k0, k1 = (int(x) for x in philox_key(noise.key))
    for position in (0, 1, 1234, 2**40):
        words = noise.raw(position, 10).tolist()
        spec = [w for block in (1, 2, 3) for w in philox4x64_10((block, position, 0, 0), (k0, k1))]
        assert words == spec[:10]


def test_positions_are_independent_of_order_and_of_each_other():
    a, b = NoiseStream(session_key(1, 0)), NoiseStream(session_key(1, 0))
    g5 = a.gumbel(5, 64)
    for i in (9, 2, 5):
        b.gumbel(i, 64)
    np.testing.assert_array_equal(b.gumbel(5, 64), g5)  # nothing is consumed: keyed by position only
    assert not np.array_equal(a.gumbel(6, 64), g5)
    assert not np.array_equal(NoiseStream(session_key(1, 1)).gumbel(5, 64), g5)
    assert not np.array_equal(NoiseStream(session_key(2, 0)).gumbel(5, 64), g5)
    # a prefix of a longer row is the shorter row (the vocabulary only sets how many words)
    np.testing.assert_array_equal(a.gumbel(5, 16), g5[:16])


def test_uniform_conversion_stays_inside_the_open_interval():
    extremes = np.array([0, M64], dtype=np.uint64)
    u = ((extremes >> np.uint64(12)).astype(np.float64) + 0.5) * 2.0**-52
    assert 0.0 < u[0] and u[1] < 1.0
    assert np.all(np.isfinite(-np.log(-np.log(u))))


def test_gumbel_values_follow_the_standard_gumbel_law():
    g = np.concatenate([NoiseStream(b"law").gumbel(i, 1000) for i in range(20)])
    assert stats.kstest(g, "gumbel_r").pvalue > 1e-4
    # negative control: the same KS test rejects a shifted law
    assert stats.kstest(g + 0.1, "gumbel_r").pvalue < 1e-6


def test_argmax_on_the_support_equals_the_full_gumbel_argmax():
    rng = np.random.default_rng(3)
    noise = NoiseStream(b"support")
    for i in range(300):
        p = rng.dirichlet(np.ones(50) * 0.3)
        p[rng.random(50) < 0.6] = 0.0  # top-k-like rows: most ids carry no mass
        if not p.any():
            p[7] = 1.0
        g = noise.gumbel(i, 50)
        assert coupled_argmax(p, noise, i) == gumbel_argmax(p, g)
        ids = np.flatnonzero(p)
        np.testing.assert_array_equal(noise.gumbel_at(i, ids), g[ids])


def _q(vocab: int = 6) -> np.ndarray:
    return np.array([0.4, 0.25, 0.15, 0.1, 0.1, 0.0])[:vocab]


def test_coupled_draft_samples_q():
    q, noise, n = _q(), NoiseStream(b"draft-law"), 6000
    drawn = np.array([coupled_draft_token(q, noise, i) for i in range(n)])
    assert not np.any(drawn == 5)  # zero mass is never drafted
    counts = np.bincount(drawn, minlength=6)[:5]
    assert stats.chisquare(counts, q[:5] * n).pvalue > 1e-4
    # negative control: noise reused across positions drafts one token forever
    stuck = np.array([coupled_draft_token(q, noise, 0) for _ in range(n)])
    assert stats.chisquare(np.bincount(stuck, minlength=6)[:5], q[:5] * n).pvalue < 1e-6


def _reference(tokens, rows, noises, starts):
    """One device at a time, one position at a time."""
    out = []
    row = 0
    for toks, noise, start in zip(tokens, noises, starts):
        n_acc, committed = 0, None
        for j in range(len(toks) + 1):
            x = int(gumbel_argmax(rows[row + j], noise.gumbel(start + j, rows.shape[1])))
            if j < len(toks) and toks[j] == x:
                n_acc += 1
                continue
            committed = x
            break
        out.append((n_acc, committed))
        row += len(toks) + 1
    return out


@pytest.mark.parametrize("greedy", [False, True])
def test_verify_coupled_matches_the_reference_on_a_ragged_batch(greedy):
    rng = np.random.default_rng(0)
    vocab, lens = 6, [3, 0, 5, 1]
    rows = rng.dirichlet(np.ones(vocab) * 0.5, size=sum(lens) + len(lens))
    if greedy:  # one-hot rows: x* is the row's arg-max whatever the noise
        rows = np.eye(vocab)[rows.argmax(axis=1)]
    noises = [NoiseStream(session_key(5, k)) for k in range(len(lens))]
    starts = [10, 3, 7, 0]
    # drafts that match their x* for a while, then may not
    tokens = []
    row = 0
    for k, n in enumerate(lens):
        xs = [int(gumbel_argmax(rows[row + j], noises[k].gumbel(starts[k] + j, vocab))) for j in range(n)]
        tokens.append([x if j < 2 else (x + k) % vocab for j, x in enumerate(xs)])
        row += n + 1
    res = verify_coupled(tokens_only(tokens), ArrayRows(rows), noises, starts)
    ref = _reference(tokens, rows, noises, starts)
    assert res.num_accepted.tolist() == [r[0] for r in ref]
    assert res.committed_token.tolist() == [r[1] for r in ref]
    assert res.mismatched.tolist() == [r[0] < n for r, n in zip(ref, lens)]
    if greedy:
        row = 0
        for k, n in enumerate(lens):
            # degenerate case: accepted while the draft is the arg-max, x* the arg-max
            assert res.committed_token[k] == rows[row + res.num_accepted[k]].argmax()
            row += n + 1


def test_verify_coupled_refuses_a_wrong_layout():
    with pytest.raises(ProtocolError, match="Σγ"):
        verify_coupled(tokens_only([[1, 2]]), ArrayRows(np.full((2, 4), 0.25)), [NoiseStream(b"k")], [0])
