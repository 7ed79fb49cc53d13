"""Example user policies for `multispin testbed --policy own_policies:NAME`, `multispin demo
--policy own_policies:NAME` and `ms.evaluate` / `ms.sweep` / `ms.plan` (docs/own-policy.md).

Each has draft_lengths(view) -> one γ per device and modes(view, rejected) -> {device: "ul"|"dl"}.
"""

from __future__ import annotations

import math

import numpy as np

from multispin.optimize.plan import plan
from multispin.optimize.reactive import reactive


class AllDL:
    """The built-in all_dl, rebuilt from the protocol: γ from the built-in search (the one the
    built-in policies use where the policy runs) planning for DL corrections, and every rejected
    device corrected in DL mode."""

    def draft_lengths(self, view):
        return plan(
            view.instance, uniforms=view.uniforms, modes="all_dl", split=view.split, policy=view.draft_policy
        ).draft_len

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


class Bandit:
    """A learning draft-length rule: per device, UCB1 over the arms γ = 1 … min(γ_max, 8) (within the
    device's cap), rewarded after each round by the device's tokens per second of that round
    ((accepted + 1) / the round's latency, from ``view.accepted_before`` and
    ``view.latency_before_s``); the modes are the built-in adaptive ones (the reactive solver's
    optimal UL/DL split for the rejected set). Its state lives on the object across rounds; it
    draws no random numbers, so the same rounds give the same choices."""

    max_arm = 8
    exploration = 1.0

    def __init__(self):
        self.counts = {}  # device -> {γ: rounds drafted at γ}
        self.sums = {}  # device -> {γ: summed reward}
        self.chosen = {}  # device -> γ of the last round

    def _learn(self, view):
        if view.latency_before_s is None or view.latency_before_s <= 0:
            return
        for d, gamma in self.chosen.items():
            if gamma > 0 and d in view.accepted_before:
                reward = (view.accepted_before[d] + 1) / view.latency_before_s
                self.counts.setdefault(d, {}).setdefault(gamma, 0)
                self.counts[d][gamma] += 1
                self.sums.setdefault(d, {}).setdefault(gamma, 0.0)
                self.sums[d][gamma] += reward

    def _pick(self, d, cap):
        arms = list(range(1, min(self.max_arm, int(cap)) + 1))
        if not arms:
            return 0
        counts, sums = self.counts.get(d, {}), self.sums.get(d, {})
        untried = [a for a in arms if counts.get(a, 0) == 0]
        if untried:
            return untried[0]
        total = sum(counts[a] for a in arms)
        means = {a: sums[a] / counts[a] for a in arms}
        scale = max(means.values())
        return max(arms, key=lambda a: means[a] + self.exploration * scale * math.sqrt(2 * math.log(total) / counts[a]))

    def draft_lengths(self, view):
        self._learn(view)
        self.chosen = {d: self._pick(d, cap) for d, cap in zip(view.devices, view.caps)}
        return [self.chosen[d] for d in view.devices]

    def modes(self, view, rejected):
        pos = {d: i for i, d in enumerate(view.devices)}
        mask = np.zeros(len(view.devices), dtype=bool)
        mask[[pos[d] for d in rejected]] = True
        decision = reactive(mask, view.instance, split=view.split, modes="optimal")
        return {d: decision.link(pos[d]) for d in rejected}
