"""Batched verification of a ragged batch: K devices, each with its own draft length (0 allowed),
in one call.

Layout (as in vLLM's rejection sampler): the drafts of all devices are flattened along one token
axis with cumulative counts `cu[k] .. cu[k+1]`; device k owns γ_k + 1 target rows
`cu[k] + k .. cu[k+1] + k + 1` (p_1..p_{γ_k+1}, the last for the bonus token). The server only
needs the scalars q_i(x_i) for the acceptance test; the full q_j moves only after a rejection.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from multispin.errors import ConfigError, ProtocolError
from multispin.speculative.sampling import sample_rows
from multispin.speculative.target_rows import WarpedRows, as_rows

DEFAULT_GAMMA_MAX = 20


@dataclass(frozen=True)
class RaggedDrafts:
    """All devices' drafts of one round, flattened along one token axis."""

    draft_lens: np.ndarray  # (K,) int, γ_k
    token_ids: np.ndarray  # (Σγ,) int, x_i
    draft_probs: np.ndarray  # (Σγ,) float, q_i(x_i) > 0

    @classmethod
    def from_lists(cls, tokens: list[list[int]], probs: list[list[float]]) -> RaggedDrafts:
        lens = np.array([len(t) for t in tokens], dtype=np.int64)
        flat_t = np.array([x for t in tokens for x in t], dtype=np.int64)
        flat_q = np.array([x for q in probs for x in q], dtype=np.float64)
        return cls(lens, flat_t, flat_q)

    @property
    def num_devices(self) -> int:
        return int(self.draft_lens.shape[0])

    @property
    def cu(self) -> np.ndarray:
        """Cumulative draft counts, shape (K+1,), cu[0] = 0."""
        return np.concatenate([[0], np.cumsum(self.draft_lens)]).astype(np.int64)

    @property
    def target_row_start(self) -> np.ndarray:
        """First target row of each device, shape (K+1,): device k owns rows [s[k], s[k+1])."""
        return self.cu + np.arange(self.num_devices + 1)

    def validate(self, vocab_size: int, gamma_max: int = DEFAULT_GAMMA_MAX) -> None:
        lens = self.draft_lens
        if lens.ndim != 1 or (lens.size and (lens.min() < 0 or lens.max() > gamma_max)):
            bad = lens[(lens < 0) | (lens > gamma_max)] if lens.ndim == 1 else lens
            raise ConfigError(f"draft_len: must be in 0..{gamma_max} (got {bad.tolist()})")
        n = int(lens.sum())
        if self.token_ids.shape != (n,) or self.draft_probs.shape != (n,):
            raise ProtocolError(
                f"drafts: need {n} token ids and {n} draft probabilities "
                f"(got {self.token_ids.shape[0]} and {self.draft_probs.shape[0]})"
            )
        check_draft("drafts", self.token_ids.tolist(), self.draft_probs.tolist(), vocab_size)


# a decoded q̂ sums to 1 in float32 at best: a drafted token's q̂(x) may exceed 1 by rounding
Q_SLACK = 1e-6


def check_draft(where: str, tokens: Sequence[int], q_at_tokens: Sequence[float], vocab_size: int) -> None:
    """The one check of drafted tokens and their q̂(x_i): ids in [0, V), each q̂(x_i) a finite
    probability in (0, 1] (a drafted token has q > 0). Plain Python: a draft holds γ ≤ a few
    dozen values, which numpy's per-call cost would outweigh (the wire checks every DRAFT)."""
    if len(tokens) != len(q_at_tokens):
        raise ProtocolError(f"{where}: {len(tokens)} token ids but {len(q_at_tokens)} q̂(x_i) values")
    top = vocab_size - 1
    for i, t in enumerate(tokens):
        if not 0 <= t <= top:
            raise ProtocolError(f"{where}.tokens[{i}]: {t} is not a token id in [0, {top}]")
    for i, q in enumerate(q_at_tokens):
        if not 0.0 < q <= 1.0 + Q_SLACK:  # False for NaN too
            raise ProtocolError(
                f"{where}.q: every q̂(x_i) must be a finite probability in (0, 1] (got {q!r} at position {i})"
            )


@dataclass(frozen=True)
class VerifyResult:
    """Per-device verdicts of one round."""

    num_accepted: np.ndarray  # (K,) accepted draft tokens
    rejected: np.ndarray  # (K,) bool: device k joins the rejected set R
    bonus_token: np.ndarray  # (K,) bonus id from p_{γ+1}; -1 where rejected
    rejection_row: np.ndarray  # (K,) target row p_j of the first rejection; -1 where accepted

    @property
    def rejection_position(self) -> np.ndarray:
        """0-based index j of the first rejected draft token; -1 where all were accepted."""
        return np.where(self.rejected, self.num_accepted, -1)

    @property
    def rejected_devices(self) -> np.ndarray:
        return np.flatnonzero(self.rejected)


def verify(
    drafts: RaggedDrafts,
    target_probs: np.ndarray | WarpedRows,
    accept_uniforms: np.ndarray,
    bonus_uniforms: np.ndarray,
    gamma_max: int = DEFAULT_GAMMA_MAX,
) -> VerifyResult:
    """Speculative acceptance test for every device at once.

    Accept x_i while r_i <= min(1, p_i(x_i) / q_i(x_i)), written r_i * q_i <= p_i(x_i) to avoid
    a division. Devices with every draft accepted (γ_k = 0 included) get a bonus token sampled
    from p_{γ_k+1} with their bonus uniform; the others are left for the correction step.
    `target_probs`: the warped rows (an array), or a `TargetRows` that warps only the rows the
    verdict reads.
    """
    k_dev = drafts.num_devices
    rows = as_rows(target_probs)
    drafts.validate(rows.vocab_size, gamma_max)
    n = int(drafts.draft_lens.sum())
    if rows.num_rows != n + k_dev:
        raise ProtocolError(f"target_probs: need Σγ + K = {n + k_dev} rows (got {rows.num_rows})")
    if accept_uniforms.shape != (n,) or bonus_uniforms.shape != (k_dev,):
        raise ValueError(f"uniforms: need {n} acceptance and {k_dev} bonus uniforms")

    # Position by position, over the devices that have accepted every token so far: a row past
    # a device's first rejection is never read (with lazily warped rows, never normalised).
    num_accepted = np.zeros(k_dev, dtype=np.int64)
    testing = drafts.draft_lens > 0
    for j in range(int(drafts.draft_lens.max(initial=0))):
        devs = np.flatnonzero(testing & (drafts.draft_lens > j))
        if devs.size == 0:
            break
        flat = drafts.cu[devs] + j
        p_at_x = rows.prob_at(drafts.target_row_start[devs] + j, drafts.token_ids[flat])
        accepted = accept_uniforms[flat] * drafts.draft_probs[flat] <= p_at_x
        num_accepted[devs[accepted]] += 1
        testing[devs[~accepted]] = False
    rejected = num_accepted < drafts.draft_lens

    last_row = drafts.target_row_start[:-1] + num_accepted  # p_{j} on rejection, p_{γ+1} otherwise
    bonus = np.full(k_dev, -1, dtype=np.int64)
    ok = ~rejected
    if ok.any():
        # sampled where the rows are (the target's device); only the tokens come back
        bonus[ok] = sample_rows(rows.warped(last_row[ok]), bonus_uniforms[ok]).cpu().numpy()
    rejection_row = np.where(rejected, last_row, -1)
    return VerifyResult(num_accepted, rejected, bonus, rejection_row)
