"""Instances of the three-way planner's pinned plans (tests/optimize/test_verification.py)."""

import numpy as np

from multispin.system import World, get_preset
from multispin.system.coupled_alpha import assumed_coupled_alpha

# name → (preset, K, seed, P^ul dBm, coupled/standard ratio range or None (the assumed α), capped,
# deep-faded, policy)
PINNED = {
    "bench_seed0": ("paper-qwen", 20, 0, None, None, False, False, "fast"),
    "bench_seed2": ("paper-qwen", 20, 2, None, None, False, False, "fast"),
    "k4_capped_low_pul": ("paper-qwen", 4, 310, -10.0, (0.85, 1.0), True, False, "fast"),
    "k12_r1": ("paper-r1", 12, 311, 5.0, (0.85, 1.0), False, False, "fast"),
    "k30_faded": ("paper-qwen", 30, 312, 0.0, (0.9, 1.0), False, True, "fast"),
    "k40_capped": ("paper-r1", 40, 313, 10.0, (0.85, 1.0), True, False, "fast"),
    "k8_greedy_capped": ("paper-qwen", 8, 314, -5.0, (0.85, 1.0), True, True, "greedy"),
}


def pinned_drop(name: str):
    """(instance with its coupled acceptance, SAA uniforms, policy) of one pinned case."""
    preset, k, seed, pul, ratio, capped, faded, policy = PINNED[name]
    over = {"devices.count": k, "seed": seed}
    if pul is not None:
        over.update({"radio.p_ul_dbm": pul, "radio.p_dl_dbm": pul + 6.0})
    w = World(get_preset(preset).override(over))
    inst = w.instance(0)
    rng = np.random.default_rng(seed)
    alpha_c = assumed_coupled_alpha(w.drop.task, inst.alpha) if ratio is None else inst.alpha * rng.uniform(*ratio, k)
    changes = {"alpha_coupled": alpha_c}
    if capped:
        changes["gamma_cap"] = rng.integers(1, inst.gamma_max + 1, k)
    if faded:
        fade = np.where(rng.random(k) < 1 / 3, 10 ** rng.uniform(-5, -2, k), 1.0)
        changes["gain_ul"], changes["gain_dl"] = inst.gain_ul * fade, inst.gain_dl * fade
    return inst.replace(**changes), w.saa_uniforms(0), policy
