"""Stored reference plans for the optimiser's quality tests, and the script that regenerates them.

The quality tests judge the searches under test against plans that cost far more to find than the
plans under test (the slow iterated local search, the shipped search on the fast planner's grid,
exhaustive enumeration at small K). Recomputing those references on every run cost most of the
suite's time; they are stored instead, as γ vectors under ``data/``, and re-evaluated on the same
objective (cheap) by the tests. The ``*_are_current`` tests recompute a few drops of each file and
fail if the stored plan is not what the reference search gives today.

Regenerate after a change to the searches, the presets or the drop grids:

    .venv/bin/python tests/optimize/reference_plans.py            # every file
    .venv/bin/python tests/optimize/reference_plans.py exhaustive # one file (by name)
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from multispin.optimize.draft_lengths import exhaustive_oracle, local_search, pm1_search, reference_search
from multispin.optimize.goodput import SAAObjective
from multispin.system import World, get_preset

DATA = Path(__file__).with_name("data")


# --------------------------------------------------------------------------- the drop grids


def grid_drop(i: int, n_saa: int, k: int = 20, preset: str = "paper-qwen", seed0: int = 5000):
    """Drop i of a grid over P^dl 10–28 dBm × noise figure 0–22 dB (fixed seeds seed0 + i):
    (instance, SAA uniforms, mode uniforms)."""
    pdl, nf = (10.0, 16.0, 22.0, 28.0)[i % 4], (0.0, 10.0, 22.0)[(i // 4) % 3]
    w = World(
        get_preset(preset).override(
            {
                "devices.count": k,
                "seed": seed0 + i,
                "radio.p_dl_dbm": pdl,
                "radio.noise_figure_db": nf,
                "optimizer.n_saa": n_saa,
            }
        )
    )
    return w.instance(0), w.saa_uniforms(0), w.mode_uniforms(0)


def fast_drop(i: int, k: int, n_saa: int, deep_fade: bool = False) -> SAAObjective:
    """Drop i of the fast planner's grid (seeds 7000 + i); with ``deep_fade`` a third of the devices
    lose 20–50 dB on both links."""
    inst, u, _ = grid_drop(i, n_saa, k=k, seed0=7000)
    if deep_fade:
        rng = np.random.default_rng(i)
        fade = np.where(rng.random(k) < 1 / 3, 10 ** rng.uniform(-5, -2, k), 1.0)
        inst = inst.replace(gain_ul=inst.gain_ul * fade, gain_dl=inst.gain_dl * fade)
    return SAAObjective(inst, u)


# 200 drops: K = 20 at the default N_SAA (the paper's round), K = 8, and K = 50 at N_SAA = 400;
# every fourth drop deep-faded
FAST_CASES = (
    [(i, 20, 1000) for i in range(100)]
    + [(i, 8, 1000) for i in range(100, 160)]
    + [(i, 50, 400) for i in range(160, 200)]
)

# K ∈ 2..6 with γ_max cut so that every γ vector is enumerable
SMALL_K_GAMMA_MAX = {2: 20, 3: 20, 4: 10, 5: 7, 6: 5}


def small_k_drop(i: int) -> SAAObjective:
    k = 2 + i % 5
    inst, u, _ = grid_drop(i, n_saa=200, k=k, preset=("paper-qwen", "paper-r1")[i % 2])
    return SAAObjective(inst.replace(gamma_max=SMALL_K_GAMMA_MAX[k]), u)


# --------------------------------------------------------------------------- the reference searches


def reference_plan(i: int, n_saa: int) -> list[int]:
    """The slow reference on drop i of the K = 20 grid: iterated local search from random points,
    the shipped search's plan (started from the mode baselines) and the old ±1 search's plan."""
    from multispin.optimize.baselines import baselines

    inst, u, mu = grid_drop(i, n_saa=n_saa)
    obj = SAAObjective(inst, u)
    base = baselines(inst, u, mu)
    ours = local_search(obj, {n: dp.draft_len for n, dp in base.items()})
    old = pm1_search(obj)
    ref = reference_search(obj, np.random.default_rng(i), restarts=3, kicks=3, starts=[ours.draft_len, old.draft_len])
    return ref.draft_len.tolist()


def shipped_plan(case: tuple[int, int, int]) -> list[int]:
    """The shipped search's plan on one drop of the fast planner's grid."""
    i, k, n_saa = case
    return local_search(fast_drop(i, k, n_saa, deep_fade=i % 4 == 3)).draft_len.tolist()


def exhaustive_plan(i: int) -> list[int]:
    return exhaustive_oracle(small_k_drop(i)).draft_len.tolist()


def _ref200(i: int) -> list[int]:
    return reference_plan(i, 200)


def _ref1000(i: int) -> list[int]:
    return reference_plan(i, 1000)


# name → (file, keys, function of one key); keys are drop indices (or fast-grid cases)
FILES = {
    "reference_n200": ("reference_k20_n_saa200.json", list(range(200)), _ref200),
    "reference_n1000": ("reference_k20_n_saa1000.json", list(range(300, 316)), _ref1000),
    "shipped_fast_grid": ("shipped_fast_grid.json", FAST_CASES, shipped_plan),
    "exhaustive": ("exhaustive_small_k.json", list(range(100)), exhaustive_plan),
}


def _key(key) -> str:
    return ",".join(map(str, key)) if isinstance(key, tuple) else str(key)


def load(name: str) -> dict[str, np.ndarray]:
    """The stored plans of one file: key (drop index, or "i,k,n_saa") → γ vector."""
    file = FILES[name][0]
    rows = json.loads((DATA / file).read_text())["plans"]
    return {key: np.asarray(g, dtype=np.int64) for key, g in rows.items()}


def stale_keys(name: str, keys, stored: dict[str, np.ndarray] | None = None) -> list[str]:
    """The keys among ``keys`` whose stored plan differs from the reference recomputed now."""
    stored = load(name) if stored is None else stored
    fn = FILES[name][2]
    return [_key(key) for key in keys if not np.array_equal(stored[_key(key)], np.asarray(fn(key)))]


def regenerate(name: str, workers: int = 2) -> None:
    file, keys, fn = FILES[name]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        plans = list(pool.map(fn, keys))
    DATA.mkdir(exist_ok=True)
    body = {
        "what": f"{name}: γ vectors of the reference plans (regenerate: tests/optimize/reference_plans.py)",
        "plans": {_key(key): g for key, g in zip(keys, plans)},
    }
    (DATA / file).write_text(json.dumps(body, indent=0, separators=(",", ":")) + "\n")
    print(f"{file}: {len(plans)} plans")


if __name__ == "__main__":
    for name in sys.argv[1:] or list(FILES):
        regenerate(name)
