"""Vocabulary maps between different tokenizers: markers, intersection, index arrays both ways,
specials never mapped, the proposal over the target's ids; and on the real SmolLM2 and Qwen2.5
tokenizers (skipped when they are not cached): coverage figures, round trips, specials.
"""

from __future__ import annotations

import numpy as np
import pytest

from multispin.errors import VocabularyMismatchError
from multispin.models.piece_tokenizer import PieceTokenizer
from multispin.models.vocab_map import VocabMap, piece_bytes
from multispin.speculative.warp import SamplingParams, warp

TARGET = PieceTokenizer(["a", "b", "c", " ", "ab", "bb"], specials=["<eos>", "<|im_start|>"], eos="<eos>")
DRAFT = PieceTokenizer(["b", "a", " ", "ba", "ab"], specials=["<|im_start|>", "<pad>"])
VOCAB = VocabMap.build(DRAFT.token_table(), TARGET.token_table())


def test_byte_level_and_sentencepiece_markers_are_undone():
    assert piece_bytes("Ġhello", byte_level=True) == b" hello"
    assert piece_bytes("Ċ", byte_level=True) == b"\n"
    assert piece_bytes("ĠÃ©", byte_level=True) == " é".encode()
    assert piece_bytes("▁hello", byte_level=False) == b" hello"
    assert piece_bytes("<0x0A>", byte_level=False) == b"\n"
    assert piece_bytes("<0x0A>", byte_level=True) == b"<0x0A>"  # a byte-level vocab spells it out


def test_intersection_and_index_arrays_both_ways():
    pieces = [TARGET.piece(int(t)) for t in VOCAB.shared_target]
    assert pieces == [b"a", b"b", b" ", b"ab"]
    assert [DRAFT.piece(int(d)) for d in VOCAB.shared_draft] == pieces  # same token, both sides
    assert np.all(np.diff(VOCAB.shared_target) > 0)
    np.testing.assert_array_equal(VOCAB.target_to_draft[VOCAB.shared_target], VOCAB.shared_draft)
    np.testing.assert_array_equal(VOCAB.draft_to_target[VOCAB.shared_draft], VOCAB.shared_target)
    outside_t = np.setdiff1d(np.arange(len(TARGET)), VOCAB.shared_target)
    assert np.all(VOCAB.target_to_draft[outside_t] == -1)
    assert VOCAB.draft_to_target[DRAFT.encode("ba")[0]] == -1
    assert VOCAB.coverage.to_dict() == {
        "shared": 4,
        "draft_tokens": 5,
        "target_tokens": 6,
        "draft_fraction": 0.8,
        "target_fraction": 0.6667,
    }
    assert TARGET.decode(TARGET.encode("abc bb")) == "abc bb"
    assert VOCAB.text_coverage(TARGET.encode("abc bb")) == 0.5  # "ab" " " shared; "c" "bb" not


def test_special_tokens_are_never_in_the_intersection():
    # "<|im_start|>" is special in both: mapped by content for the draft's context, never proposed
    assert VOCAB.special_target_to_draft == {1: 0}
    assert VOCAB.target_to_draft[0] == VOCAB.target_to_draft[1] == -1
    assert VOCAB.draft_to_target[0] == VOCAB.draft_to_target[1] == -1
    # a piece whose bytes spell a special's content is not the special
    spelled = PieceTokenizer(["<eos>", "a"])
    m = VocabMap.build(spelled.token_table(), TARGET.token_table())
    assert [TARGET.piece(int(t)) for t in m.shared_target] == [b"a"]


def test_proposal_is_restricted_to_the_intersection_and_renormalised():
    rng = np.random.default_rng(0)
    draft_logits = rng.normal(size=(3, len(DRAFT)))
    q_draft = warp(draft_logits, SamplingParams())
    q = VOCAB.target_probs(q_draft)
    np.testing.assert_allclose(q.sum(axis=-1), 1.0)
    outside = np.setdiff1d(np.arange(len(TARGET)), VOCAB.shared_target)
    assert np.all(q[:, outside] == 0)
    mass = q_draft[:, VOCAB.shared_draft].sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(q[:, VOCAB.shared_target], q_draft[:, VOCAB.shared_draft] / mass)
    # the logits route (what a device warps) gives the same law, at any temperature
    for sampling in (SamplingParams(), SamplingParams(temperature=0.6)):
        np.testing.assert_allclose(
            warp(VOCAB.target_logits(draft_logits), sampling),
            VOCAB.target_probs(warp(draft_logits, sampling)),
            atol=1e-6,
        )


def test_a_row_without_mass_on_the_intersection_becomes_uniform_over_it():
    q_draft = np.zeros(len(DRAFT))
    q_draft[DRAFT.encode("ba")[0]] = 1.0
    q = VOCAB.target_probs(q_draft)
    np.testing.assert_allclose(q[VOCAB.shared_target], 0.25)


