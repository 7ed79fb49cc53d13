"""Whether a measured profile fits the scenario it is applied to.

An acceptance profile (``multispin measure --out``) or a compute profile (``multispin profile
--out``) is measured on one model pair; applied to a scenario of another vocabulary (the tiny
pair's V = 256 on paper-qwen's V = 151,665) its numbers describe other models, so it is refused,
or applied with a warning when forced. A compute fit that explains little of the timings
(R² < `MIN_R2`) is applied with a warning.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from multispin.datafile import read_json_object
from multispin.errors import ConfigError

log = logging.getLogger(__name__)

MIN_R2 = 0.5


def read_profile(source: str | Path | dict, what: str) -> dict:
    """The profile as a dict: ``source`` itself, or the JSON file it names (errors name ``what``)."""
    if isinstance(source, dict):
        return source
    p = Path(source)
    if not p.is_file():
        raise ConfigError(f"{what}: no such file {str(p)!r}")
    try:
        return read_json_object(p)
    except ConfigError as exc:  # the one loader's line, with the flag or field it came through
        raise ConfigError(f"{what}: {exc}") from None


def profile_vocab_size(profile: dict) -> int | None:
    """The vocabulary the profile was measured with: its ``vocab_size``, else that of the
    registered pair it names, else ``None`` (a hand-written profile: nothing to compare)."""
    v = profile.get("vocab_size")
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    # lazy: keeps models/ (and its download code) off the CLI start-up path
    from multispin.models.registry import REGISTERED  # noqa: PLC0415

    info = REGISTERED.get(str(profile.get("pair")))
    return info.vocab_size if info is not None else None


def check_vocabulary(profile: dict, vocab_size: int, scenario_name: str, what: str, force: bool = False) -> None:
    """Refuse (or, with ``force``, warn about) a profile measured on another vocabulary."""
    v = profile_vocab_size(profile)
    if v is None or v == vocab_size:
        return
    pair = profile.get("pair")
    on = f"pair {pair!r} (V = {v:,})" if pair else f"V = {v:,}"
    msg = f"{what}: measured on {on}, but scenario {scenario_name!r} has payload.vocab_size = {vocab_size:,}"
    if force:
        log.warning("%s; applied anyway (forced)", msg)
        return
    raise ConfigError(f"{msg}; give a profile of the scenario's pair, or force it (--force) to apply it anyway")


def warn_poor_fit(profile: dict, where: Any = "compute profile") -> bool:
    """Warn when a compute fit's R² is below `MIN_R2`; True when it warned."""
    r2 = profile.get("r2")
    if not isinstance(r2, (int, float)) or r2 >= MIN_R2:
        return False
    log.warning(
        "%s: the fit of T_ver explains little of the timings (R² = %.3f < %.1f); time more "
        "repeats (--repeats) or on an idle host before relying on it",
        where,
        r2,
        MIN_R2,
    )
    return True
