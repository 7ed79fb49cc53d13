"""Capacity under a TPOT target (experiments/capacity.py): the simulated tokens follow the model,
a looser target never carries fewer devices, and broken samplers are caught."""

from __future__ import annotations

import numpy as np
import pytest

from multispin import api as ms
from multispin.experiments.capacity import capacity, round_tpot_samples
from multispin.optimize.goodput import expected_tokens


def _inst(k: int = 3):
    sc = ms.scenario("paper-qwen", devices=k, seed=4, fields={"optimizer.gamma_max": 6})
    return ms.instance(sc, 0)


def _tokens_from(tpot: np.ndarray, inst, gamma, rounds: int, seed: int) -> np.ndarray:
    """The tokens per device-round behind TPOT samples (round time / TPOT), on the same draws."""
    from multispin.optimize.goodput import t_comp_s
    from multispin.optimize.reactive import t_comm_batch

    rng = np.random.default_rng(seed)
    u = rng.random((rounds, inst.num_devices))
    rej = u > inst.survival[np.arange(inst.num_devices), gamma][None, :]
    t = float(t_comp_s(inst, gamma)) + t_comm_batch(rej, inst)
    return t[:, None] / tpot.reshape(rounds, -1)


def _mean_tokens_test(sampler) -> bool:
    """Whether the sampled mean tokens per device cover E[N_k] (99.9% normal interval per device)."""
    inst, gamma, rounds = _inst(), np.array([2, 4, 6]), 4000
    tokens = _tokens_from(sampler(inst, gamma, "optimal", np.random.default_rng(5), rounds), inst, gamma, rounds, 5)
    m, se = tokens.mean(axis=0), tokens.std(axis=0, ddof=1) / np.sqrt(rounds)
    return bool(np.all(np.abs(m - expected_tokens(inst, gamma)) <= 3.29 * se))


def test_simulated_tokens_have_the_models_mean():
    assert _mean_tokens_test(round_tpot_samples)


def test_a_sampler_that_drops_the_bonus_token_is_caught():
    def broken(inst, gamma, modes, rng, rounds):
        tpot = round_tpot_samples(inst, gamma, modes, rng, rounds)
        inst_t = _tokens_from(tpot, inst, gamma, rounds, 5)
        return (tpot.reshape(rounds, -1) * inst_t / np.maximum(inst_t - 1, 1)).ravel()  # N − 1 tokens

    assert not _mean_tokens_test(broken)


def test_a_looser_target_never_carries_fewer_devices():
    sc = ms.scenario("paper-qwen", fields={"optimizer.gamma_max": 6})
    caps = [capacity(sc, tpot_target_s=t, max_devices=8, drops=1, rounds=60, n_saa=60)[0] for t in (0.12, 0.2, 0.3)]
    assert caps == sorted(caps) and caps[-1] > 0
    assert capacity(sc, tpot_target_s=1e-4, max_devices=4, drops=1, rounds=20, n_saa=20)[0] == 0


def test_bad_capacity_inputs_are_config_errors():
    from multispin.errors import ConfigError

    sc = ms.scenario("paper-qwen")
    with pytest.raises(ConfigError, match="policy"):
        capacity(sc, policy="target_only")
    with pytest.raises(ConfigError, match="tpot_target_s"):
        capacity(sc, tpot_target_s=0)
