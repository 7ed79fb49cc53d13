"""Stored prompt prefills (`models.prefill_store`): a draft model that reads a prompt's prefill
from the store gives the same logits, bit for bit, as one that computes it, through the prefill
and the batched steps after it; a store that returns another prompt's entry is caught."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from multispin.models.hf import HFBatchedLM, draft_batched
from multispin.models.prefill_store import DraftPrefills, PromptPrefills, shared_prompt_prefills
from multispin.models.registry import resolve_pair

PROMPTS = {0: list(range(3, 83)), 1: list(range(90, 20, -1)), 2: [5] * 70}


def _session(lm: HFBatchedLM, steps: int = 3) -> list[dict[int, np.ndarray]]:
    """Every prompt's prefill alone, then ``steps`` batched one-token steps of all of them."""
    out = []
    for s, ids in PROMPTS.items():
        lm.open(s)
        out.append(lm.extend_many_last({s: ids}))
    for i in range(steps):
        out.append(lm.extend_many_last({s: [7 + i + s] for s in PROMPTS}))
    lm.rollback(1, len(PROMPTS[1]) + 1)  # a rejected draft: the cache read back is cut as a computed one
    out.append(lm.extend_many_last({s: [11] for s in PROMPTS}))
    return out


def _same(a: list[dict[int, np.ndarray]], b: list[dict[int, np.ndarray]]) -> bool:
    return all(x.keys() == y.keys() and all(np.array_equal(x[s], y[s]) for s in x) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def pair():
    return resolve_pair("tiny")


def _model(pair, prefills: DraftPrefills | None) -> HFBatchedLM:
    return HFBatchedLM(pair.drafts[pair.default_draft], pair.vocab_size, 0, prefills)


def test_a_stored_prefill_gives_the_computed_logits_bit_for_bit(pair, tmp_path):
    computed = _session(_model(pair, None))
    first = PromptPrefills(tmp_path).for_draft(pair.default_draft)
    assert _same(_session(_model(pair, first)), computed)  # the first pool computes and stores
    assert (first.hits, first.misses) == (0, len(PROMPTS))
    later = PromptPrefills(tmp_path).for_draft(pair.default_draft)  # a later pool reads them
    assert _same(_session(_model(pair, later)), computed)
    assert (later.hits, later.misses) == (len(PROMPTS), 0)


class _KeyedByLength(DraftPrefills):
    """A broken store: entries keyed by the prompt's length and rows, not its tokens."""

    def key(self, token_ids, rows):
        return super().key([0] * len(token_ids), rows)


def test_control_a_store_that_returns_another_prompts_prefill_is_caught(pair, tmp_path):
    computed = _session(_model(pair, None))
    store = _KeyedByLength(tmp_path, pair.default_draft)
    _session(_model(pair, store))
    # a prompt of the same length as a stored one, other tokens: it gets the stored entry
    swapped = {0: list(range(3, 83)), 1: list(range(100, 170)), 2: [6] * 70}
    broken = _KeyedByLength(tmp_path, pair.default_draft)
    lm = _model(pair, broken)
    got = []
    for s, ids in swapped.items():
        lm.open(s)
        got.append(lm.extend_many_last({s: ids}))
    assert broken.hits == len(PROMPTS)
    assert not all(np.array_equal(g[s], c[s]) for g, c, s in zip(got, computed, PROMPTS))


def test_short_steps_and_cached_sequences_are_not_stored(pair, tmp_path):
    store = PromptPrefills(tmp_path).for_draft(pair.default_draft)
    lm = _model(pair, store)
    lm.open(0)
    lm.extend_many_last({0: [4]})  # one token: cheaper computed than read
    lm.extend_many_last({0: [5, 6, 7]})  # a cached sequence's step, not a prompt
    lm.open(1)
    lm.open(2)
    lm.extend_many_last({1: [3, 4, 5], 2: [3, 4]})  # short prompts padded into one batch
    assert store.hits == store.misses == 0 and not list(tmp_path.glob("*.pt"))


def test_the_key_names_the_draft_the_rows_and_the_threads(tmp_path):
    a = PromptPrefills(tmp_path).for_draft("q4g64")
    ids = list(range(10))
    keys = {a.key(ids, 1), a.key(ids, 2), a.key(ids[:-1], 1), PromptPrefills(tmp_path).for_draft("q3g32").key(ids, 1)}
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        keys.add(a.key(ids, 1))
    finally:
        torch.set_num_threads(threads)
    assert len(keys) == 5


def test_shared_prompt_prefills_attach_to_the_pair_and_leave_nothing(pair):
    assert pair.prompt_prefills is None
    with shared_prompt_prefills(pair) as store:
        assert draft_batched(pair, pair.default_draft)._prefills.folder == store.folder
        with shared_prompt_prefills(pair) as inner:  # nested: the same store
            assert inner is store
        assert pair.prompt_prefills is store
    assert pair.prompt_prefills is None and not store.folder.exists()
    assert draft_batched(pair, pair.default_draft)._prefills is None


def test_a_store_that_cannot_write_leaves_the_prefill_computed(pair, tmp_path):
    gone = PromptPrefills(tmp_path / "removed").for_draft(pair.default_draft)  # no such folder: every write fails
    assert _same(_session(_model(pair, gone)), _session(_model(pair, None)))
    assert gone.misses == len(PROMPTS) and not (tmp_path / "removed").exists()
