"""Policy ``certified``: branch and bound equals exhaustive enumeration on small drops
and says "proven optimal"; its box bound rests on the superset minimum of the exact table."""

from __future__ import annotations

import numpy as np
import pytest
from _builders import random_preset_instances

from multispin.errors import ConfigError
from multispin.optimize import plan
from multispin.optimize.bound import subset_bits
from multispin.optimize.certified import branch_and_bound, superset_min
from multispin.optimize.draft_lengths import exhaustive_oracle, paper_greedy
from multispin.optimize.goodput import SAAObjective

_GMAX_FOR_K = {1: 20, 2: 20, 3: 12, 4: 8, 5: 6}


def test_certified_equals_exhaustive_enumeration_and_is_proven_optimal():
    """20 small drops (K 1–5, every γ vector enumerable): the certified plan's G is the exhaustive
    optimum and it is proven. Started from the paper's greedy (often far below), it still ends
    there: the proof does not lean on a good incumbent."""
    rng = np.random.default_rng(12)
    for i, inst in enumerate(random_preset_instances(20, seed=1227, max_devices=5, deep_fade_prob=0.15)):
        inst = inst.replace(gamma_max=_GMAX_FOR_K[inst.num_devices])
        modes = ("optimal", "all_ul", "all_dl")[i % 3]
        obj = SAAObjective(inst, rng.random((150, inst.num_devices)), modes)
        best = exhaustive_oracle(obj).goodput_tokens_per_s
        p = plan(inst, uniforms=obj.uniforms, modes=modes, policy="certified")
        assert p.proven_optimal and p.policy == "certified"
        assert p.goodput_tokens_per_s == pytest.approx(best, rel=1e-9)
        assert p.upper_bound >= best * (1 - 1e-9)
        g, v, upper, proven, _ = branch_and_bound(obj, paper_greedy(obj).draft_len)
        assert proven and v == pytest.approx(best, rel=1e-9) and upper >= best * (1 - 1e-9)


def test_time_budget_gives_a_valid_bound_without_a_proof():
    """With no time the search stops at once: not proven, and its bound is still above the optimum."""
    inst = random_preset_instances(1, seed=5, max_devices=4)[0].replace(gamma_max=8)
    k = inst.num_devices
    obj = SAAObjective(inst, np.random.default_rng(0).random((100, k)))
    best = exhaustive_oracle(obj).goodput_tokens_per_s
    g, v, upper, proven, _ = branch_and_bound(obj, np.zeros(k, dtype=np.int64), time_budget_s=0.0)
    if not proven:
        assert upper >= best * (1 - 1e-12)


def test_superset_min_is_the_minimum_over_supersets():
    rng = np.random.default_rng(2)
    table = rng.random(32)
    table[0] = 0.0
    sets = subset_bits(0, 32, 5)
    codes = np.arange(32)
    brute = np.array([table[[c2 for c2 in codes if (c2 & c) == c]].min() for c in codes])
    assert np.array_equal(superset_min(table), brute)
    assert sets.shape == (32, 5)


def test_certified_refuses_what_it_cannot_prove():
    inst = random_preset_instances(1, seed=1, max_devices=1)[0]
    big = inst.subset(np.zeros(13, dtype=int))
    with pytest.raises(ConfigError, match="certified"):
        branch_and_bound(SAAObjective(big, np.zeros((2, 13))), np.zeros(13, dtype=np.int64))
    with pytest.raises(ConfigError, match="deterministic"):
        branch_and_bound(
            SAAObjective(inst, np.zeros((2, 1)), "random", mode_uniforms=np.zeros((2, 1))), np.zeros(1, dtype=np.int64)
        )
