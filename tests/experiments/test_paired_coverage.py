"""The demo's paired intervals on simulated rounds whose true difference is known.

The simulation has what makes the real rounds hard: K = 20 devices drafting γ tokens whose
acceptance odds β_i vary from token to token (Beta around the difficulty of the device's current
prompt, which lasts a dozen rounds or more, so rounds are dependent; both policies work through
the same prompt queues at their own pace), drafts and acceptance uniforms of each policy's own
(the real policies' texts part within a round or two), a shared fading channel that sets one
policy's γ and both policies' airtime, and round latencies that depend on who was rejected. The truth is the ratio
of the two policies' stationary means, from one long run.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from multispin.experiments.demo_defaults import DEMO_ROUNDS
from multispin.experiments.paired import RoundLog, batches_per_seed, paired_difference
from multispin.speculative.expected_kept import expected_kept

K, GAMMA_MAX, BUDGET = 20, 8, 64
# spread of a prompt's acceptance logit: one device's E[L | draft] / γ then correlates 0.18 one
# round apart and 0.15 four apart, against 0.11 and 0.04 (pooled over the policies) on the 12-round
# K = 20 demo's rounds, so the simulation's dependence is, if anything, stronger than the real one
DIFFICULTY_SD = 0.3


def _accepted(beta: np.ndarray, u: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """Accepted length: leading positions with u_i ≤ β_i, at most γ."""
    ok = (u <= beta) & (np.arange(GAMMA_MAX) < gamma[..., None])
    return np.cumprod(ok, axis=-1).sum(axis=-1)


def _expected(beta: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """E[L | β] = Σ_{k ≤ γ} β_1 ⋯ β_k (no EOS, no budget in the simulation)."""
    prods = np.cumprod(beta, axis=-1) * (np.arange(GAMMA_MAX) < gamma[..., None])
    return prods.sum(axis=-1)


def simulate(rng: np.random.Generator, reps: int, rounds: int, *, alpha_bias: float = 0.0, burn_in: int = 64) -> dict:
    """`reps` independent runs of `rounds` rounds of two policies, shape (reps, rounds) per field,
    measured after `burn_in` rounds (so that every device is somewhere in its prompt, as in the
    stationary process the truth describes). Each device works through its queue of prompts of
    BUDGET tokens, the same queue for both policies; a prompt's difficulty (the logit of its
    acceptance) persists while the device is on it. `alpha_bias` (negative control) gives a third
    numerator: policy a's expected tokens from a model whose acceptance is off by that much, as a
    control variate built on a profile's α, whose mean is not known exactly, would be."""
    difficulty = rng.standard_normal((reps, K, rounds + burn_in + 1))  # per prompt; shared queue
    at = {p: np.zeros((reps, K), dtype=int) for p in "ab"}  # the prompt each device is on
    done = {p: rng.integers(0, BUDGET, size=(reps, K)) for p in "ab"}  # tokens of it done
    done["b"] = done["a"].copy()
    out = {k: np.zeros((reps, rounds)) for k in ("na", "ea", "ta", "nb", "eb", "tb", "wa")}
    for r in range(-burn_in, rounds):
        h = rng.exponential(size=(reps, K))  # the round's fading, common to both
        gamma_a = np.where(h > 0.25, 7, 2)  # "adaptive": short drafts on a deep fade
        gamma_b = np.full((reps, K), 5)
        for pol, gamma, weight in (("a", gamma_a, 0.6), ("b", gamma_b, 1.0)):
            z = np.take_along_axis(difficulty, at[pol][..., None], axis=2)[..., 0]
            mean = 1 / (1 + np.exp(-(1.6 + DIFFICULTY_SD * z)))
            # each policy's own drafts and uniforms: in the real runs the policies' texts part
            # after a round or two, and with them the positions the random numbers are keyed on
            beta = rng.beta(4 * mean[..., None], 4 * (1 - mean[..., None]), size=(reps, K, GAMMA_MAX))
            u = rng.random((reps, K, GAMMA_MAX))
            acc = _accepted(beta, u, gamma)
            done[pol] += acc + 1
            at[pol] += done[pol] >= BUDGET
            done[pol] %= BUDGET
            if r < 0:
                continue
            rejected = acc < gamma
            airtime = np.where(rejected, np.minimum(1 / h, 8.0), 0.0).max(axis=1)
            out[f"n{pol}"][:, r] = (acc + 1).sum(axis=1)
            out[f"e{pol}"][:, r] = (_expected(beta, gamma) + 1).sum(axis=1)
            out[f"t{pol}"][:, r] = 0.2 + 0.02 * gamma.max(axis=1) + 0.02 * weight * airtime
            if pol == "a":
                model = np.clip(mean + alpha_bias, 0, 1)[..., None] * np.ones(GAMMA_MAX)
                out["wa"][:, r] = (_expected(model, gamma) + 1).sum(axis=1)
    return out


