"""Your own policy in the running system (docs/own-policy.md): a draft-length rule and a mode rule,
each a Python callable, that the round planner calls instead of its own, beside the built-in
policies on the same prompts, channels and seeds.

The protocol (duck-typed; `UserPolicy` states it): an object with

- ``draft_lengths(view: RoundView) -> Sequence[int]``: γ for each of ``view.devices``, each an
  integer in [0, view.caps[i]];
- ``modes(view: RoundView, rejected: Sequence[int]) -> Mapping[int, str]``: ``"ul"`` or ``"dl"``
  for each rejected device id, and for no other.

Passed as ``module:attr`` (``--policy mypolicies:Threshold``; a class is instantiated with no
arguments) or as the object itself in Python. Exactness does not depend on the policy: it only
picks γ and modes, and the verification is the same. A policy's answer is checked before it is
used; a γ out of range, a NaN, a mode for a device that was not rejected is a one-line error
naming the policy and the round.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, cast, runtime_checkable

import numpy as np

from multispin.errors import ConfigError
from multispin.system.instance import Instance
from multispin.vocabulary import DRAFT_POLICIES, LINK_MODES, LinkMode


@dataclass(frozen=True)
class RoundView:
    """What a policy sees of one round, for its active devices in order (arrays of len(devices)).

    ``gain_ul``/``gain_dl``: the channel power gains the planner sees (the estimate under pilot
    noise or mobility, else the true channel); ``alpha``: the acceptance estimates; ``caps``: the
    largest γ each device may draft (its remaining budget − 1, and γ_max); ``rejected_before``:
    device ids rejected in the previous round. ``instance`` and ``uniforms``: the optimiser's
    `Instance` of the round and its SAA uniforms, for a policy that calls `multispin.optimize.plan`
    (e.g. to reuse the built-in search under its own mode rule), with ``draft_policy``, the search
    the built-in policies plan with there. What the last round gave, for a policy that learns:
    ``accepted_before`` (device id -> drafted tokens it accepted) and ``latency_before_s`` (the
    round's latency on the scenario clock, None before the first round)."""

    round: int
    devices: tuple[int, ...]
    gain_ul: np.ndarray
    gain_dl: np.ndarray
    alpha: np.ndarray
    caps: np.ndarray
    gamma_max: int
    rejected_before: tuple[int, ...]
    instance: Instance
    uniforms: np.ndarray
    split: str
    accepted_before: Mapping[int, int] = field(default_factory=dict)
    latency_before_s: float | None = None
    draft_policy: str = "fast"


@runtime_checkable
class UserPolicy(Protocol):
    def draft_lengths(self, view: RoundView) -> Sequence[int]: ...

    def modes(self, view: RoundView, rejected: Sequence[int]) -> Mapping[int, str]: ...


def user_policy_label(policy: object) -> str:
    return getattr(policy, "name", None) or type(policy).__name__


def _import_from_here(module: str):
    """Import ``module``, also from the working folder (as ``python -m`` would find it: the
    `multispin` command's own path does not hold the folder it runs in)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module.split(".")[0] or "" in sys.path or os.getcwd() in sys.path:
            raise
    sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(os.getcwd())


def load_policy(spec: str | object) -> UserPolicy:
    """A policy from ``module:attr`` (a class is instantiated), or the object itself; refused in
    one line when it lacks the protocol's two methods."""
    obj = spec
    if isinstance(spec, str):
        module, _, attr = spec.partition(":")
        if not module or not attr:
            # the draft-length searches were once spelt --policy: name the flag they have now
            hint = f"; {spec!r} is a draft-length search: --draft-policy {spec}" if spec in DRAFT_POLICIES else ""
            raise ConfigError(f"policy: {spec!r}: a user policy is module:attr (e.g. mypolicies:Threshold){hint}")
        try:
            obj = getattr(_import_from_here(module), attr)
        except ImportError as exc:
            raise ConfigError(f"policy: cannot import {module!r} ({exc}); is it on PYTHONPATH?") from None
        except AttributeError:
            raise ConfigError(f"policy: module {module!r} has no {attr!r}") from None
        if isinstance(obj, type):
            obj = obj()
    missing = [m for m in ("draft_lengths", "modes") if not callable(getattr(obj, m, None))]
    if missing:
        raise ConfigError(
            f"policy: {user_policy_label(obj)} lacks {' and '.join(missing)} (a policy has draft_lengths(view) and "
            "modes(view, rejected); docs/own-policy.md)"
        )
    return cast(UserPolicy, obj)  # the two methods are there; their answers are checked per round


def checked_draft_lengths(policy: UserPolicy, view: RoundView) -> np.ndarray:
    """The policy's γ, refused in one line unless one integer in [0, cap] per device."""
    where = f"policy {user_policy_label(policy)}, round {view.round}"
    try:
        raw = list(policy.draft_lengths(view))
    except TypeError as exc:
        raise ConfigError(f"{where}: draft_lengths must return one γ per device ({exc})") from None
    if len(raw) != len(view.devices):
        raise ConfigError(f"{where}: draft_lengths returned {len(raw)} values for {len(view.devices)} devices")
    out = np.zeros(len(raw), dtype=np.int64)
    for i, (d, g) in enumerate(zip(view.devices, raw)):
        ok = isinstance(g, (int, np.integer)) and not isinstance(g, bool)
        if not ok and isinstance(g, (float, np.floating)) and math.isfinite(g) and float(g).is_integer():
            ok = True
        if not ok or not 0 <= int(g) <= int(view.caps[i]):
            raise ConfigError(
                f"{where}: draft length of device {d} must be an integer in [0, {int(view.caps[i])}] (got {g!r})"
            )
        out[i] = int(g)
    return out


def checked_modes(policy: UserPolicy, view: RoundView, rejected: Sequence[int]) -> dict[int, LinkMode]:
    """The policy's modes, refused in one line unless "ul"/"dl" for exactly the rejected devices."""
    where = f"policy {user_policy_label(policy)}, round {view.round}"
    raw = policy.modes(view, tuple(rejected))
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: modes must return a mapping device id -> 'ul' or 'dl' (got {type(raw).__name__})")
    extra = sorted(set(raw) - set(rejected))
    lacking = sorted(set(rejected) - set(raw))
    if extra or lacking:
        what = f"device(s) {extra} were not rejected" if extra else f"no mode for rejected device(s) {lacking}"
        raise ConfigError(f"{where}: modes: {what} (rejected: {sorted(rejected)})")
    out: dict[int, LinkMode] = {}
    for d, m in raw.items():
        if m not in LINK_MODES:
            raise ConfigError(f"{where}: mode of device {d} must be 'ul' or 'dl' (got {m!r})")
        out[int(d)] = cast(LinkMode, str(m))
    return out
