"""A padded batched forward on the CPU shares each key/value head among its query heads
(`models.attention`), with logits equal bit for bit to transformers' ``sdpa``, which copies the
heads whenever there is a mask. A spy on SDPA shows which way each layer ran; the control is the
same model switched back to transformers' ``sdpa``."""

from __future__ import annotations

import copy

import torch

from multispin.models.attention import SHARED_KV_SDPA, share_kv_heads
from multispin.models.hf import HFBatchedLM
from multispin.models.tiny import load_tiny_pair


def _padded_round(model, implementation: str | None = None) -> tuple[dict, list]:
    """Three sequences of different lengths, then a 2-token step for all (a masked batch): the
    step's rows and, per SDPA call, (had a mask, grouped heads)."""
    lm = HFBatchedLM(model, model.config.vocab_size)
    if implementation:
        model.set_attn_implementation(implementation)
    for s, n in enumerate((5, 9, 13)):
        lm.open(s)
        lm.extend_many({s: list(range(3, 3 + n))})
    real, calls = torch.nn.functional.scaled_dot_product_attention, []

    def spy(*args, **kwargs):
        calls.append((kwargs.get("attn_mask") is not None, bool(kwargs.get("enable_gqa"))))
        return real(*args, **kwargs)

    torch.nn.functional.scaled_dot_product_attention = spy
    try:
        return lm.extend_many({s: [7, 8] for s in range(3)}), calls
    finally:
        torch.nn.functional.scaled_dot_product_attention = real


def test_batched_forward_shares_kv_heads_and_keeps_the_logits():
    model = copy.deepcopy(load_tiny_pair().target)  # 4 query heads on 2 key/value heads
    got, calls = _padded_round(model)
    assert model.config._attn_implementation == SHARED_KV_SDPA
    want, plain_calls = _padded_round(copy.deepcopy(model), implementation="sdpa")
    assert calls and all(masked and grouped for masked, grouped in calls)
    assert plain_calls and all(masked and not grouped for masked, grouped in plain_calls)  # control
    for s in want:
        assert torch.equal(torch.from_numpy(got[s]), torch.from_numpy(want[s]))


def test_other_attention_implementations_are_left_alone():
    model = copy.deepcopy(load_tiny_pair().target)
    model.set_attn_implementation("eager")
    share_kv_heads(model)
    assert model.config._attn_implementation == "eager"
