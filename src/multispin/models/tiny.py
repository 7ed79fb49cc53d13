"""Tiny random-init draft/target pair for tests: no download, builds in milliseconds.

The target is a 2-layer Qwen2 with a sharpened output head (random init alone gives nearly
uniform distributions, on which every draft is accepted). Each draft is the target with seeded
Gaussian noise added to its weights, so acceptance is neither 0 nor 1 and differs per draft.
Weights are float64 so batched (padded) and single-sequence passes agree to ~1e-12 and greedy
comparisons never flip on rounding.
"""

from __future__ import annotations

import copy
import functools

import torch  # noqa: TID253 (a torch-bound module: only torch code imports it)

from multispin.models.base import LoadedPair
from multispin.models.cross_vocab import CrossDraft
from multispin.models.piece_tokenizer import PieceTokenizer
from multispin.models.vocab_map import TokenTable

TINY_VOCAB = 256
TINY_EOS = 2
# draft name -> relative weight-noise level; larger noise, lower acceptance
TINY_DRAFTS = {"close": 0.06, "mid": 0.2, "far": 0.5}


class TinyTokenizer:
    """Bytes as token ids (vocab 256): encode/decode round-trip any ASCII text."""

    vocab_size = TINY_VOCAB
    eos_token_id = TINY_EOS

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return bytes(int(i) for i in ids if not (skip_special_tokens and int(i) == TINY_EOS)).decode(
            "utf-8", errors="replace"
        )

    def __len__(self) -> int:
        return TINY_VOCAB

    def token_table(self):
        """Every id is its byte, except EOS (special): what a vocabulary map needs."""
        return TokenTable(
            tuple(None if i == TINY_EOS else bytes([i]) for i in range(TINY_VOCAB)), {TINY_EOS: "<eos>"}, self.encode
        )


def _build_target(seed: int) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=TINY_VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        eos_token_id=TINY_EOS,
        bos_token_id=1,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.float64)
    with torch.no_grad():
        # Sharpen the output distribution: logit std of a few nats, like a trained LM.
        model.lm_head.weight.mul_(30.0)
    return model.eval()


def perturbed_copy(model: torch.nn.Module, noise: float, seed: int) -> torch.nn.Module:
    """A copy with each weight tensor w replaced by w + noise * std(w) * N(0, 1) (seeded)."""
    draft = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in draft.parameters():
            if param.numel() > 1:
                scale = noise * float(param.std())
                param.add_(torch.randn(param.shape, generator=gen, dtype=param.dtype) * scale)
    return draft.eval()


def tiny_merged_tokenizer():
    """A vocabulary unlike the tiny target's bytes: every byte but 'q', 'z' and 'x' (which the
    draft then cannot propose), plus merged English pieces (which the target does not have),
    under other ids."""
    singles = [bytes([b]) for b in range(256) if b not in b"qzx"]
    merges = [
        "th",
        "he",
        "in",
        "er",
        "an",
        " t",
        " a",
        "the",
        " the",
        "ing",
        "and",
        " and",
        "on",
        "re",
        "at",
        "en",
        "nd",
        "es",
        "or",
        "to",
        " of",
        "is",
        "it",
        " i",
        " s",
        " w",
        "ll",
    ]
    return PieceTokenizer(singles + [m.encode() for m in merges], specials=["<pad>", "<eos>"], eos="<eos>")


def _cross_draft_model(target: torch.nn.Module, draft_tok, seed: int) -> torch.nn.Module:
    """A tiny draft over `draft_tok`: the target's weights with seeded noise, its embedding and
    output rows read through the vocabulary map (merged pieces get the rows of their first byte)."""
    from transformers import Qwen2ForCausalLM

    config = copy.deepcopy(target.config)
    config.vocab_size = len(draft_tok)
    draft = Qwen2ForCausalLM(config).to(torch.float64)
    noisy = perturbed_copy(target, TINY_DRAFTS["mid"], seed)
    state = {k: v for k, v in noisy.state_dict().items() if not k.endswith(("embed_tokens.weight", "lm_head.weight"))}
    draft.load_state_dict(state, strict=False)
    rows = torch.tensor([draft_tok.piece(i)[0] if draft_tok.piece(i) else TINY_EOS for i in range(len(draft_tok))])
    with torch.no_grad():
        draft.model.embed_tokens.weight.copy_(noisy.model.embed_tokens.weight[rows])
        draft.lm_head.weight.copy_(noisy.lm_head.weight[rows])
    return draft.eval()


@functools.lru_cache(maxsize=2)
def load_tiny_cross_pair(seed: int = 0) -> LoadedPair:
    """The tiny target with two drafts: 'merged' (its own vocabulary, tiny_merged_tokenizer) and
    'close' (the target's vocabulary): a run may mix the two families."""
    base = load_tiny_pair(seed)
    draft_tok = tiny_merged_tokenizer()
    drafts = {"merged": _cross_draft_model(base.target, draft_tok, seed + 7), "close": base.drafts["close"]}
    return LoadedPair(
        name="tiny-cross",
        tokenizer=base.tokenizer,
        target=base.target,
        drafts=drafts,
        vocab_size=TINY_VOCAB,
        eos_token_ids=(TINY_EOS,),
        use_chat_template=False,
        notes={"kind": "the tiny pair's target; 'merged' drafts over another vocabulary"},
        cross_drafts={"merged": CrossDraft.between(draft_tok, base.tokenizer)},
    )


@functools.lru_cache(maxsize=4)
def load_tiny_pair(seed: int = 0) -> LoadedPair:
    target = _build_target(seed)
    drafts = {name: perturbed_copy(target, noise, seed + i + 1) for i, (name, noise) in enumerate(TINY_DRAFTS.items())}
    return LoadedPair(
        name="tiny",
        tokenizer=TinyTokenizer(),
        target=target,
        drafts=drafts,
        vocab_size=TINY_VOCAB,
        eos_token_ids=(TINY_EOS,),
        use_chat_template=False,
        notes={"kind": "random-init Qwen2, 2 layers, float64; drafts are weight-perturbed copies"},
    )
