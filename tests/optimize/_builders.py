"""Shared builders: hand-made instances and random instances drawn from the presets' distributions."""

from __future__ import annotations

import numpy as np

from multispin.system import ComputeParams, Instance, RadioParams, World, get_preset


def make_instance(
    gain_ul,
    gain_dl=None,
    *,
    bandwidth_hz=1.0,
    p_ul_w=1.0,
    p_dl_w=3.0,
    noise=1.0,
    bits=1.0,
    alpha=0.9,
    draft_latency_s=0.01,
    t_ver=(0.04, 0.0076),
    gamma_max=20,
) -> Instance:
    g = np.asarray(gain_ul, dtype=float)
    return Instance(
        gain_ul=g,
        gain_dl=g if gain_dl is None else np.asarray(gain_dl, dtype=float),
        alpha=np.broadcast_to(np.asarray(alpha, dtype=float), g.shape) if np.ndim(alpha) == 0 else alpha,
        draft_latency_s=draft_latency_s,
        payload_bits=bits,
        radio=RadioParams(bandwidth_hz, p_ul_w, p_dl_w, noise),
        compute=ComputeParams(*t_ver),
        gamma_max=gamma_max,
    )


def random_preset_instances(n: int, seed: int, max_devices: int = 10, deep_fade_prob: float = 0.1):
    """Instances from the presets' distributions: drop, Rayleigh fading (plus forced deep fades),
    P^dl/P^ul in {1, 4, 16, 64}, either model pair, K in [1, max_devices]."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        name = ("paper-qwen", "paper-r1")[i % 2]
        k = int(rng.integers(1, max_devices + 1))
        ratio = float(rng.choice([1.0, 4.0, 16.0, 64.0]))
        sc = get_preset(name).override(
            {
                "devices.count": k,
                "seed": int(rng.integers(0, 2**31)),
                "radio.p_dl_dbm": 10.0 + 10 * np.log10(ratio),
                "radio.reciprocity": bool(rng.random() < 0.7),
            }
        )
        inst = World(sc).instance(int(rng.integers(0, 1000)))
        fade = np.where(rng.random(k) < deep_fade_prob, 10 ** rng.uniform(-5, -2, k), 1.0)
        out.append(inst.replace(gain_ul=inst.gain_ul * fade, gain_dl=inst.gain_dl * fade))
    return out
