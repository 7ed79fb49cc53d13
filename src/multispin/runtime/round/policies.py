"""The policies a run compares, by name (one vocabulary for the CLI, the API and every JSON).

The names are the optimiser's baseline names (``all_ul``, ``all_dl``, ``random``), plus
``adaptive`` (the optimiser's modes) and ``target_only`` (no drafting). Kept free of heavy imports:
the command line lists them in its help.
"""

from __future__ import annotations

from multispin.errors import ConfigError

# policy -> its mode rule; the names are the optimiser's baseline names (all_ul in the CLI, the API
# and every JSON alike)
POLICIES = {"adaptive": "optimal", "all_ul": "all_ul", "all_dl": "all_dl", "random": "random",
            "target_only": "optimal"}  # target_only drafts nothing, so its mode rule never acts
TARGET_ONLY = "target_only"


def policy_spelling(name):
    """The one vocabulary's spelling of a policy name: the hyphenated names of earlier versions
    (``all-ul``, ``target-only``) still work, as hidden aliases."""
    return name.replace("-", "_") if isinstance(name, str) else name


def policy_name(name: str) -> str:
    """``name`` (any spelling, `policy_spelling`) as a policy of POLICIES, or a ConfigError
    naming the allowed values."""
    canon = policy_spelling(name)
    if canon not in POLICIES:
        raise ConfigError(f"policy: unknown value {name!r} (allowed: {', '.join(POLICIES)})")
    return canon
