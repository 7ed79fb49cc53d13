"""Acceptance statistics with vLLM's definitions, accumulated over rounds."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from multispin.speculative.verify import DEFAULT_GAMMA_MAX


@dataclass
class AcceptanceStats:
    """Counts per device or per run.

    - acceptance rate at position i = drafts whose token i was accepted / drafts (rounds with γ > 0)
    - mean acceptance length = 1 + accepted tokens / drafts (the +1 is the bonus/correction token)
    """

    gamma_max: int = DEFAULT_GAMMA_MAX
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_position: np.ndarray = field(default=None)  # type: ignore[arg-type]  # filled in __post_init__
    drafts_per_position: np.ndarray = field(default=None)  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        if self.accepted_per_position is None:
            self.accepted_per_position = np.zeros(self.gamma_max, dtype=np.int64)
        if self.drafts_per_position is None:
            self.drafts_per_position = np.zeros(self.gamma_max, dtype=np.int64)

    def record(self, draft_len: int, num_accepted: int) -> None:
        if draft_len == 0:
            return
        self.num_drafts += 1
        self.num_draft_tokens += draft_len
        self.num_accepted_tokens += num_accepted
        self.accepted_per_position[:num_accepted] += 1
        self.drafts_per_position[:draft_len] += 1

    @property
    def per_position_rate(self) -> np.ndarray:
        """Accepted at position i / drafts (vLLM); positions never drafted give 0."""
        return self.accepted_per_position / max(self.num_drafts, 1)

    @property
    def mean_acceptance_length(self) -> float:
        return 1.0 + self.num_accepted_tokens / max(self.num_drafts, 1)

    @property
    def token_acceptance_rate(self) -> float:
        return self.num_accepted_tokens / max(self.num_draft_tokens, 1)

    def to_dict(self) -> dict:
        used = int(np.max(np.flatnonzero(self.drafts_per_position), initial=-1)) + 1
        return {
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "mean_acceptance_length": self.mean_acceptance_length,
            "token_acceptance_rate": self.token_acceptance_rate,
            "per_position_rate": self.per_position_rate[:used].tolist(),
        }