def test_no_shared_token_is_a_vocabulary_mismatch():
    with pytest.raises(VocabularyMismatchError, match="share no token"):
        VocabMap.build(PieceTokenizer(["x", "y"]).token_table(), TARGET.token_table())


# ---- the real tokenizers ----

# |I|, Gemma 3 270M's ordinary tokens, Qwen2.5's ordinary tokens (docs/cross-vocabulary.md)
GEMMA_COVERAGE = (95_904, 255_730, 151_643)


def _cached_tokenizer(name: str):
    from multispin.models.acquire import model_dir

    directory = model_dir(name)
    if not (directory / "multispin-manifest.json").exists():
        pytest.skip(f"{name} is not cached (multispin generate --pair {name} fetches it)")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory))


def _cross(draft_name: str):
    from multispin.models.cross_vocab import CrossDraft

    draft, target = _cached_tokenizer(draft_name), _cached_tokenizer("qwen2.5-coder-0.5b")
    return draft, target, CrossDraft.between(draft, target)


@pytest.fixture(scope="module")
def real():
    return _cross("smollm2-135m")


@pytest.fixture(scope="module")
def gemma():
    return _cross("gemma3-270m")


def _text_share(target, vocab, task: str) -> float:
    from multispin.models.prompts import load_prompts

    texts = load_prompts(task, 20, 0, source="builtin")
    return vocab.text_coverage([t for text in texts for t in target.encode(text)])


@pytest.mark.slow
def test_real_pair_coverage(real):
    draft, target, cross = real
    cov = cross.vocab.coverage
    assert cov.shared == 39_234 and cov.draft_tokens == 49_135 and cov.target_tokens == 151_643
    assert 0.79 < cov.draft_fraction < 0.81  # "about 80% of SmolLM2's tokens exist in Qwen's"
    assert _text_share(target, cross.vocab, "chat") > 0.85


def _check_round_trips_and_specials(draft, target, vocab) -> None:
    """Both index arrays invert each other on I, a shared token decodes to the same text on both
    sides, and no special or added token of either side is in I."""
    sample = vocab.shared_target[:: max(1, len(vocab.shared_target) // 2000)]
    for t in sample:
        d = int(vocab.target_to_draft[t])
        # decoded after a marker token, so a tokenizer that strips a leading space cannot hide it
        mark_t, mark_d = target.encode("x", add_special_tokens=False), draft.encode("x", add_special_tokens=False)
        assert target.decode(mark_t + [int(t)]) == draft.decode(mark_d + [d])
        assert int(vocab.draft_to_target[d]) == int(t)
    for s in target.all_special_ids + list(target.added_tokens_decoder):
        assert vocab.target_to_draft[s] == -1
    for s in draft.all_special_ids + list(draft.added_tokens_decoder):
        assert vocab.draft_to_target[s] == -1


@pytest.mark.slow
def test_real_pair_round_trips_and_specials(real):
    draft, target, cross = real
    vocab = cross.vocab
    _check_round_trips_and_specials(draft, target, vocab)
    for t in vocab.shared_target[::500]:  # both byte-level: even the token strings are the same
        assert target.convert_ids_to_tokens(int(t)) == draft.convert_ids_to_tokens(int(vocab.target_to_draft[t]))
    names = {
        target.convert_ids_to_tokens(t): draft.convert_ids_to_tokens(d)
        for t, d in vocab.special_target_to_draft.items()
    }
    assert names == {"<|im_start|>": "<|im_start|>", "<|im_end|>": "<|im_end|>", "<|endoftext|>": "<|endoftext|>"}


@pytest.mark.slow
def test_gemma_coverage(gemma):
    """Gemma 3 270M (SentencePiece, 262,144 ids) against Qwen2.5 (byte-level BPE): I is large in
    absolute terms but a minority of Gemma's vocabulary; Qwen-tokenised text lies mostly in I."""
    draft, target, cross = gemma
    cov = cross.vocab.coverage
    assert (cov.shared, cov.draft_tokens, cov.target_tokens) == GEMMA_COVERAGE
    assert _text_share(target, cross.vocab, "chat") > 0.95
    assert _text_share(target, cross.vocab, "code") > 0.85
    assert cross.vocab.special_target_to_draft == {}  # no chat marker in common


@pytest.mark.slow
def test_gemma_round_trips_and_specials(gemma):
    draft, target, cross = gemma
    _check_round_trips_and_specials(draft, target, cross.vocab)
    assert cross.draft_table.start == (draft.bos_token_id,)  # Gemma reads <bos> first
    assert cross.draft_table.encode("Hello world") == draft.encode("Hello world", add_special_tokens=False)
    assert draft.convert_ids_to_tokens(cross.draft_table.encode(" reverse a string")) == [
        "▁reverse",
        "▁a",
        "▁string",
    ]  # SentencePiece-BPE merges, not Unigram pieces
