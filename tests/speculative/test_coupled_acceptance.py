import numpy as np
import pytest

from multispin.errors import ConfigError
from multispin.speculative.coupled_acceptance import (
    coupled_acceptance,
    coupled_lower_bound,
    standard_acceptance,
    total_variation,
)


def _naive(p: np.ndarray, q: np.ndarray) -> float:
    """The O(V²) formula as written: Σ_x 1 / Σ_y max(p_y/p_x, q_y/q_x) over the common support."""
    p, q = p / p.sum(), q / q.sum()
    total = 0.0
    for x in range(p.size):
        if p[x] > 0 and q[x] > 0:
            total += 1.0 / np.sum(np.maximum(p / p[x], q / q[x]))
    return total


def _random_rows(rng, rows: int, v: int, zeros: float = 0.3, sharp: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    p = rng.dirichlet(np.full(v, sharp), size=rows) * (rng.random((rows, v)) > zeros)
    q = rng.dirichlet(np.full(v, sharp), size=rows) * (rng.random((rows, v)) > zeros)
    p[:, 0] += 1e-3  # a common support token, so the rows are not disjoint
    q[:, 0] += 1e-3
    return p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True)


def _gumbel_match_rate(p: np.ndarray, q: np.ndarray, n: int, rng, shared: bool = True) -> float:
    with np.errstate(divide="ignore"):
        lp, lq = np.log(p), np.log(q)
    g = rng.gumbel(size=(n, p.size))
    h = g if shared else rng.gumbel(size=(n, p.size))
    return float(np.mean(np.argmax(lp + g, axis=1) == np.argmax(lq + h, axis=1)))


def test_sorted_evaluation_equals_the_quadratic_formula_with_zeros():
    rng = np.random.default_rng(0)
    p, q = _random_rows(rng, 40, 17, zeros=0.4)
    got = coupled_acceptance(p, q)
    want = np.array([_naive(a, b) for a, b in zip(p, q)])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_identical_rows_match_surely_and_disjoint_rows_never():
    rng = np.random.default_rng(1)
    p, _ = _random_rows(rng, 10, 30)
    np.testing.assert_allclose(coupled_acceptance(p, p), 1.0, atol=1e-12)
    np.testing.assert_allclose(standard_acceptance(p, p), 1.0, atol=1e-12)
    a, b = np.array([0.5, 0.5, 0.0, 0.0]), np.array([0.0, 0.0, 0.3, 0.7])
    assert coupled_acceptance(a, b)[0] == 0.0 and total_variation(a, b)[0] == pytest.approx(1.0)


def test_bound_holds_and_coupled_never_beats_standard_on_random_rows():
    rng = np.random.default_rng(2)
    for sharp in (0.05, 0.3, 1.0, 5.0):
        p, q = _random_rows(rng, 200, 50, zeros=0.2, sharp=sharp)
        c = coupled_acceptance(p, q)
        assert np.all(c >= coupled_lower_bound(p, q) - 1e-12)
        # the maximal coupling (1 − TV) is the best any coupling can do
        assert np.all(c <= standard_acceptance(p, q) + 1e-12)


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_monte_carlo_gumbel_max_agrees_with_the_formula(seed):
    rng = np.random.default_rng(seed)
    p, q = _random_rows(rng, 1, 12, zeros=0.25, sharp=0.7)
    p, q = p[0], q[0]
    n = 60_000
    exact = float(coupled_acceptance(p, q)[0])
    se = np.sqrt(exact * (1 - exact) / n)
    mc = _gumbel_match_rate(p, q, n, rng)
    assert abs(mc - exact) < 4.5 * se, (mc, exact)
    # negative controls: the same test rejects independent noise (Σ p·q) and the standard rate
    indep = _gumbel_match_rate(p, q, n, rng, shared=False)
    assert abs(indep - exact) > 4.5 * se, (indep, exact)
    assert abs(mc - float(standard_acceptance(p, q)[0])) > 4.5 * se


def test_unnormalised_rows_are_normalised_and_bad_input_is_refused():
    p, q = np.array([2.0, 1.0, 1.0]), np.array([1.0, 1.0, 2.0])
    np.testing.assert_allclose(coupled_acceptance(p, q), coupled_acceptance(p / 4, q / 4))
    with pytest.raises(ConfigError, match="p, q"):
        coupled_acceptance(np.ones(3), np.ones(4))
    with pytest.raises(ConfigError, match="p, q"):
        coupled_acceptance(np.array([1.0, -1.0]), np.ones(2))
