"""A draft model with its own tokenizer, presented to the engine as a `SequenceLM` over the
*target's* ids, so the device, the codecs and both correction modes run unchanged.

The adapter holds a `DraftContext` (the draft-token spelling of the target tokens it was fed)
and the draft's own `SequenceLM`. Each time logits are asked for, the draft's KV cache is rolled
back to the longest common prefix of what it holds and what the context now spells, the rest is
fed, and the draft's next-token logits are mapped to the target's ids by the `VocabMap`
(the intersection I keeps its values, every other id gets -inf). Warped by the sampling policy,
that is the draft's distribution restricted to I and renormalised: the proposal q.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from multispin.errors import ProtocolError
from multispin.models.base import BatchedLM, BatchedSequence, SequenceLM, last_rows, next_logits
from multispin.models.draft_context import DEFAULT_LOOKBACK, DraftContext
from multispin.models.vocab_map import TokenTable, VocabMap, token_table


class CrossVocabLM:
    """`SequenceLM` over the target's vocabulary, backed by a draft of another vocabulary."""

    def __init__(
        self,
        draft_lm: SequenceLM,
        draft: TokenTable,
        target: TokenTable,
        vocab: VocabMap | None = None,
        lookback: int = DEFAULT_LOOKBACK,
    ):
        self.draft_lm = draft_lm
        self.vocab = vocab or VocabMap.build(draft, target)
        if self.vocab.draft_size != draft_lm.vocab_size:
            raise ProtocolError(
                f"draft: the model has {draft_lm.vocab_size} logits but its tokenizer {self.vocab.draft_size} tokens"
            )
        self.vocab_size = self.vocab.target_size
        self.context = DraftContext(draft, target, self.vocab, lookback)
        self._fed: list[int] = []  # draft ids in the draft model's cache
        self.reset()

    @property
    def length(self) -> int:
        return len(self.context.target)

    def reset(self) -> None:
        self.context.reset()
        self.draft_lm.reset()
        self._fed = []

    def rollback(self, length: int) -> None:
        self.context.rollback(length)  # the draft cache follows at the next logits

    def extend_last(self, token_ids: Sequence[int]) -> np.ndarray:
        """Append target tokens; return the (V_target,) logits of the token after the last."""
        if len(token_ids) == 0:
            raise ProtocolError("extend: need at least one token")
        self.context.extend(token_ids)
        return self.vocab.target_logits(self._sync())

    def extend(self, token_ids: Sequence[int]) -> np.ndarray:
        """Append target tokens; row i is the logits after token_ids[i], as the draft reads that
        prefix (exactly what `extend_last` would give after it). One draft pass over the new
        draft tokens gives every row whose prefix ends on a draft-token boundary; each other
        prefix (a target token that ends inside a draft token) takes a short pass of its own."""
        if len(token_ids) == 0:
            raise ProtocolError("extend: need at least one token")
        states = []
        for t in token_ids:  # the draft sequence of every prefix
            self.context.extend([t])
            states.append(list(self.context.draft))
        final = states[-1]
        rows: list[np.ndarray | None] = [None] * len(states)
        start = min(_common_prefix(self._fed, final), len(final) - 1, *(len(s) - 1 for s in states if s))
        if final and start >= 0:
            self.draft_lm.rollback(start)
            pass_rows = self.draft_lm.extend(final[start:])
            self._fed = list(final)
            for i, s in enumerate(states):
                if len(s) > start and s == final[: len(s)]:
                    rows[i] = pass_rows[len(s) - start - 1]
        for i, s in enumerate(states):
            if rows[i] is None:  # off the final sequence's boundaries (or nothing to read)
                rows[i] = self._logits_after(s)
        if self._fed != final:
            self._logits_after(final)
        return np.stack([self.vocab.target_logits(r) for r in rows])

    def _logits_after(self, want: list[int]) -> np.ndarray:
        """The draft's logits after the draft sequence `want`, its cache left holding `want`."""
        feed = self._roll_back_for(want)
        if feed is None:
            return self._no_preference()
        logits = next_logits(self.draft_lm, feed)  # one row: the head runs on the last position only
        self._fed = list(want)
        return logits

    def _roll_back_for(self, want: list[int]) -> list[int] | None:
        """Roll the draft cache back to the longest common prefix of what it holds and `want`
        (at least one token is fed again, for its row); the draft tokens still to feed, or None
        when `want` is empty."""
        if not want:
            return None
        common = min(_common_prefix(self._fed, want), len(want) - 1)
        self.draft_lm.rollback(common)
        return list(want[common:])

    def _no_preference(self) -> np.ndarray:
        """Nothing the draft can read (only unmapped special tokens): uniform logits."""
        self.draft_lm.reset()
        self._fed = []
        return np.zeros(self.vocab.draft_size, dtype=np.float32)

    def _sync(self) -> np.ndarray:
        """Bring the draft cache to the context's draft sequence; the draft's last logits row."""
        return self._logits_after(self.context.draft)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


