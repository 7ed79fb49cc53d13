"""Test doubles of the runtime's policies: fixed choices a test can state in one line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class FixedDraftLengths:
    """A given γ per device id (`multispin.runtime.round.local.UniformDraftLength` gives one γ to all)."""

    draft_lens: dict[int, int]

    def __call__(self, round_idx: int, active: Sequence[int]) -> dict[int, int]:
        return {d: self.draft_lens[d] for d in active}
