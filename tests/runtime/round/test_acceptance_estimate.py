"""The online acceptance estimator on simulated devices: its intervals cover the true α, and
shrinking towards the group beats each device's own count."""

from __future__ import annotations

import numpy as np
import pytest

from multispin.errors import ConfigError
from multispin.runtime.round.acceptance_estimate import AcceptanceEstimator, groups_of

GAMMA = 5


def _simulate(true_alpha: np.ndarray, prior: np.ndarray, rounds: int, rng, pooling="group") -> AcceptanceEstimator:
    """Verdict rounds at γ = 5 under the i.i.d. model, fed to a fresh estimator."""
    est = AcceptanceEstimator(prior, pooling=pooling)
    for _ in range(rounds):
        for d, a in enumerate(true_alpha):
            acc = 0
            while acc < GAMMA and rng.random() < a:
                acc += 1
            est.update(d, GAMMA, acc, acc < GAMMA)
    return est


def _devices(rng, spread: float):
    """Two groups of 8 devices (the same draft on two tasks): true α around each group's mean."""
    means = np.repeat([0.82, 0.88], 8)
    prior = means + 0.02  # the profile's α, a little optimistic, as teacher forcing is
    true = np.clip(means + rng.normal(0, spread, means.size), 0.05, 0.99)
    return true, prior


@pytest.mark.parametrize("spread", [0.0, 0.03])
def test_intervals_cover_the_true_acceptance_of_simulated_devices(spread):
    rng = np.random.default_rng(int(spread * 1000) + 1)
    hits = total = 0
    for _ in range(60):
        true, prior = _devices(rng, spread)
        est, sd = _simulate(true, prior, rounds=20, rng=rng).posterior()
        hits += int(np.sum(np.abs(est - true) <= 1.96 * sd))
        total += true.size
    assert hits / total >= 0.93, hits / total


def test_complete_pooling_undercovers_when_devices_differ():
    """Negative control: the group's rate and its own uncertainty, for every member, when members
    really differ: the coverage check above catches it."""
    rng = np.random.default_rng(9)
    hits = total = 0
    for _ in range(60):
        true, prior = _devices(rng, 0.03)
        est = _simulate(true, prior, rounds=20, rng=rng)
        for g in np.unique(est.groups):
            members = np.flatnonzero(est.groups == g)
            rho, _, var_rho = est._group_fit(members)
            hits += int(np.sum(np.abs(rho - true[members]) <= 1.96 * np.sqrt(var_rho)))
            total += members.size
    assert hits / total < 0.8, hits / total


def test_shrinking_beats_each_devices_own_count_when_devices_share_a_rate():
    rng = np.random.default_rng(4)
    err_group, err_device = [], []
    for _ in range(40):
        true, prior = _devices(rng, 0.0)
        seed = int(rng.integers(1 << 30))
        err_group.append(np.abs(_simulate(true, prior, 20, np.random.default_rng(seed)).alpha - true).mean())
        err_device.append(np.abs(_simulate(true, prior, 20, np.random.default_rng(seed), "device").alpha - true).mean())
    assert np.mean(err_group) < 0.6 * np.mean(err_device)


def test_groups_are_devices_sharing_a_prior_and_bad_pooling_is_refused():
    assert groups_of([0.8, 0.9, 0.8]).tolist() == [0, 1, 0]
    with pytest.raises(ConfigError, match="pooling"):
        AcceptanceEstimator(np.array([0.8]), pooling="task")
    lone = AcceptanceEstimator(np.array([0.7, 0.9]))
    assert lone.alpha == pytest.approx([0.7, 0.9])  # no verdicts: the prior


def _binomial_moments_without_floor(est: AcceptanceEstimator) -> np.ndarray:
    """The estimator before the stopped-draft moments and the floor on m (the negative control):
    τ² by binomial moments of the members' rates, m down to 1."""
    out = np.empty(est.prior.shape)
    for g in np.unique(est.groups):
        members = np.flatnonzero(est.groups == g)
        s, n = est.own_successes[members], est.own_trials[members]
        w = est.prior_weight * members.size
        rho = (w * est.prior[members].mean() + s.sum()) / (w + n.sum())
        big_n = n.sum()
        spread = np.sum(n * (s / n - rho) ** 2)
        tau2 = max(0.0, (spread - rho * (1 - rho) * (members.size - 1)) / (big_n - np.sum(n**2) / big_n))
        m = max(rho * (1 - rho) / tau2 - 1, 1.0) if tau2 > 0 else 1e12
        out[members] = (s + m * rho) / (n + m)
    return out


def test_one_round_of_stopped_drafts_does_not_read_as_a_spread():
    """Four devices of one group at the same α, one round of γ = 7 each (the testbed's first
    verdicts): a rejection at the first position must not take a device from 0.83 to 0.4. The
    estimator's mean error stays near the prior's; the binomial moments without a floor double it."""
    rng = np.random.default_rng(11)
    err, err_control = [], []
    for _ in range(400):
        est = AcceptanceEstimator(np.full(4, 0.83))
        for d in range(4):
            acc = 0
            while acc < 7 and rng.random() < 0.83:
                acc += 1
            est.update(d, 7, acc, acc < 7)
        err.append(np.abs(est.alpha - 0.83).mean())
        err_control.append(np.abs(_binomial_moments_without_floor(est) - 0.83).mean())
    assert np.mean(err) < 0.06 and np.mean(err_control) > 0.09, (np.mean(err), np.mean(err_control))