@dataclass(frozen=True)
class CrossDraft:
    """What a pair keeps for a draft of another vocabulary: both token tables and their map."""

    draft_table: TokenTable
    target_table: TokenTable
    vocab: VocabMap

    @classmethod
    def between(cls, draft_tokenizer: Any, target_tokenizer: Any) -> CrossDraft:
        draft, target = token_table(draft_tokenizer), token_table(target_tokenizer)
        return cls(draft, target, VocabMap.build(draft, target))

    def wrap(self, draft_lm: SequenceLM) -> CrossVocabLM:
        """`draft_lm` (over the draft's ids) as a SequenceLM over the target's ids."""
        return CrossVocabLM(draft_lm, self.draft_table, self.target_table, self.vocab)

    def batched(self, draft: BatchedLM) -> CrossVocabBatchedLM:
        """A BatchedLM over the target's ids on `draft` (a BatchedLM over the draft's ids): the
        sequences' drafting steps run in one padded forward of the draft model."""
        return CrossVocabBatchedLM(self, draft)


class CrossVocabBatchedLM:
    """`BatchedLM` over the target's ids for devices that share a draft of another vocabulary.

    Each sequence is a `CrossVocabLM` (its own draft-token context) over one sequence of the
    shared draft `BatchedLM`. `extend_many_last`, the drafting step, re-spells every sequence's
    context, rolls each draft cache back, and feeds what each still needs in one padded forward
    (`last_rows`); `extend_many` (all rows, rare) runs sequence by sequence."""

    def __init__(self, cross: CrossDraft, draft: BatchedLM):
        self.cross = cross
        self.draft = draft
        self.vocab_size = cross.vocab.target_size
        self._seqs: dict[int, CrossVocabLM] = {}

    def open(self, seq_id: int) -> None:
        self._seqs[seq_id] = self.cross.wrap(BatchedSequence(self.draft, seq_id))

    def close(self, seq_id: int) -> None:
        if self._seqs.pop(seq_id, None) is not None:
            self.draft.close(seq_id)

    def length(self, seq_id: int) -> int:
        return self._seqs[seq_id].length

    def rollback(self, seq_id: int, length: int) -> None:
        self._seqs[seq_id].rollback(length)

    def extend_many(self, new_tokens: dict[int, Sequence[int]]) -> dict[int, np.ndarray]:
        return {s: self._seqs[s].extend(t) for s, t in new_tokens.items() if len(t)}

    def extend_many_last(self, new_tokens: dict[int, Sequence[int]]) -> dict[int, np.ndarray]:
        rows, feeds, wants = {}, {}, {}
        for s, toks in new_tokens.items():
            if not len(toks):
                continue
            seq = self._seqs[s]
            seq.context.extend(toks)
            want = list(seq.context.draft)
            feed = seq._roll_back_for(want)
            if feed is None:
                rows[s] = seq.vocab.target_logits(seq._no_preference())
            else:
                feeds[s], wants[s] = feed, want
        for s, row in last_rows(self.draft, feeds).items():  # one forward for every sequence
            seq = self._seqs[s]
            seq._fed = wants[s]
            rows[s] = seq.vocab.target_logits(row)
        return rows
