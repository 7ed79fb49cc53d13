"""SentencePiece-BPE merges rebuilt from GGUF scores (Gemma 3's tokenizer as transformers loads it
from GGUF is Unigram, and splits words into pieces the model never saw): a synthetic vocabulary,
no download. Control: the Unigram model of the same scores splits the word apart.
"""

from __future__ import annotations

import copy
import json

from tokenizers import Tokenizer

from multispin.models.spm_merges import bpe_model_from_scores, unigram_to_bpe

# (piece, score, GGUF type) as llama.cpp stores a SentencePiece-BPE vocabulary: score = -rank,
# so short frequent pieces score highest and a long word far below the sum of its parts
TABLE = [
    ("<unk>", 0.0, 2),
    ("<ctl>", 0.0, 3),
    ("\n", 0.0, 4),
    ("<0x41>", 0.0, 6),
    ("▁", -1.0, 1),
    ("w", -2.0, 1),
    ("o", -3.0, 1),
    ("r", -4.0, 1),
    ("l", -5.0, 1),
    ("d", -6.0, 1),
    ("or", -7.0, 1),
    ("ld", -8.0, 1),
    ("▁w", -9.0, 1),
    ("▁wor", -10.0, 1),
    ("▁world", -100.0, 1),
    ("<c", -101.0, 1),
    ("tl>", -102.0, 1),
]


def _tokenizer_json(model: dict) -> dict:
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": 1,
                "content": "<ctl>",
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        ],
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
            ],
        },
        "model": model,
    }


def _unigram() -> dict:
    # what transformers' GGUF converter writes: the scores as Unigram log-probabilities
    return _tokenizer_json(
        {"type": "Unigram", "unk_id": 0, "byte_fallback": True, "vocab": [[p, s] for p, s, _ in TABLE]}
    )


def _tokens(data: dict, text: str) -> list[str]:
    return Tokenizer.from_str(json.dumps(data)).encode(text).tokens


def test_merges_follow_the_merged_tokens_score():
    model = bpe_model_from_scores([(p, s) for p, s, _ in TABLE], [k for *_, k in TABLE], "<unk>")
    assert model["merges"][:3] == [["o", "r"], ["l", "d"], ["▁", "w"]]
    assert ["▁w", "or"] in model["merges"] and ["▁wor", "ld"] in model["merges"]
    # control, user-defined and byte pieces never take part in a merge
    parts = {x for pair in model["merges"] for x in pair}
    assert not parts & {"<ctl>", "\n", "<0x41>", "<unk>"}
    assert ["<c", "tl>"] not in model["merges"]


def test_unigram_model_is_rebuilt_as_bpe_and_splits_as_sentencepiece_does():
    data = _unigram()
    assert unigram_to_bpe(data, [(p, k) for p, _, k in TABLE])
    assert data["model"]["type"] == "BPE" and data["model"]["byte_fallback"]
    assert _tokens(data, " world") == ["▁world"]
    assert _tokens(data, " world<ctl>") == ["▁world", "<ctl>"]
    assert (
        Tokenizer.from_str(json.dumps(data)).decode(Tokenizer.from_str(json.dumps(data)).encode(" world").ids)
        == " world"
    )


def test_control_the_unigram_model_of_the_same_scores_splits_the_word():
    assert _tokens(_unigram(), " world") != ["▁world"]  # the bug the rebuild repairs


def test_other_models_and_mismatched_tables_are_left_alone():
    bpe = _tokenizer_json({"type": "BPE", "vocab": {"a": 0}, "merges": []})
    before = copy.deepcopy(bpe)
    assert not unigram_to_bpe(bpe, [("a", 1)]) and bpe == before
    uni = _unigram()
    before = copy.deepcopy(uni)
    assert not unigram_to_bpe(uni, [("a", 1)]) and uni == before  # table of another vocabulary
