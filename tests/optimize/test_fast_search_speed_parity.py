"""The planner's faster paths change no value and no plan: `FlipSolver.solve` equals the solver bit
for bit (deduplicated or not), subsample heads reuse the right levels, the climbs' distinct rows
are np.unique's, and the fast search and the shipped search plan exactly as they do with every set
solved by the objective's own entry point, on drops of K = 8 to 100 with deep fades."""

from __future__ import annotations

import numpy as np
import pytest
from _builders import random_preset_instances
from test_fast_search import _drop

import multispin.optimize.fast_search as fast_module
import multispin.optimize.incremental as incremental
from multispin.optimize.draft_lengths import local_search
from multispin.optimize.fast_search import _unique_rows, fast_search
from multispin.optimize.flips import FlipSolver
from multispin.optimize.goodput import SAAObjective
from multispin.optimize.incremental import head, sample_levels, t_comm_of
from multispin.optimize.reactive import t_comm_batch
from multispin.system import World, get_preset


def _instances():
    out = [
        i.replace(payload_bits=np.full(i.num_devices, i.payload_bits[0]), dl_payload_bits=None)
        for i in random_preset_instances(24, seed=11, max_devices=12, deep_fade_prob=0.3)
    ]
    for k in (20, 200):
        out.append(World(get_preset("paper-qwen").override({"devices.count": k, "seed": 3 * k})).instance(0))
    return out


def test_the_exact_solve_equals_the_solver_bit_for_bit():
    """Sparse, half and full sets, empty rows, devices no row holds: every value is the solver's."""
    rng = np.random.default_rng(0)
    for inst in _instances():
        k = inst.num_devices
        solver = FlipSolver(inst)
        for p in (0.05, 0.5, 0.95):
            mask = rng.random((300, k)) < p
            mask[:, rng.random(k) < 0.3] = False  # devices off in the whole batch
            mask[rng.random(300) < 0.1] = False  # empty sets
            assert np.array_equal(solver.solve(mask), t_comm_batch(mask, inst))
        assert np.array_equal(solver.solve(np.zeros((3, k), dtype=bool)), np.zeros(3))
    # control: the check sees a set that differs by one device
    inst = _instances()[-2]
    mask = rng.random((300, 20)) < 0.5
    moved = mask.copy()
    moved[np.arange(300), rng.integers(0, 20, 300)] ^= True
    assert not np.array_equal(FlipSolver(inst).solve(moved), t_comm_batch(mask, inst))


def test_deduplicated_batches_keep_every_row_its_own_value():
    """Large batches (few distinct sets) go through the deduplicated path: still the solver's values."""
    w = World(get_preset("paper-qwen").override({"devices.count": 20, "seed": 5}))
    obj = SAAObjective(w.instance(0), w.saa_uniforms(0))
    rng = np.random.default_rng(1)
    distinct = rng.random((40, 20)) < 0.4
    mask = distinct[rng.integers(0, 40, 2000)]
    rows = np.arange(2000) % obj.n_saa
    assert np.array_equal(t_comm_of(obj, mask, rows), t_comm_batch(mask, obj.inst))


def test_a_head_reuses_the_levels_of_its_first_samples():
    w = World(get_preset("paper-qwen").override({"devices.count": 12, "seed": 2}))
    obj = SAAObjective(w.instance(0), w.saa_uniforms(0))
    sub = head(obj, 100)
    assert np.array_equal(sample_levels(sub), sample_levels(obj.head(100)))
    # control: another subsample's levels differ
    assert not np.array_equal(sample_levels(sub), sample_levels(SAAObjective(obj.inst, obj.uniforms[100:200])))


def test_distinct_rows_are_numpys():
    rng = np.random.default_rng(2)
    for _ in range(50):
        a = rng.integers(0, 4, (rng.integers(1, 15), rng.integers(1, 6)))
        assert np.array_equal(_unique_rows(a), np.unique(a, axis=0))


def _plain(obj, mask, rows):
    return obj.t_comm_rows(mask, rows)


# K = 20 and 8 at the paper's N_SAA, K = 50 and 100 (the group starts' per-size batches) at fewer
# samples; every fourth drop deep-faded (as in test_fast_search)
_CASES = [(i, 20, 1000) for i in range(0, 24)] + [(i, 8, 1000) for i in range(100, 112)]
_CASES += [(i, 50, 300) for i in range(160, 166)] + [(i, 100, 200) for i in range(200, 203)]


def _plans(cases, shipped_every: int = 6):
    out = []
    for n, (i, k, n_saa) in enumerate(cases):
        obj = _drop(i, k, n_saa, deep_fade=i % 4 == 3)
        fresh = SAAObjective(obj.inst, obj.uniforms)
        plans = [fast_search(fresh)]
        if n % shipped_every == 0 and k <= 50:
            plans.append(local_search(SAAObjective(obj.inst, obj.uniforms)))
        out.append([(p.draft_len.tolist(), p.goodput_tokens_per_s) for p in plans])
    return out


def _solve_with(monkeypatch, fn):
    monkeypatch.setattr(incremental, "t_comm_of", fn)
    monkeypatch.setattr(fast_module, "t_comm_of", fn)


@pytest.mark.parametrize("part", [0, 1])
def test_the_fast_paths_plan_as_the_plain_solver_does(monkeypatch, part):
    """Every set solved by `SAAObjective.t_comm_rows` instead: the same γ and the same G, to the
    last bit, for the fast search and the shipped one. Control: a solver 2% off on larger sets
    moves some plan, so the comparison can fail."""
    cases = _CASES[part::2]
    fast = _plans(cases)
    _solve_with(monkeypatch, _plain)
    assert _plans(cases) == fast

    def skewed(obj, mask, rows):
        return obj.t_comm_rows(mask, rows) * np.where(mask.sum(axis=1) > 3, 1.02, 1.0)

    _solve_with(monkeypatch, skewed)
    assert _plans(cases[:12]) != fast[:12]
