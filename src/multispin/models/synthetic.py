"""Synthetic order-2 Markov "language models" for exactness tests: no torch, microseconds a call.

Logits depend on the last two tokens through a seeded table, so the law of every emitted
token can be computed exactly by enumeration and compared with what the engine produces. The
draft table is the target table plus seeded noise (acceptance between 0 and 1). Both classes
implement the engine's `SequenceLM` / `BatchedLM` protocols.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MarkovTable:
    """logits[a, b] = next-token logits after tokens (a, b); index V stands for 'no token'."""

    logits: np.ndarray  # (V+1, V+1, V)

    @property
    def vocab_size(self) -> int:
        return int(self.logits.shape[-1])

    def next_logits(self, prefix: Sequence[int]) -> np.ndarray:
        v = self.vocab_size
        a = prefix[-2] if len(prefix) >= 2 else v
        b = prefix[-1] if len(prefix) >= 1 else v
        return self.logits[a, b]


def make_tables(
    vocab_size: int, seed: int, scale: float = 2.0, draft_noise: float = 1.0
) -> tuple[MarkovTable, MarkovTable]:
    """(target, draft) tables; larger draft_noise means lower acceptance."""
    rng = np.random.default_rng(seed)
    shape = (vocab_size + 1, vocab_size + 1, vocab_size)
    target = rng.normal(size=shape) * scale
    draft = target + rng.normal(size=shape) * draft_noise
    return MarkovTable(target.astype(np.float32)), MarkovTable(draft.astype(np.float32))


class MarkovSequenceLM:
    """SequenceLM over a MarkovTable (the 'cache' is the token list itself)."""

    def __init__(self, table: MarkovTable):
        self.table = table
        self.vocab_size = table.vocab_size
        self._tokens: list[int] = []

    @property
    def length(self) -> int:
        return len(self._tokens)

    def reset(self) -> None:
        self._tokens = []

    def extend(self, token_ids: Sequence[int]) -> np.ndarray:
        rows = []
        for tok in token_ids:
            self._tokens.append(int(tok))
            rows.append(self.table.next_logits(self._tokens))
        return np.stack(rows)

    def rollback(self, length: int) -> None:
        del self._tokens[length:]


class MarkovBatchedLM:
    """BatchedLM over a MarkovTable: one token list per sequence."""

    def __init__(self, table: MarkovTable):
        self.table = table
        self.vocab_size = table.vocab_size
        self._seqs: dict[int, MarkovSequenceLM] = {}

    def open(self, seq_id: int) -> None:
        self._seqs[seq_id] = MarkovSequenceLM(self.table)

    def close(self, seq_id: int) -> None:
        self._seqs.pop(seq_id, None)

    def length(self, seq_id: int) -> int:
        return self._seqs[seq_id].length

    def extend_many(self, new_tokens: dict[int, Sequence[int]]) -> dict[int, np.ndarray]:
        return {s: self._seqs[s].extend(toks) for s, toks in new_tokens.items() if len(toks)}

    def rollback(self, seq_id: int, length: int) -> None:
        self._seqs[seq_id].rollback(length)
