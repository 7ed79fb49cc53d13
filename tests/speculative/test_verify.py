import numpy as np
import pytest

from multispin.errors import ConfigError, ProtocolError
from multispin.speculative.residual import residual_distribution, sample_residual
from multispin.speculative.sampling import sample_categorical
from multispin.speculative.stats import AcceptanceStats
from multispin.speculative.verify import Q_SLACK, RaggedDrafts, check_draft, verify


def _rows(*rows):
    return np.array(rows, dtype=np.float32)


def test_sample_categorical_is_inverse_cdf_and_skips_zero_mass():
    p = np.array([0.0, 0.25, 0.0, 0.75])
    assert sample_categorical(p, 0.0) == 1
    assert sample_categorical(p, 0.2499) == 1
    assert sample_categorical(p, 0.25) == 3
    assert sample_categorical(p, 0.999999999) == 3
    assert sample_categorical(np.array([0.5, 0.5, 0.0]), 1.0 - 1e-17) == 1


def test_ragged_batch_with_pinned_uniforms():
    # Device 0: γ=2, both accepted -> bonus from its 3rd row.
    # Device 1: γ=0 -> bonus from its only row.
    # Device 2: γ=3, second token rejected (p(x)=0.1 < u·q = 0.9·0.5).
    drafts = RaggedDrafts.from_lists([[0, 1], [], [1, 2, 0]], [[0.5, 0.5], [], [0.5, 0.5, 0.5]])
    target = _rows(
        [0.6, 0.4, 0.0],
        [0.2, 0.8, 0.0],
        [0.0, 0.0, 1.0],  # device 0: p1, p2, p3
        [0.0, 1.0, 0.0],  # device 1: p1
        [0.1, 0.9, 0.0],
        [0.9, 0.0, 0.1],
        [1.0, 0.0, 0.0],
        [0.0, 0.0, 1.0],  # device 2
    )
    res = verify(drafts, target, np.array([0.1, 0.3, 0.2, 0.9, 0.0]), np.array([0.5, 0.5, 0.5]))
    assert res.num_accepted.tolist() == [2, 0, 1]
    assert res.rejected.tolist() == [False, False, True]
    assert res.bonus_token.tolist() == [2, 1, -1]
    assert res.rejection_position.tolist() == [-1, -1, 1]
    assert res.rejection_row.tolist() == [-1, -1, 5]  # device 2's p_2


def test_acceptance_threshold_is_min_one_p_over_q():
    drafts = RaggedDrafts.from_lists([[0]], [[0.8]])
    target = _rows([0.4, 0.6], [0.5, 0.5])
    # p/q = 0.5: accept iff u <= 0.5
    assert verify(drafts, target, np.array([0.5]), np.array([0.0])).num_accepted[0] == 1
    assert verify(drafts, target, np.array([0.5001]), np.array([0.0])).num_accepted[0] == 0


def test_verify_rejects_bad_input():
    target = _rows([0.5, 0.5], [0.5, 0.5])
    with pytest.raises(ConfigError, match="draft_len"):
        verify(
            RaggedDrafts.from_lists([[0] * 3], [[0.5] * 3]), np.ones((4, 2)) / 2, np.zeros(3), np.zeros(1), gamma_max=2
        )
    with pytest.raises(ProtocolError, match="token id"):
        verify(RaggedDrafts.from_lists([[7]], [[0.5]]), target, np.zeros(1), np.zeros(1))
    with pytest.raises(ProtocolError, match=r"drafts.q: every q̂\(x_i\) must be a finite probability"):
        verify(RaggedDrafts.from_lists([[0]], [[0.0]]), target, np.zeros(1), np.zeros(1))
    with pytest.raises(ProtocolError, match="rows"):
        verify(RaggedDrafts.from_lists([[0]], [[0.5]]), target[:1], np.zeros(1), np.zeros(1))


