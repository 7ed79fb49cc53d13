"""A draft model's own token sequence for a target-token sequence, across tokenizers (pure).

A device whose draft tokenizer differs from the target's commits *target* tokens (accepted
drafts, corrections, bonus tokens). Its draft model must read the same text in its own tokens.
`DraftContext` keeps that sequence: the target tokens' bytes are re-encoded with the draft
tokenizer, but only from a short look-back before the change (``lookback`` draft tokens), so a
merge across the boundary ("hel" + "lo" -> "hello") comes out as the draft tokenizer would
write it, and a round costs a few tokens of re-encoding whatever the text's length.

Special tokens (chat markers) are barriers: one whose content the draft vocabulary also has
becomes that draft token, any other is dropped, and text is never re-encoded across one.
Bytes that are not valid UTF-8 (a target token that ends mid-character) are spelt with the
draft's single-byte tokens until the character completes. A draft tokenizer that starts every
text with a token (Gemma's ``<bos>``: ``TokenTable.start``) gets it first, and it stays through
every rollback.

Only the proposal q depends on this sequence, so speculative sampling stays exact whatever it
holds; alignment matters for acceptance, and tests check it equals the draft tokenizer's own
encoding of the decoded text on long texts.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from multispin.models.vocab_map import TokenTable, VocabMap

DEFAULT_LOOKBACK = 4  # draft tokens re-encoded before a change; BPE merges reach a word back


def _is_continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


class DraftContext:
    """The draft-token sequence that spells a growing (and rolled back) target sequence."""

    def __init__(self, draft: TokenTable, target: TokenTable, vocab: VocabMap, lookback: int = DEFAULT_LOOKBACK):
        self._draft, self._target, self._vocab = draft, target, vocab
        self.lookback = max(0, int(lookback))
        self.reset()

    def reset(self) -> None:
        self.target: list[int] = []
        self.draft: list[int] = list(self._draft.start)
        # (target length, draft length) after each special token: text is never re-encoded
        # across one, and a rollback restarts from the last one kept
        self._anchors: list[tuple[int, int]] = [(0, len(self.draft))]
        self._run = bytearray()  # bytes of the target tokens since the last anchor
        self._run_token_ends: list[int] = []  # byte end of each of those target tokens
        self._run_draft_ends: list[int] = []  # byte end of each draft token of the run

    def extend(self, target_ids: Sequence[int]) -> None:
        """Append target tokens and update the draft sequence."""
        dirty_from = len(self._run)
        for t in target_ids:
            t = int(t)
            piece = self._target.pieces[t] if 0 <= t < self._target.size else None
            if piece is None:  # a special token (or an id without bytes): a barrier
                self._reencode(dirty_from)
                self.target.append(t)
                mapped = self._vocab.special_target_to_draft.get(t)
                if mapped is not None:
                    self.draft.append(mapped)
                self._anchors.append((len(self.target), len(self.draft)))
                self._run, self._run_token_ends, self._run_draft_ends = bytearray(), [], []
                dirty_from = 0
                continue
            self.target.append(t)
            self._run += piece
            self._run_token_ends.append(len(self._run))
        self._reencode(dirty_from)

    def rollback(self, length: int) -> None:
        """Keep the first `length` target tokens."""
        if length >= len(self.target):
            return
        length = max(0, int(length))
        run_start = len(self.target) - len(self._run_token_ends)
        while self._anchors[-1][0] > length:
            self._anchors.pop()
        t0, d0 = self._anchors[-1]
        if t0 != run_start:  # a special token was dropped: rebuild the run after the last one kept
            run_ids = self.target[t0:length]
            del self.target[t0:]
            del self.draft[d0:]
            self._run, self._run_token_ends, self._run_draft_ends = bytearray(), [], []
            self.extend(run_ids)
            return
        kept = length - t0  # ordinary target tokens kept in the run
        end = self._run_token_ends[kept - 1] if kept else 0
        del self.target[length:]
        del self._run_token_ends[kept:]
        del self._run[end:]
        self._reencode(end)

    # ------------------------------------------------------------------------------------------

    def _reencode(self, changed_from: int) -> None:
        """Re-encode the run from `lookback` draft tokens before byte `changed_from` (the first
        byte that differs from what the draft sequence spelt), at a character boundary."""
        ends = self._run_draft_ends
        if changed_from == len(self._run) and (ends[-1] if ends else 0) == changed_from:
            return  # nothing new since the draft sequence last spelt the run
        keep = max(0, bisect.bisect_right(ends, changed_from) - self.lookback)  # ends never decrease
        # back off to a cut that is a character boundary and that no dropped token ends at
        # (tokens of a normalised piece all end where the piece ends: they go together)
        while keep and (
            (ends[keep - 1] < len(self._run) and _is_continuation(self._run[ends[keep - 1]]))
            or (keep < len(ends) and ends[keep - 1] == ends[keep])
        ):
            keep -= 1
        cut = ends[keep - 1] if keep else 0
        first_run_token = len(self.draft) - len(ends)
        del self.draft[first_run_token + keep :]
        del ends[keep:]
        for ids, stop in self._encode_bytes(bytes(self._run[cut:]), cut):
            self.draft.extend(ids)
            ends.extend(stop)

    def _encode_bytes(self, data: bytes, offset: int):
        """(draft ids, their byte ends) for `data`: valid UTF-8 through the draft tokenizer,
        other bytes one single-byte token each."""
        pos = 0
        while pos < len(data):
            try:
                text, stop = data[pos:].decode("utf-8"), len(data)
            except UnicodeDecodeError as err:
                text, stop = data[pos : pos + err.start].decode("utf-8"), pos + err.start
            if text:
                yield self._encode_text(text, data[pos:stop], offset + pos)
            pos = stop
            if pos < len(data):  # one byte that does not start valid UTF-8 here
                byte_id = self._draft.byte_ids[data[pos]]
                pos += 1
                if byte_id >= 0:
                    yield [byte_id], [offset + pos]

    def _encode_text(self, text: str, raw: bytes, offset: int) -> tuple[list[int], list[int]]:
        ids = self._draft.encode(text)
        ends, pos = [], offset
        for i in ids:
            piece = self._draft.pieces[i] if 0 <= i < self._draft.size else None
            pos += len(piece) if piece is not None else 0
            ends.append(pos)
        if pos != offset + len(raw):
            # the tokenizer normalised the text (its bytes differ from the target's): no cut
            # may fall inside this piece, so every token of it ends where the piece ends
            ends = [offset + len(raw)] * len(ids)
        return ids, ends
