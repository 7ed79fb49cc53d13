"""multispin: multi-access speculative inference at the wireless edge.

The public API is :mod:`multispin.api`, re-exported here: :func:`scenario` → :func:`instance` →
:func:`plan` (γ, baselines, certificate; :meth:`RoundPlan.decide` for modes and powers) →
:func:`evaluate`; :func:`generate` and :func:`testbed` run real models. The names load on
first use, so ``import multispin`` (and the CLI's start) stays fast.
"""

from multispin._version import __version__

__all__ = ["RoundPlan", "__version__", "evaluate", "generate", "instance", "plan", "scenario", "testbed"]


def __getattr__(name: str):
    if name in __all__:
        from multispin import api

        return getattr(api, name)
    raise AttributeError(f"module 'multispin' has no attribute {name!r}")