def logs(sim: dict, i: int, numerator_a: str = "ea") -> tuple[RoundLog, RoundLog]:
    a = RoundLog.of(sim["na"][i], sim["ta"][i], sim[numerator_a][i])
    b = RoundLog.of(sim["nb"][i], sim["tb"][i], sim["eb"][i])
    return a, b


@pytest.fixture(scope="module")
def truth() -> float:
    """G_a / G_b − 1 (percent) of the stationary process: one long run, numerators on the
    expectations (the same mean, less noise)."""
    sim = simulate(np.random.default_rng(1), reps=20, rounds=3000)
    g_a = sim["ea"].sum() / sim["ta"].sum()
    g_b = sim["eb"].sum() / sim["tb"].sum()
    return 100 * (g_a / g_b - 1)


@pytest.fixture(scope="module")
def demo_sized() -> dict:
    return simulate(np.random.default_rng(2), reps=3000, rounds=DEMO_ROUNDS)


def coverage(sim: dict, truth: float, estimator: str, level: float = 0.95, numerator_a: str = "ea") -> float:
    hits = []
    for i in range(sim["na"].shape[0]):
        d = paired_difference(*logs(sim, i, numerator_a), estimator=estimator, level=level)  # type: ignore[arg-type]
        hits.append(d.pct.low <= truth <= d.pct.high)
    return float(np.mean(hits))


def test_the_simulated_difference_is_one_the_demo_faces(truth, demo_sized):
    # a few percent, as adaptive vs all-UL; realised per-run estimates scatter wider than that
    assert 3 < truth < 15
    est = [paired_difference(*logs(demo_sized, i)).pct.estimate for i in range(200)]
    assert np.std(est) > truth / 3  # one run alone does not decide it


@pytest.mark.parametrize("estimator", ["realised", "conditioned"])
def test_intervals_cover_the_truth_at_the_demos_size(truth, demo_sized, estimator):
    assert batches_per_seed(DEMO_ROUNDS) == 5
    assert coverage(demo_sized, truth, estimator) >= 0.93


def test_the_conditioned_interval_is_narrower(demo_sized):
    width = {
        e: np.median(
            [
                (lambda d: d.pct.high - d.pct.low)(paired_difference(*logs(demo_sized, i), estimator=e))
                for i in range(300)
            ]
        )
        for e in ("realised", "conditioned")
    }
    assert width["conditioned"] < 0.8 * width["realised"]


def test_negative_control_a_shrunk_interval_loses_coverage(truth, demo_sized):
    """Student's t with 4 degrees of freedom replaced by the normal quantile (the interval a
    practitioner gets by forgetting how few batches there are): the coverage test catches it."""
    df = batches_per_seed(DEMO_ROUNDS) - 1
    shrunk_level = 2 * stats.t.cdf(stats.norm.ppf(0.975), df) - 1  # the t level whose quantile is 1.96
    assert coverage(demo_sized, truth, "conditioned", level=shrunk_level) < 0.90


def test_conditioned_tokens_are_unbiased(demo_sized):
    """E[Σ expected] = E[Σ realised]: over 3,000 runs the paired mean difference is within 4
    standard errors of 0, for both policies."""
    for pol in ("a", "b"):
        diff = demo_sized[f"e{pol}"].sum(axis=1) - demo_sized[f"n{pol}"].sum(axis=1)
        assert abs(diff.mean()) < 4 * diff.std(ddof=1) / np.sqrt(diff.size)


def test_negative_control_a_model_based_numerator_is_biased():
    """Expected tokens from a model whose acceptance is 3 points off (what a profile-based
    control variate without an exactly known mean does): the same check sees the bias."""
    sim = simulate(np.random.default_rng(3), reps=600, rounds=DEMO_ROUNDS, alpha_bias=0.03)
    diff = sim["wa"].sum(axis=1) - sim["na"].sum(axis=1)
    assert abs(diff.mean()) > 4 * diff.std(ddof=1) / np.sqrt(diff.size)


def test_expected_kept_is_the_simulations_expectation():
    """The runtime's expected_kept (EOS and budget aside) is the simulation's 1 + Σ Π β."""
    beta = np.random.default_rng(4).random(6)
    ref = _expected(np.pad(beta, (0, GAMMA_MAX - 6))[None], np.array([6]))[0]
    assert expected_kept(beta, [5] * 6, eos_ids=(), budget=64) == pytest.approx(ref + 1)
