"""Rebuild a SentencePiece-BPE tokenizer that transformers' GGUF loader turned into a Unigram one.

A GGUF file with ``tokenizer.ggml.model = "llama"`` (SentencePiece BPE: Gemma 3, Llama 2) stores
each token with a score and no merge list. llama.cpp encodes such text the SentencePiece BPE way:
it repeatedly merges the adjacent pair whose merged token has the highest score. transformers
(4.57) builds a *Unigram* tokenizer from those scores instead, which for Gemma 3 splits
``" world"`` into ``▁w or ld``: text the model never saw in training, so a draft fed that way
guesses badly (its output law does not matter for exactness, only for acceptance).

This module derives the merge list SentencePiece BPE implies (every split of a token into two
tokens, ordered by the merged token's score, as transformers' own ``SentencePieceExtractor``
does for the original Gemma tokenizer) and writes a BPE model with byte fallback in place of the
Unigram one. Pure JSON in, JSON out.
"""

from __future__ import annotations

from collections.abc import Sequence

_NORMAL = 1  # GGUF token type of an ordinary piece (control, user-defined, byte ... are not merged)


def bpe_model_from_scores(vocab: Sequence[tuple[str, float]], kinds: Sequence[int], unk_token: str) -> dict:
    """A ``tokenizers`` BPE model (JSON dict) from SentencePiece pieces and scores.

    ``vocab[i]`` is (piece, score) of id i, spelt as in the GGUF file; ``kinds[i]`` its GGUF
    token type. Only ordinary pieces take part in merges, so a control or user-defined token's
    text never comes out of merging (user-defined ones are matched whole as added tokens).
    """
    ids = {piece: i for i, (piece, _) in enumerate(vocab)}
    mergeable = {piece for i, (piece, _) in enumerate(vocab) if i < len(kinds) and kinds[i] == _NORMAL}
    ranked = []
    for piece, score in vocab:
        if piece not in mergeable or len(piece) < 2:
            continue
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in mergeable and right in mergeable:
                # highest score first; ties as SentencePieceExtractor: by the parts' ids
                ranked.append((-score, ids[left], ids[right], left, right))
    ranked.sort()
    return {
        "type": "BPE",
        "dropout": None,
        "unk_token": unk_token,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": True,
        "byte_fallback": True,
        "ignore_merges": False,
        "vocab": ids,
        "merges": [[left, right] for *_, left, right in ranked],
    }


def unigram_to_bpe(data: dict, table: Sequence[tuple[str, int]]) -> bool:
    """Replace a Unigram ``tokenizer.json`` model (``data``, edited in place) by the BPE model its
    scores imply; ``table`` is the GGUF file's (token, type) list. The pieces are spelt as the
    GGUF file spells them: transformers rewrites whitespace-only pieces as ``▁`` runs and
    ``<0x09>`` as a tab, which collides with the user-defined tokens of the same text. Returns
    False (and changes nothing) when the model is not Unigram or the table does not fit it."""
    model = data.get("model", {})
    if model.get("type") != "Unigram" or len(table) != len(model.get("vocab", ())):
        return False
    vocab = [(tok, float(score)) for (tok, _), (_, score) in zip(table, model["vocab"])]
    kinds = [kind for _, kind in table]
    unk_id = model.get("unk_id")
    unk = vocab[unk_id][0] if isinstance(unk_id, int) and 0 <= unk_id < len(vocab) else "<unk>"
    data["model"] = bpe_model_from_scores(vocab, kinds, unk)
    return True
