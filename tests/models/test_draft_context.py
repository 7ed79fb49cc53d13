"""The draft's own token sequence stays aligned with the target's across tokenizers: after any
sequence of extends and rollbacks it equals the draft tokenizer's encoding of the decoded text
(synthetic tokenizers always; SmolLM2 over Qwen2.5 text when both are cached), special tokens
are barriers, partial UTF-8 characters are spelt in bytes; the adapter's rows are the draft's
rows mapped to the target's ids and its KV cache is only rolled back to the common prefix.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from multispin.models.cross_vocab import CrossDraft, CrossVocabLM
from multispin.models.draft_context import DraftContext
from multispin.models.piece_tokenizer import PieceTokenizer
from multispin.models.synthetic import MarkovBatchedLM, MarkovSequenceLM, make_tables
from multispin.models.tiny import TinyTokenizer, tiny_merged_tokenizer

TEXT = (
    "the thing and the other thing, singing in the rain quietly;\n"
    "an answer to the question is in the text, and the rest is noise. "
) * 6


def random_walk(ctx: DraftContext, ids: list[int], seed: int, check) -> None:
    """Feed `ids` in random chunks with random rollbacks, calling check(prefix) after each."""
    rng = random.Random(seed)
    pos = 0
    while pos < len(ids):
        n = rng.randint(1, 6)
        ctx.extend(ids[pos : pos + n])
        pos = min(len(ids), pos + n)
        if rng.random() < 0.3:
            pos = max(0, pos - rng.randint(0, 5))
            ctx.rollback(pos)
        assert ctx.target == ids[:pos]
        check(pos)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_synthetic_alignment_on_long_text(seed):
    target, draft = TinyTokenizer(), tiny_merged_tokenizer()  # bytes vs merged pieces
    cross = CrossDraft.between(draft, target)
    ctx = DraftContext(cross.draft_table, cross.target_table, cross.vocab)
    ids = target.encode(TEXT + " quiz ")  # 'q', 'z' and 'x' are not in the draft vocabulary
    random_walk(ctx, ids, seed, lambda pos: _assert_equal(ctx.draft, draft.encode(target.decode(ids[:pos]))))
    assert len(ctx.draft) < 0.8 * len(ids)  # the merges were used


def _assert_equal(got, want):
    assert got == want


def test_special_tokens_are_barriers():
    target = PieceTokenizer(["a", "b", " ", "ab"], specials=["<eos>", "<|im_start|>"])
    draft = PieceTokenizer(["a", "b", " ", "ab", "b a"], specials=["<|im_start|>"])
    cross = CrossDraft.between(draft, target)
    ctx = DraftContext(cross.draft_table, cross.target_table, cross.vocab)
    # "b" <|im_start|> " a": never merged into "b a" across the special; <eos> has no draft token
    ctx.extend(target.encode("ab") + [1] + target.encode("b") + [0] + target.encode(" a"))
    assert ctx.draft == draft.encode("ab") + [0] + draft.encode("b") + draft.encode(" a")
    ctx.rollback(3)  # "ab", "<|im_start|>", "b"
    assert ctx.draft == draft.encode("ab") + [0] + draft.encode("b")
    ctx.extend(target.encode(" a"))  # without the barrier the merge happens
    assert ctx.draft == draft.encode("ab") + [0] + draft.encode("b a")
    ctx.rollback(1)  # back across the special: the run before it is rebuilt
    assert ctx.draft == draft.encode("ab")


def test_a_draft_start_token_comes_first_and_survives_rollbacks():
    """A draft tokenizer that starts every text with <bos> (Gemma) reads it first; control: the
    same vocabulary without a start token gets none."""
    from dataclasses import replace

    target = PieceTokenizer(["a", "b", " ", "ab"], specials=["<eos>"])
    draft = PieceTokenizer(["a", "b", " ", "ab"], specials=["<bos>"])
    cross = CrossDraft.between(draft, target)
    bos = draft.token_table().specials and next(iter(draft.token_table().specials))
    ctx = DraftContext(replace(cross.draft_table, start=(bos,)), cross.target_table, cross.vocab)
    assert ctx.draft == [bos]
    ctx.extend(target.encode("ab a") + [0] + target.encode("b"))
    assert ctx.draft == [bos] + draft.encode("ab a") + draft.encode("b")
    ctx.rollback(1)
    assert ctx.draft == [bos] + draft.encode("ab")
    ctx.rollback(0)
    assert ctx.draft == [bos] and ctx.target == []
    plain = DraftContext(cross.draft_table, cross.target_table, cross.vocab)
    plain.extend(target.encode("ab"))
    assert plain.draft == draft.encode("ab")


def test_a_character_split_across_target_tokens_is_spelt_in_bytes_until_complete():
    target = TinyTokenizer()  # one token per byte: "é" is two target tokens
    draft = PieceTokenizer([bytes([b]) for b in range(256)] + ["é".encode(), "café".encode()])
    cross = CrossDraft.between(draft, target)
    ctx = DraftContext(cross.draft_table, cross.target_table, cross.vocab)
    data = "café".encode()
    ctx.extend(list(data[:-1]))  # the last byte of "é" is missing
    assert ctx.draft == draft.encode("caf") + [draft.encode_bytes(data[3:4])[0]]
    ctx.extend(list(data[-1:]))
    assert ctx.draft == draft.encode("café")


# ---- the adapter ----

TGT = PieceTokenizer(["a", "b", "c", " ", "ab"], specials=["<eos>"])
DRF = PieceTokenizer(["a", "b", " ", "ba", "ab"], specials=["<s>"])
_, TABLE = make_tables(len(DRF), seed=2)


class CountingLM(MarkovSequenceLM):
    """A draft that counts the tokens it is fed and its forward passes."""

    fed = 0
    passes = 0

    def extend(self, token_ids):
        self.fed += len(token_ids)
        self.passes += 1
        return super().extend(token_ids)


def test_rows_are_the_drafts_rows_mapped_to_target_ids():
    cross = CrossDraft.between(DRF, TGT)
    lm = cross.wrap(MarkovSequenceLM(TABLE))
    assert lm.vocab_size == len(TGT)
    prompt = TGT.encode("ab a b")
    last = lm.extend_last(prompt)
    expect = cross.vocab.target_logits(TABLE.next_logits(DRF.encode("ab a b")))
    np.testing.assert_array_equal(last, expect)
    assert np.isneginf(last[TGT.encode("c")[0]]) and np.isneginf(last[0])
    rows = cross.wrap(MarkovSequenceLM(TABLE)).extend(prompt)  # every row, as each prefix reads
    for i in range(len(prompt)):
        want = cross.vocab.target_logits(TABLE.next_logits(DRF.encode(TGT.decode(prompt[: i + 1]))))
        np.testing.assert_array_equal(rows[i], want)


def test_kv_cache_rolls_back_only_to_the_common_prefix():
    cross = CrossDraft.between(DRF, TGT)
    inner = CountingLM(TABLE)
    lm = CrossVocabLM(inner, cross.draft_table, cross.target_table, cross.vocab)
    ids = TGT.encode("ab ab ab ab ab ab ab ab")
    lm.extend_last(ids)
    assert inner.fed == len(DRF.encode(TGT.decode(ids)))
    fed = inner.fed
    lm.rollback(len(ids) - 1)
    lm.extend_last(ids[-1:])  # the same token again: only the look-back is re-fed at most
    assert inner.fed - fed <= lm.context.lookback
    assert inner.length == len(lm.context.draft) and lm.length == len(ids)


@pytest.mark.slow
def test_real_pair_alignment_on_long_text():
    from transformers import AutoTokenizer

    from multispin.models.acquire import model_dir

    dirs = [model_dir(n) for n in ("smollm2-135m", "qwen2.5-coder-0.5b")]
    if not all((d / "multispin-manifest.json").exists() for d in dirs):
        pytest.skip("SmolLM2-135M and Qwen2.5-Coder-0.5B are not both cached")
    draft, target = (AutoTokenizer.from_pretrained(str(d)) for d in dirs)
    cross = CrossDraft.between(draft, target)
    ctx = DraftContext(cross.draft_table, cross.target_table, cross.vocab)
    from multispin.models.prompts import load_prompts

    text = "\n\n".join(load_prompts("chat", 12, 0, source="builtin"))
    text += " café naïve 日本語のテキスト 🙂\n\n\n    indented\tcode(x) {\n  return x;\n}"
    ids = target.encode(text)

    def check(pos):
        decoded = target.decode(ids[:pos])
        if pos % 5 == 0 and "\ufffd" not in decoded:  # a whole text (no split character)
            assert ctx.draft == draft.encode(decoded, add_special_tokens=False)

    random_walk(ctx, ids, 0, check)
    assert ctx.draft == draft.encode(target.decode(ids), add_special_tokens=False)


def test_control_without_look_back_the_sequence_drifts():
    """Re-encoding only the new bytes (no look-back) misses merges across the boundary: the same
    alignment check fails, so it can."""
    target, draft = TinyTokenizer(), tiny_merged_tokenizer()
    cross = CrossDraft.between(draft, target)
    ctx = DraftContext(cross.draft_table, cross.target_table, cross.vocab, lookback=0)
    ids = target.encode(TEXT)
    with pytest.raises(AssertionError):
        random_walk(ctx, ids, 0, lambda pos: _assert_equal(ctx.draft, draft.encode(target.decode(ids[:pos]))))


def test_q_depends_only_on_the_prefix_not_on_the_history():
    """What a device drafted from after any history of extends and rollbacks is what a fresh
    adapter gives for the same prefix in one teacher-forced pass (`measure` relies on it)."""
    target, draft = TinyTokenizer(), tiny_merged_tokenizer()
    cross = CrossDraft.between(draft, target)
    _, table = make_tables(len(draft), seed=4, scale=1.0)
    walker = cross.wrap(MarkovSequenceLM(table))
    ids = target.encode(TEXT[:300])
    seen: dict[int, np.ndarray] = {}
    rng = random.Random(3)
    pos = 0
    while pos < len(ids):
        n = rng.randint(1, 5)
        row = walker.extend_last(ids[pos : pos + n])
        pos = min(len(ids), pos + n)
        seen[pos] = row
        if rng.random() < 0.4:
            pos = max(1, pos - rng.randint(1, 4))
            walker.rollback(pos)
    rows = cross.wrap(MarkovSequenceLM(table)).extend(ids)
    for length, row in seen.items():
        np.testing.assert_array_equal(row, rows[length - 1])
    batched = cross.batched(MarkovBatchedLM(table))  # the BatchedLM face: same rows
    batched.open(0)
    np.testing.assert_array_equal(batched.extend_many({0: ids})[0], rows)
    batched.rollback(0, 10)
    np.testing.assert_array_equal(batched.extend_many_last({0: ids[10:20]})[0], rows[19])


def test_all_rows_in_one_pass_equal_row_by_row():
    """`extend`'s one-pass rows (plus short passes where a target token ends inside a draft
    token) equal stepping `extend_last` token by token, in far fewer draft passes."""
    target, draft = TinyTokenizer(), tiny_merged_tokenizer()
    cross = CrossDraft.between(draft, target)
    _, table = make_tables(len(draft), seed=4, scale=1.0)
    ids = target.encode(TEXT[:400]) + [2] + target.encode(" and é")  # a special and a split char
    fast_lm, slow_lm = CountingLM(table), CountingLM(table)
    fast = cross.wrap(fast_lm).extend(ids)
    slow_adapter = cross.wrap(slow_lm)
    slow = np.stack([slow_adapter.extend_last([t]) for t in ids])
    np.testing.assert_array_equal(fast, slow)
    assert slow_lm.passes == len(ids) and fast_lm.passes < 0.6 * slow_lm.passes


class _CountingBatched(MarkovBatchedLM):
    def __init__(self, table):
        super().__init__(table)
        self.calls = 0

    def extend_many(self, new_tokens):
        self.calls += 1
        return super().extend_many(new_tokens)


def test_sequences_of_a_cross_draft_step_in_one_batched_pass():
    """Devices sharing a draft of another vocabulary draft each step in one call of the draft's
    BatchedLM, and every sequence gets the row it would get alone, through random
    steps and rollbacks. Control: rows handed to the wrong sequence differ."""
    target, draft = TinyTokenizer(), tiny_merged_tokenizer()
    cross = CrossDraft.between(draft, target)
    _, table = make_tables(len(draft), seed=4, scale=1.0)
    texts = [target.encode(TEXT[i * 50 : i * 50 + 200]) for i in range(4)]
    counting = _CountingBatched(table)
    batched = cross.batched(counting)
    alone = {s: cross.wrap(MarkovSequenceLM(table)) for s in range(4)}
    pos = {s: 0 for s in range(4)}
    for s in range(4):
        batched.open(s)
    rng = random.Random(5)
    steps = swapped_differ = 0
    while any(pos[s] < len(texts[s]) for s in range(4)):
        step = {}
        for s in range(4):
            if pos[s] < len(texts[s]):
                n = rng.randint(1, 4)
                step[s] = texts[s][pos[s] : pos[s] + n]
                pos[s] += len(step[s])
        before = counting.calls
        rows = batched.extend_many_last(step)
        steps += 1
        assert counting.calls - before == 1, "one draft call per step, whatever the number of sequences"
        want = {s: alone[s].extend_last(toks) for s, toks in step.items()}
        for s in step:
            np.testing.assert_array_equal(rows[s], want[s])
        if len(step) > 1:  # control: rows of another sequence would differ (a Markov row can coincide)
            a, b = list(step)[:2]
            swapped_differ += not np.array_equal(rows[a], want[b])
        if rng.random() < 0.3:
            s = rng.randrange(4)
            back = max(1, pos[s] - rng.randint(1, 3))
            if back < pos[s]:
                batched.rollback(s, back)
                alone[s].rollback(back)
                pos[s] = back
    assert steps > 10 and swapped_differ > steps // 2
