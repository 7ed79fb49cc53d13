"""Round-to-nearest draft quantisation and draft names."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from multispin.errors import ConfigError
from multispin.models.quantize import (
    draft_name,
    parse_draft_name,
    quantize_named,
    quantize_rtn,
    quantize_weight,
)


def _tiny_lm(tied: bool) -> nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=tied,
    )
    return Qwen2ForCausalLM(config).eval()


@pytest.mark.parametrize(
    "name,expected", [("q4g64", (4, 64)), ("q2g8", (2, 8)), ("q8g1024", (8, 1024)), ("Q3G32", (3, 32))]
)
def test_parse_draft_name(name, expected):
    assert parse_draft_name(name) == expected


@pytest.mark.parametrize("name", ["q1g64", "q9g64", "q4g48", "q4g4", "q4g0", "q4", "4g64", "foo", "", "q4g64x"])
def test_parse_draft_name_rejects(name):
    with pytest.raises(ConfigError) as info:
        parse_draft_name(name)
    msg = str(info.value)
    assert "\n" not in msg and "q4g64" in msg and msg.startswith("draft:")


def test_draft_name_round_trip():
    assert draft_name(3, 32) == "q3g32"
    with pytest.raises(ConfigError):
        draft_name(3, 33)


def test_quantize_weight_levels_error_and_determinism():
    torch.manual_seed(1)
    w = torch.randn(16, 256)
    errors = []
    for bits in range(2, 9):
        q = quantize_weight(w, bits, 64)
        assert q.dtype == torch.float32 and q.shape == w.shape
        assert torch.equal(q, quantize_weight(w, bits, 64))  # deterministic
        groups = q.reshape(16, 4, 64)
        for row in range(16):
            for g in range(4):
                assert groups[row, g].unique().numel() <= 2**bits
        # Asymmetric: each group's extremes are kept exactly.
        wg = w.reshape(16, 4, 64)
        assert torch.allclose(groups.amin(-1), wg.amin(-1)) and torch.allclose(groups.amax(-1), wg.amax(-1), atol=1e-6)
        errors.append(float((q - w).pow(2).mean()))
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    # Smaller groups, smaller error.
    assert float((quantize_weight(w, 3, 16) - w).pow(2).mean()) < float((quantize_weight(w, 3, 128) - w).pow(2).mean())


def test_quantize_weight_symmetric_and_edge_groups():
    torch.manual_seed(2)
    w = torch.randn(4, 100)  # 100 = 64 + a narrower last group of 36
    for symmetric in (False, True):
        q = quantize_weight(w, 4, 64, symmetric=symmetric)
        assert q.shape == w.shape and torch.isfinite(q).all()
        assert float((q - w).abs().max()) < 0.5
    sq = quantize_weight(w, 4, 64, symmetric=True)
    assert sq[:, :64].reshape(4, 64).unique().numel() <= 4 * 15
    const = torch.full((2, 64), 0.37)
    assert torch.equal(quantize_weight(const, 2, 32), const)
    assert torch.equal(quantize_weight(torch.zeros(2, 64), 2, 32, symmetric=True), torch.zeros(2, 64))
    with pytest.raises(ConfigError):
        quantize_weight(w, 1, 64)
    with pytest.raises(ConfigError):
        quantize_weight(w, 4, 24)


@pytest.mark.parametrize("tied", [False, True])
def test_quantize_rtn_copies_and_skips_head_and_embeddings(tied):
    model = _tiny_lm(tied)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    draft = quantize_rtn(model, 4, 32)
    # The original is untouched.
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    d_state = draft.state_dict()
    assert torch.equal(d_state["lm_head.weight"], before["lm_head.weight"])
    assert torch.equal(d_state["model.embed_tokens.weight"], before["model.embed_tokens.weight"])
    if tied:
        assert draft.lm_head.weight is draft.model.embed_tokens.weight
    changed = [name for name, mod in draft.named_modules() if isinstance(mod, nn.Linear) and name != "lm_head"]
    assert len(changed) == 2 * 7
    for name in changed:
        w = d_state[name + ".weight"]
        assert not torch.equal(w, before[name + ".weight"]), name
        assert w.dtype == torch.float32
    for k in d_state:  # norms and biases are kept
        if "norm" in k or k.endswith(".bias"):
            assert torch.equal(d_state[k], before[k]), k
    assert not any(p.requires_grad for p in draft.parameters()) and not draft.training


def test_quantize_rtn_is_deterministic_and_more_bits_is_closer():
    model = _tiny_lm(False)
    a = quantize_rtn(model, 3, 32).state_dict()
    b = quantize_rtn(model, 3, 32).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    ids = torch.tensor([[5, 17, 42, 99, 7, 250, 3, 3]])
    with torch.no_grad():
        ref = model(ids).logits
        errs = [float((quantize_named(model, f"q{bits}g32")(ids).logits - ref).abs().mean()) for bits in (2, 4, 8)]
    assert errs[0] > errs[1] > errs[2] > 0, errs
    with pytest.raises(ConfigError):
        quantize_rtn(model, 9, 32)
