"""What the engine needs from language models.

A *pair* is one target model and one or more draft models, each sharing the target's tokenizer
or bringing its own (a `cross_drafts` entry: its distribution reaches the engine over the
target's ids, `multispin.models.cross_vocab`). The engine never
touches model internals: it calls `SequenceLM` (one sequence with its own KV cache, used by a
device for drafting) and `BatchedLM` (many sequences, one KV cache each, scored in one batched
forward pass, used by the server for verification). Backends implement both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from multispin.errors import ConfigError


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...


class SequenceLM(Protocol):
    """One sequence and its KV cache (a device's draft model)."""

    vocab_size: int  # logit width after alignment to the shared vocabulary

    @property
    def length(self) -> int:
        """Tokens currently held in the KV cache."""

    def reset(self) -> None:
        """Forget the sequence (empty cache)."""

    def extend(self, token_ids: Sequence[int]) -> np.ndarray:
        """Append tokens to the cache; return float32 logits (len(token_ids), vocab_size), row i
        predicting the token after token_ids[i]."""

    def rollback(self, length: int) -> None:
        """Truncate the cache to its first `length` tokens (no-op if already that short)."""


def next_logits(lm: SequenceLM, token_ids: Sequence[int]) -> np.ndarray:
    """Append tokens to `lm`; the (vocab_size,) logits of the token after the last. A model
    that can give that row cheaper than all of `extend`'s rows has ``extend_last`` (a draft of
    another vocabulary, `multispin.models.cross_vocab.CrossVocabLM`)."""
    last = getattr(lm, "extend_last", None)
    return last(token_ids) if last is not None else lm.extend(token_ids)[-1]


def last_rows(lm: BatchedLM, new_tokens: dict[int, Sequence[int]]) -> dict[int, np.ndarray]:
    """`extend_many`, keeping each sequence's last logits row only (through ``extend_many_last``
    where the model has it: a draft of another vocabulary gives that row cheaper than all rows)."""
    last = getattr(lm, "extend_many_last", None)
    if last is not None:
        return last(new_tokens)
    return {s: rows[-1] for s, rows in lm.extend_many(new_tokens).items()}


def device_rows(lm: BatchedLM, new_tokens: Mapping[int, Sequence[int]], last: dict[int, int] | None = None) -> dict:
    """`extend_many`, each sequence's logits left where the model computed them (a tensor on its
    device, through ``extend_many_on_device``) where the model can; numpy rows otherwise. With
    `last`, sequence s keeps only its last last[s] rows (a model with ``extend_many_on_device``
    computes no others: a prompt's prefill scores one row, not one per prompt token)."""
    on_device = getattr(lm, "extend_many_on_device", None)
    if on_device is not None:
        return on_device(new_tokens, last)
    rows = lm.extend_many(new_tokens)
    return {s: r[max(0, len(r) - last[s]) :] if last and s in last else r for s, r in rows.items()}


class BatchedLM(Protocol):
    """Many sequences, one KV cache each, scored together (the server's target model)."""

    vocab_size: int

    def open(self, seq_id: int) -> None: ...

    def close(self, seq_id: int) -> None: ...

    def length(self, seq_id: int) -> int: ...

    def extend_many(self, new_tokens: dict[int, Sequence[int]]) -> dict[int, np.ndarray]:
        """Append tokens to several sequences in ONE forward pass; return each sequence's logits
        (len(new_tokens[seq]), vocab_size)."""

    def rollback(self, seq_id: int, length: int) -> None: ...


class BatchedSequence:
    """One sequence of a `BatchedLM`, seen as a `SequenceLM`.

    Devices that hold the same draft module each get one of these over a shared `BatchedLM`, so
    a round's drafting steps can run for all of them in one padded forward pass
    (`multispin.runtime.round.roles.draft_all`); alone, it behaves exactly like a `SequenceLM`."""

    def __init__(self, batched: BatchedLM, seq_id: int):
        self.batched = batched
        self.seq_id = seq_id
        self.vocab_size = batched.vocab_size
        batched.open(seq_id)

    @property
    def length(self) -> int:
        return self.batched.length(self.seq_id)

    def reset(self) -> None:
        self.batched.close(self.seq_id)
        self.batched.open(self.seq_id)

    def extend(self, token_ids: Sequence[int]) -> np.ndarray:
        return self.batched.extend_many({self.seq_id: token_ids})[self.seq_id]

    def extend_last(self, token_ids: Sequence[int]) -> np.ndarray:
        return last_rows(self.batched, {self.seq_id: token_ids})[self.seq_id]

    def rollback(self, length: int) -> None:
        self.batched.rollback(self.seq_id, length)


@dataclass
class LoadedPair:
    """A resolved draft/target pair, ready for the engine."""

    name: str
    tokenizer: Any  # Tokenizer
    target: Any  # torch.nn.Module (Hugging Face causal LM)
    drafts: dict[str, Any]  # draft name (e.g. "q4g64") -> torch.nn.Module
    vocab_size: int  # shared valid token ids; logits are cut to this width
    eos_token_ids: tuple[int, ...] = ()
    use_chat_template: bool = False
    notes: dict[str, Any] = field(default_factory=dict)
    # drafts with a tokenizer of their own: draft name -> multispin.models.cross_vocab.CrossDraft
    cross_drafts: dict[str, Any] = field(default_factory=dict)
    # prompt prefills the device pools forked with this pair share (`models.prefill_store`), or None
    prompt_prefills: Any = None

    @property
    def default_draft(self) -> str:
        return next(iter(self.drafts))

    def check_drafts(self, names: Sequence[str], field_name: str = "drafts") -> list[str]:
        """`names` if every one is a draft of this pair, else a one-line ConfigError."""
        unknown = [n for n in names if n not in self.drafts]
        if unknown:
            raise ConfigError(
                f"{field_name}: unknown draft {unknown[0]!r} for pair {self.name} (allowed: {', '.join(self.drafts)})"
            )
        return list(names)
