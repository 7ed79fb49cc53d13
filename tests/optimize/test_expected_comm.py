"""E[T_comm] at any per-device rejection probabilities (`goodput.expected_comm_s`): the clock's
one-round decision (`reactive`) averaged by hand over every rejected set, the model's own
probabilities giving `exact_goodput`'s E[T_comm], and the sampled path beyond enumeration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from _builders import random_preset_instances

from multispin.errors import ConfigError
from multispin.optimize.goodput import MAX_EXACT_UNCERTAIN, exact_goodput, expected_comm_s, rejection_prob
from multispin.optimize.reactive import reactive, t_comm_batch

CASES = [("optimal", "equal"), ("all_ul", "equal"), ("all_dl", "equal"), ("random", "equal"), ("optimal", "optimized")]


def _by_hand(inst, q, modes, split, mode_u) -> float:
    """Σ over every rejected set of P(set) × the T_comm `reactive` decides for it (one round's
    decision, as the planner makes it for the clock)."""
    total = 0.0
    for bits in itertools.product([False, True], repeat=inst.num_devices):
        mask = np.array(bits)
        p = float(np.prod(np.where(mask, q, 1.0 - q)))
        if p == 0.0 or not mask.any():
            continue
        mu = None if mode_u is None else mode_u[None, :]
        total += p * reactive(mask, inst, split=split, modes=modes, mode_uniforms=mu).comm_latency_s
    return total


@pytest.mark.parametrize(("modes", "split"), CASES)
def test_exact_sum_is_the_reactive_decisions_average(modes, split):
    rng = np.random.default_rng(7)
    for inst in random_preset_instances(6, seed=3, max_devices=6):
        k = inst.num_devices
        q = rng.choice([0.0, 1.0, 0.3, 0.85], size=k) * rng.random(k) ** (rng.random(k) < 0.5)
        mode_u = rng.random(k) if modes == "random" else None
        got = expected_comm_s(inst, q, modes, split, mode_u)
        assert got == pytest.approx(_by_hand(inst, q, modes, split, mode_u), rel=1e-9, abs=1e-15)


def test_certain_outcomes_give_that_sets_t_comm():
    inst = random_preset_instances(1, seed=5, max_devices=8)[0]
    mask = np.arange(inst.num_devices) % 2 == 0
    want = reactive(mask, inst).comm_latency_s
    assert expected_comm_s(inst, mask.astype(float)) == pytest.approx(want, rel=1e-12)


def test_the_models_own_probabilities_give_exact_goodputs_comm():
    for inst in random_preset_instances(4, seed=11, max_devices=7):
        gamma = np.full(inst.num_devices, 3)
        want = exact_goodput(inst, gamma).e_t_comm_s
        assert expected_comm_s(inst, rejection_prob(inst, gamma)) == pytest.approx(want, rel=1e-9)
        # negative control: the acceptance probabilities in place of the rejection's miss it
        wrong = expected_comm_s(inst, 1.0 - rejection_prob(inst, gamma))
        assert wrong != pytest.approx(want, rel=1e-3)


def test_beyond_enumeration_the_sampled_mean_is_within_its_error():
    inst = random_preset_instances(20, seed=2, max_devices=16)
    inst = max(inst, key=lambda i: i.num_devices)
    k = inst.num_devices
    assert k > MAX_EXACT_UNCERTAIN
    q = np.linspace(0.05, 0.95, k)
    codes = np.arange(2**k, dtype=np.int64)
    masks = ((codes[:, None] >> np.arange(k)[None, :]) & 1).astype(bool)
    t = t_comm_batch(masks, inst)
    p = np.prod(np.where(masks, q, 1.0 - q), axis=1)
    exact, sd = float(p @ t), float(np.sqrt(p @ (t - p @ t) ** 2))
    got = expected_comm_s(inst, q, rng=np.random.default_rng(0), samples=4096)
    assert abs(got - exact) < 4 * sd / np.sqrt(4096)
    with pytest.raises(ConfigError, match="rng"):
        expected_comm_s(inst, q)


def test_bad_probabilities_are_named():
    inst = random_preset_instances(1, seed=5, max_devices=3)[0]
    with pytest.raises(ConfigError, match="reject_prob"):
        expected_comm_s(inst, np.full(inst.num_devices + 1, 0.5))
    with pytest.raises(ConfigError, match="reject_prob"):
        expected_comm_s(inst, np.full(inst.num_devices, 1.5))
