"""multispin: multi-access speculative inference at the wireless edge.

The public API is `multispin.api`, re-exported here: `scenario` → `instance` → `plan` (γ,
baselines, certificate; `RoundPlan.decide` for modes and powers) → `evaluate`; `sweep` and `plot`
for a study over a grid with 95% intervals; `generate` and `testbed` run real models. The names
load on first use, so ``import multispin`` (and the CLI's start) stays fast.
"""

from multispin._version import __version__

__all__ = [
    "RoundPlan",
    "__version__",
    "capacity",
    "evaluate",
    "generate",
    "instance",
    "plan",
    "plot",
    "scenario",
    "sweep",
    "testbed",
]


def __getattr__(name: str):
    if name in __all__:
        from multispin import api

        return getattr(api, name)
    raise AttributeError(f"module 'multispin' has no attribute {name!r}")
