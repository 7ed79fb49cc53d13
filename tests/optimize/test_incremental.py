"""Incremental SAA evaluation equals the full evaluation on random move sequences."""

from __future__ import annotations

import numpy as np
import pytest
from _builders import random_preset_instances

from multispin.optimize.goodput import SAAObjective
from multispin.optimize.incremental import IncrementalSAA, sample_levels


def _objectives():
    rng = np.random.default_rng(7)
    for i, inst in enumerate(random_preset_instances(6, seed=11, max_devices=12, deep_fade_prob=0.2)):
        k = inst.num_devices
        u = rng.random((150, k))
        modes = ("optimal", "all_dl", "all_ul", "random")[i % 4]
        yield SAAObjective(inst, u, modes, "equal", rng.random(u.shape) if modes == "random" else None)
    inst = random_preset_instances(1, seed=3, max_devices=4)[0]
    yield SAAObjective(inst, rng.random((40, inst.num_devices)), "optimal", "optimized")


def _assert_state_exact(state: IncrementalSAA, obj: SAAObjective) -> None:
    assert state.value() == pytest.approx(obj.value(state.gamma), rel=1e-12)
    np.testing.assert_allclose(state.t_comm, obj.t_comm_samples(state.gamma), rtol=1e-12, atol=0)


@pytest.mark.parametrize("obj", list(_objectives()), ids=lambda o: f"K{o.inst.num_devices}-{o.modes}-{o.split}")
def test_incremental_equals_full_evaluation_on_random_moves(obj):
    rng = np.random.default_rng(0)
    k, gmax = obj.inst.num_devices, obj.inst.gamma_max
    state = IncrementalSAA(obj, rng.integers(0, gmax + 1, k))
    _assert_state_exact(state, obj)
    for step in range(25):
        if step % 3 != 2:  # one device: the whole line, then a move along it
            dev = int(rng.integers(k))
            line = state.line_values(dev)
            if step % 4 == 0:  # every device's line at once equals each device's own
                table = state.line_table()
                for d in range(k):
                    np.testing.assert_allclose(table[d], state.line_values(d), rtol=1e-12, atol=0)
            for j in rng.choice(gmax + 1, size=4, replace=False):
                g = state.gamma.copy()
                g[dev] = j
                assert line[j] == pytest.approx(obj.value(g), rel=1e-12)
            if step % 5 == 0:
                state.refresh_flips()
            state.set_device(dev, int(rng.integers(gmax + 1)))
        else:  # several devices at once: candidates in one batch, then commit one
            cands = np.clip(state.gamma[None, :] + rng.integers(-3, 4, (3, k)), 0, gmax)
            vals, changes = state.candidate_values(cands)
            for c, v in zip(cands, vals):
                assert v == pytest.approx(obj.value(c), rel=1e-12)
            state.move_to(changes, int(rng.integers(3)))
        _assert_state_exact(state, obj)


def test_levels_are_the_last_accepted_draft_length():
    obj = next(_objectives())
    lv = sample_levels(obj)
    surv = obj.inst.survival
    k = obj.inst.num_devices
    for g in range(obj.inst.gamma_max + 1):
        accepted = obj.uniforms <= surv[np.arange(k), g][None, :]
        assert np.array_equal(accepted, lv >= g)


def test_a_given_t_comm_starts_the_state_without_a_solve():
    obj = next(_objectives())
    g = np.full(obj.inst.num_devices, 3)
    state = IncrementalSAA(obj, g, t_comm=obj.t_comm_samples(g))
    assert state.solves == 0
    _assert_state_exact(state, obj)
