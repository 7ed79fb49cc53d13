"""Vocabulary maps between a draft tokenizer and a target tokenizer that differ (pure; no torch).

A draft whose tokenizer is not the target's can still propose tokens to the target: its
next-token distribution, restricted to the intersection I of tokens whose *byte strings* are
identical in both vocabularies and renormalised, is a distribution over the target's ids (every
target id outside I gets zero mass). Speculative sampling is exact for the target with any
proposal over the target's ids (docs/cross-vocabulary.md), so only acceptance depends on how
large I is and how the draft's context is kept (`multispin.models.draft_context`).

Token strings are compared as bytes, after undoing each tokenizer's byte-level markers: GPT-2
style byte-level BPE spells byte 0x20 as ``Ġ`` and 0x0A as ``Ċ``; SentencePiece spells a space
``▁`` and a raw byte ``<0x0A>``. Special and added tokens (``<|im_start|>``, ``<|endoftext|>``)
are never in I: the draft can never propose them, and they reach the draft's context only by
their content (`VocabMap.special_target_to_draft`).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from multispin.errors import VocabularyMismatchError


@dataclass(frozen=True)
class TokenTable:
    """What a vocabulary map needs from one tokenizer.

    ``pieces[i]`` is token i's bytes, or None for a special/added token (never mapped).
    ``specials`` maps each special id to its content. ``encode`` turns text into ids without
    adding any special token (a draft context re-encodes committed text with it). ``start`` is
    what the tokenizer puts before every text (Gemma's ``<bos>``; empty for SmolLM2 and Qwen):
    a draft context begins with it, as the model was trained.
    """

    pieces: tuple[bytes | None, ...]
    specials: dict[int, str]
    encode: Callable[[str], list[int]] = field(compare=False, repr=False)
    start: tuple[int, ...] = ()

    @property
    def size(self) -> int:
        return len(self.pieces)

    @functools.cached_property
    def byte_ids(self) -> tuple[int, ...]:
        """The id of each single byte 0..255 (-1 where the vocabulary has none): the fallback
        for bytes that are not valid UTF-8 text (a target token that splits a character)."""
        out = [-1] * 256
        for i, piece in enumerate(self.pieces):
            if piece is not None and len(piece) == 1 and out[piece[0]] < 0:
                out[piece[0]] = i
        return tuple(out)


@functools.lru_cache(maxsize=1)
def _byte_level_decoder() -> dict[str, int]:
    """GPT-2's printable stand-ins for the 256 bytes, inverted (char -> byte)."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


_SP_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _is_byte_level(tokenizer: Any) -> bool:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    spec = json.loads(backend.to_str())
    return "ByteLevel" in json.dumps([spec.get("pre_tokenizer"), spec.get("decoder")])


def piece_bytes(token: str, byte_level: bool) -> bytes | None:
    """A token string's bytes with the tokenizer's markers undone (None if it cannot be read)."""
    if byte_level:
        table = _byte_level_decoder()
        try:
            return bytes(table[c] for c in token)
        except KeyError:
            return None
    m = _SP_BYTE.fullmatch(token)
    if m:
        return bytes([int(m.group(1), 16)])
    return token.replace("▁", " ").encode("utf-8")


def token_table(tokenizer: Any) -> TokenTable:
    """The `TokenTable` of a Hugging Face tokenizer (fast or slow), or of any tokenizer
    that builds its own (``tokenizer.token_table()``)."""
    if hasattr(tokenizer, "token_table"):
        return tokenizer.token_table()
    byte_level = _is_byte_level(tokenizer)
    vocab = tokenizer.get_vocab()
    size = len(tokenizer)
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    special_ids = {int(i) for i in added} | {int(i) for i in getattr(tokenizer, "all_special_ids", [])}
    pieces: list[bytes | None] = [None] * size
    specials: dict[int, str] = {}
    for token, i in vocab.items():
        i = int(i)
        if i >= size:
            continue
        if i in special_ids:
            content = added[i].content if i in added else token
            specials[i] = str(content)
            continue
        piece = piece_bytes(token, byte_level)
        pieces[i] = piece if piece else None

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    bos = getattr(tokenizer, "bos_token_id", None)
    start = (int(bos),) if getattr(tokenizer, "add_bos_token", False) and bos is not None else ()
    return TokenTable(tuple(pieces), specials, encode, start)


@dataclass(frozen=True)
class VocabCoverage:
    shared: int  # |I|
    draft_tokens: int  # draft ids with readable bytes (specials excluded)
    target_tokens: int

    @property
    def draft_fraction(self) -> float:
        """Share of the draft's ordinary tokens that exist in the target's vocabulary."""
        return self.shared / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def target_fraction(self) -> float:
        return self.shared / self.target_tokens if self.target_tokens else 0.0

    def to_dict(self) -> dict:
        return {
            "shared": self.shared,
            "draft_tokens": self.draft_tokens,
            "target_tokens": self.target_tokens,
            "draft_fraction": round(self.draft_fraction, 4),
            "target_fraction": round(self.target_fraction, 4),
        }


@dataclass(frozen=True)
class VocabMap:
    """The intersection I of two vocabularies, as index arrays both ways.

    ``shared_target[k]`` and ``shared_draft[k]`` are the same token (same bytes) in the two
    vocabularies. ``draft_to_target`` / ``target_to_draft`` hold -1 outside I.
    """

    shared_target: np.ndarray  # (|I|,) int64, ascending
    shared_draft: np.ndarray  # (|I|,) int64
    draft_to_target: np.ndarray  # (V_draft,) int64
    target_to_draft: np.ndarray  # (V_target,) int64
    special_target_to_draft: dict[int, int]  # specials whose content both vocabularies have
    coverage: VocabCoverage

    @property
    def target_size(self) -> int:
        return int(self.target_to_draft.shape[0])

    @property
    def draft_size(self) -> int:
        return int(self.draft_to_target.shape[0])

    @classmethod
    def build(cls, draft: TokenTable, target: TokenTable) -> VocabMap:
        by_bytes: dict[bytes, int] = {}
        for i, piece in enumerate(draft.pieces):
            if piece is not None and piece not in by_bytes:  # duplicates: the lowest id speaks
                by_bytes[piece] = i
        t_ids, d_ids, used = [], [], set()
        for t, piece in enumerate(target.pieces):
            d = by_bytes.get(piece) if piece is not None else None
            if d is not None and d not in used:
                t_ids.append(t)
                d_ids.append(d)
                used.add(d)
        if not t_ids:
            raise VocabularyMismatchError(
                "vocabulary: draft and target share no token; a draft "
                "must have at least one token of the target's vocabulary"
            )
        shared_t, shared_d = np.array(t_ids, dtype=np.int64), np.array(d_ids, dtype=np.int64)
        d2t = np.full(draft.size, -1, dtype=np.int64)
        t2d = np.full(target.size, -1, dtype=np.int64)
        d2t[shared_d] = shared_t
        t2d[shared_t] = shared_d
        draft_special = {content: i for i, content in sorted(draft.specials.items(), reverse=True)}
        specials = {t: draft_special[c] for t, c in target.specials.items() if c in draft_special}
        coverage = VocabCoverage(
            len(t_ids), sum(p is not None for p in draft.pieces), sum(p is not None for p in target.pieces)
        )
        return cls(shared_t, shared_d, d2t, t2d, specials, coverage)

    def target_logits(self, draft_logits: np.ndarray) -> np.ndarray:
        """Draft logits (..., V_draft) as logits over the target's ids: I keeps the draft's
        values, every other target id gets -inf. Any softmax/warp of the result is the draft's
        distribution restricted to I and renormalised (the proposal q over the target's ids)."""
        x = np.asarray(draft_logits, dtype=np.float32)
        out = np.full(x.shape[:-1] + (self.target_size,), -np.inf, dtype=np.float32)
        out[..., self.shared_target] = x[..., self.shared_draft]
        return out

    def target_probs(self, draft_probs: np.ndarray) -> np.ndarray:
        """A draft distribution (..., V_draft) as the proposal over the target's ids: restricted
        to I and renormalised. A row with no mass on I becomes uniform over I (any proposal over
        the target's ids keeps speculative sampling exact; this one keeps every row a law)."""
        p = np.asarray(draft_probs, dtype=np.float64)
        out = np.zeros(p.shape[:-1] + (self.target_size,), dtype=np.float64)
        out[..., self.shared_target] = p[..., self.shared_draft]
        mass = out.sum(axis=-1, keepdims=True)
        uniform = np.zeros(self.target_size)
        uniform[self.shared_target] = 1.0 / len(self.shared_target)
        safe = np.where(mass > 0, mass, 1.0)
        return np.where(mass > 0, out / safe, uniform)

    def text_coverage(self, target_ids: Sequence[int]) -> float:
        """Share of the tokens of a target-tokenised text that lie in I."""
        ids = np.asarray(list(target_ids), dtype=np.int64)
        return float((self.target_to_draft[ids] >= 0).mean()) if ids.size else 0.0