@pytest.mark.parametrize("case", ["random", "q_zero", "p_equals_q", "disjoint"])
def test_speculative_identity(case):
    """q·min(1, p/q) + (1 − Σ q·min(1, p/q))·residual = p."""
    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.ones(16))
    q = rng.dirichlet(np.ones(16))
    if case == "q_zero":
        q[:5] = 0
        q /= q.sum()
    if case == "p_equals_q":
        q = p.copy()
    if case == "disjoint":
        p[:8], q[8:] = 0, 0
        p, q = p / p.sum(), q / q.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        accept = np.where(q > 0, q * np.minimum(1.0, p / q), 0.0)
    law = accept + (1 - accept.sum()) * residual_distribution(p, q)
    np.testing.assert_allclose(law, p, atol=1e-12)


def test_identity_fails_for_wrong_residuals():
    """Negative control: residual = p, or built from the scalar q(x) only, breaks the identity."""
    rng = np.random.default_rng(2)
    p, q = rng.dirichlet(np.ones(16)), rng.dirichlet(np.ones(16))
    accept = q * np.minimum(1.0, p / q)
    for wrong in (p, residual_distribution(p, np.eye(16)[3] * q[3])):
        law = accept + (1 - accept.sum()) * wrong
        assert np.abs(law - p).max() > 1e-3


def test_residual_sampler_is_deterministic_and_only_hits_residual_support():
    p = np.array([0.5, 0.3, 0.2, 0.0])
    q = np.array([0.6, 0.1, 0.1, 0.2])
    res = residual_distribution(p, q)
    np.testing.assert_allclose(res, [0.0, 2 / 3, 1 / 3, 0.0])
    toks = {sample_residual(p, q, u) for u in np.linspace(0, 0.999, 50)}
    assert toks == {1, 2}
    assert sample_residual(p, q, 0.7) == sample_residual(p, q, 0.7)


def test_acceptance_stats_use_vllm_definitions():
    s = AcceptanceStats(gamma_max=4)
    s.record(3, 3)
    s.record(3, 1)
    s.record(0, 0)  # γ = 0 rounds are not drafts
    assert s.num_drafts == 2
    assert s.per_position_rate[:3].tolist() == [1.0, 0.5, 0.5]
    assert s.mean_acceptance_length == 1 + 4 / 2
    assert s.token_acceptance_rate == 4 / 6


@pytest.mark.parametrize(
    "tokens, q, needle",
    [
        ([0, 7], [0.5, 0.5], "DRAFT.tokens[1]: 7 is not a token id in [0, 3]"),
        ([0, -1], [0.5, 0.5], "DRAFT.tokens[1]: -1"),
        ([0, 1], [0.5, 0.0], "got 0.0 at position 1"),
        ([0, 1], [0.5, float("nan")], "got nan at position 1"),
        ([0, 1], [0.5, float("inf")], "got inf at position 1"),
        ([0, 1], [0.5, 1.0 + 2 * Q_SLACK], "finite probability in (0, 1]"),
        ([0, 1], [0.5], "2 token ids but 1 q̂(x_i) values"),
    ],
)
def test_one_draft_check_for_the_wire_and_the_ragged_batch(tokens, q, needle):
    """`check_draft` is what DRAFT's decoder and `RaggedDrafts.validate` both run."""
    with pytest.raises(ProtocolError) as info:
        check_draft("DRAFT", tokens, q, 4)
    assert needle in str(info.value)


def test_draft_check_passes_what_a_device_draws():
    """Control for the refusals above: ids at both ends of [0, V), q̂ = 1 (greedy), a q̂ a float32
    sum rounds just over 1, numpy scalars, the empty draft (γ = 0)."""
    check_draft("DRAFT", [0, 3, np.int64(2)], [1.0, 1.0 + Q_SLACK / 2, np.float64(1e-12)], 4)
    check_draft("DRAFT", [], [], 4)
    RaggedDrafts.from_lists([[0, 3], []], [[1.0, 0.25], []]).validate(4, gamma_max=2)
