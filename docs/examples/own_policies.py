"""Example user policies for `multispin testbed --policy own_policies:NAME` (docs/own-policy.md).

Each has draft_lengths(view) -> one γ per device and modes(view, rejected) -> {device: "ul"|"dl"}.
"""

from __future__ import annotations

import numpy as np

from multispin.optimize.plan import plan


class AllDL:
    """The built-in all_dl, rebuilt from the protocol: γ from the shipped search planning for DL
    corrections, and every rejected device corrected in DL mode."""

    def draft_lengths(self, view):
        return plan(view.instance, uniforms=view.uniforms, modes="all_dl", split=view.split, policy="fast").draft_len

    def modes(self, view, rejected):
        return {d: "dl" for d in rejected}


class Threshold:
    """A fixed γ = 4 (within each cap), and UL for a device whose uplink gain is above the round's
    median, DL otherwise (a simple "UL if my channel is good" mode rule)."""

    gamma = 4

    def draft_lengths(self, view):
        return [min(self.gamma, int(c)) for c in view.caps]

    def modes(self, view, rejected):
        median = float(np.median(view.gain_ul))
        pos = {d: i for i, d in enumerate(view.devices)}
        return {d: "ul" if view.gain_ul[pos[d]] > median else "dl" for d in rejected}


class Hostile:
    """Returns a draft length out of range: refused in one line, the run never uses it."""

    def draft_lengths(self, view):
        return [float("nan")] * len(view.devices)

    def modes(self, view, rejected):
        return {d: "dl" for d in rejected}
