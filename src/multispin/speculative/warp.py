"""Sampling policy (temperature, top-k, top-p) applied identically to draft and target logits,
and vocabulary alignment between two models.

Speculative sampling is exact only if the draft and the target distributions are warped by the
*same* policy; both sides call `warp` with one `SamplingParams`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from pydantic import ConfigDict, Field

from multispin.config import StrictConfig
from multispin.errors import ConfigError, VocabularyMismatchError

if TYPE_CHECKING:
    import torch


class SamplingFields(StrictConfig):
    """The sampling policy's fields, shared by every configuration that carries one."""

    temperature: float = Field(1.0, ge=0.0, description="softmax temperature; 0 = greedy")
    top_k: int = Field(0, ge=0, description="keep the k most likely tokens; 0 = off")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus mass in (0, 1]; 1 = off")

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)


class SamplingParams(SamplingFields):
    """Temperature 0 means greedy; top_k 0 means no top-k cut; top_p 1 means no nucleus cut."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def support_size(self, vocab_size: int) -> int:
        """Largest number of tokens a warped distribution can put mass on."""
        if self.greedy:
            return 1
        return min(self.top_k, vocab_size) if self.top_k else vocab_size


def warp(logits: np.ndarray | torch.Tensor, params: SamplingParams) -> np.ndarray:
    """`warp_tensor` as a numpy array (for the codecs and the device side, which hold numpy rows)."""
    return warp_tensor(logits, params).cpu().numpy()


def warp_tensor(logits: np.ndarray | torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Warped probabilities (float32, rows sum to 1) for logits of shape (..., V), a tensor on the
    logits' own device (the server's rows stay on the target's GPU until the verdict).

    Greedy puts all mass on the first arg-max. top-k keeps exactly k tokens (ties broken by
    index, so the support never exceeds k). top-p keeps the smallest prefix of the sorted
    distribution whose mass reaches top_p (the most likely token is always kept).
    """
    import torch  # here, not at the top: configs import this module, and torch takes seconds

    x = torch.as_tensor(logits).to(torch.float32)
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ConfigError(f"logits: need shape (..., V) with V >= 1 (got {tuple(x.shape)})")
    if params.greedy:
        out = torch.zeros_like(x)
        out.scatter_(-1, x.argmax(dim=-1, keepdim=True), 1.0)
        return out
    if params.temperature != 1.0:  # x / 1 is x: skip a pass over every row
        x = x / params.temperature
    vocab = x.shape[-1]
    if params.top_k and params.top_k < vocab:
        kth_idx = torch.topk(x, params.top_k, dim=-1, sorted=False).indices
        keep = torch.zeros_like(x, dtype=torch.bool).scatter_(-1, kth_idx, True)
        x = x.masked_fill(~keep, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if params.top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        mass_before = torch.cumsum(sorted_p, dim=-1) - sorted_p
        drop_sorted = mass_before >= params.top_p
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def shared_vocab_size(
    draft_valid: int, target_valid: int, draft_digest: str | None = None, target_digest: str | None = None
) -> int:
    """Number of leading token ids both models share.

    Models often emit more logits than their tokenizer has tokens (Qwen2.5: 151,936 or 152,064
    logits for 151,665 valid ids); both sides are cut to the valid ids. Different valid sizes, or
    different tokenizer digests, mean different vocabularies and cannot be verified against each
    other.
    """
    if draft_valid <= 0 or target_valid <= 0:
        raise ConfigError(f"vocab size: must be positive (draft {draft_valid}, target {target_valid})")
    if draft_valid != target_valid:
        raise VocabularyMismatchError(
            f"vocabulary: draft has {draft_valid} valid token ids, target has {target_valid}; "
            "a draft/target pair must share one tokenizer"
        )
    if draft_digest is not None and target_digest is not None and draft_digest != target_digest:
        raise VocabularyMismatchError(
            "vocabulary: draft and target tokenizers map ids to different tokens "
            f"(digest {draft_digest[:12]} vs {target_digest[:12]})"
        )
    return draft_valid


def align_logits(logits: np.ndarray | torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Cut logits of width >= vocab_size to the shared valid ids [0, vocab_size)."""
    import torch

    x = torch.as_tensor(logits)
    if x.shape[-1] < vocab_size:
        raise VocabularyMismatchError(f"logits: width {x.shape[-1]} is smaller than the shared vocabulary {vocab_size}")
    return x[..., :vocab_size]
