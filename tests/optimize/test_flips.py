"""Flipped outcomes in closed form (`multispin.optimize.flips`): T* of a rejected set with one
device added or removed equals the solver's on that set, on random sets of random instances
(deep fades, K up to 200); and the search that ranks its moves by them reports the solver's G."""

from __future__ import annotations

import numpy as np
from _builders import random_preset_instances

from multispin.optimize.flips import FlipSolver, closed_form_applies
from multispin.optimize.goodput import SAAObjective
from multispin.optimize.incremental import IncrementalSAA
from multispin.optimize.reactive import t_comm_batch
from multispin.system import World, get_preset


def _instances():
    out = [
        i.replace(payload_bits=np.full(i.num_devices, i.payload_bits[0]), dl_payload_bits=None)
        for i in random_preset_instances(24, seed=5, max_devices=12, deep_fade_prob=0.3)
    ]
    for k in (20, 200):
        out.append(World(get_preset("paper-qwen").override({"devices.count": k, "seed": k})).instance(0))
    return out


def test_a_flip_equals_the_solver_on_the_flipped_set():
    rng = np.random.default_rng(0)
    for inst in _instances():
        k = inst.num_devices
        flips = FlipSolver(inst)
        for p in (0.05, 0.5, 0.95):  # nearly empty, half, nearly full sets
            rejected = rng.random((200, k)) < p
            rows, cols = rng.integers(0, 200, 1500), rng.integers(0, k, 1500)
            masks = rejected[rows].copy()
            masks[np.arange(rows.size), cols] ^= True
            # sums in another order: up to ~1e-10 where a faded device's 1/h dominates a sum
            assert np.allclose(flips(rejected, rows, cols), t_comm_batch(masks, inst), rtol=1e-9, atol=0)
    # control: the same check catches a flip of the wrong device
    inst = _instances()[-2]
    rejected = rng.random((200, 20)) < 0.5
    rows, cols = np.arange(200), rng.integers(0, 20, 200)
    masks = rejected.copy()
    masks[rows, (cols + 1) % 20] ^= True
    assert not np.allclose(FlipSolver(inst)(rejected, rows, cols), t_comm_batch(masks, inst), rtol=1e-9, atol=0)


def test_closed_form_covers_only_the_solver_it_reproduces():
    w = World(get_preset("paper-qwen").override({"devices.count": 6}))
    inst, u = w.instance(0), w.saa_uniforms(0)
    assert closed_form_applies(SAAObjective(inst, u))
    assert not closed_form_applies(SAAObjective(inst, u, modes="all_ul"))
    assert not closed_form_applies(SAAObjective(inst, u, split="optimized"))
    assert not closed_form_applies(SAAObjective(inst.replace(dl_payload_bits=inst.payload_bits * 2), u))


def test_the_state_ranks_by_closed_form_and_keeps_the_solvers_values():
    """Moves made with closed-form flips leave every sample's T_comm* equal to a fresh solve."""
    w = World(get_preset("paper-qwen").override({"devices.count": 20, "seed": 3}))
    obj = SAAObjective(w.instance(0), w.saa_uniforms(0)[:300])
    state = IncrementalSAA(obj, np.full(20, 4), closed_form=True)
    rng = np.random.default_rng(1)
    for _ in range(15):
        table = state.line_table()
        exact = IncrementalSAA(obj, state.gamma).line_table()
        assert np.allclose(table, exact, rtol=1e-9)
        k = int(rng.integers(20))
        state.set_device(k, int(np.argmax(table[k])))
        assert np.array_equal(state.t_comm, obj.t_comm_samples(state.gamma))


def test_flips_by_set_equal_the_pairwise_ones_bit_for_bit():
    """`FlipSolver.by_set` (each distinct set's flips once) gives `__call__`'s values exactly, on
    batches of few repeated sets (its table path), of distinct sets (its fallback) and K > 62
    (no integer keys). Control: the same comparison sees a pair read off the wrong set."""
    rng = np.random.default_rng(3)
    for inst in _instances():
        k = inst.num_devices
        flips = FlipSolver(inst)
        for distinct in (1, 3, 40, 300):
            sets = rng.random((distinct, k)) < rng.uniform(0.05, 0.6)
            rejected = sets[rng.integers(0, distinct, 300)]
            rows, cols = np.nonzero(rng.random((300, k)) < 0.7)
            assert np.array_equal(flips.by_set(rejected, rows, cols), flips(rejected, rows, cols))
            shuffled = rng.permutation(rows.size)  # unsorted rows
            assert np.array_equal(
                flips.by_set(rejected, rows[shuffled], cols[shuffled]), flips(rejected, rows[shuffled], cols[shuffled])
            )
    # control: rows of another set give other values
    inst = _instances()[-2]
    flips = FlipSolver(inst)
    rejected = np.zeros((2, inst.num_devices), dtype=bool)
    rejected[1, :5] = True
    cols = np.arange(inst.num_devices)
    wrong = flips.by_set(rejected, np.ones_like(cols), cols)
    assert not np.array_equal(wrong, flips(rejected, np.zeros_like(cols), cols))
