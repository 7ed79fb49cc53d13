"""The attention kernel of a batched forward on the CPU: PyTorch's SDPA with each key/value head
shared by its group of query heads (``enable_gqa``) also under a padding mask.

transformers' ``sdpa`` attention repeats every key/value head for its query heads (a copy of the
layer's whole cache, 3× its size for SmolLM2, 7× for Qwen2.5-0.5B) whenever a mask is given,
because on CUDA SDPA's fused kernels refuse grouped heads with a mask. A batched forward over
sequences of different lengths always has a mask. On the CPU the kernel takes grouped heads with
a mask and gives the same outputs bit for bit, so the copy is pure cost: at batch 4 it made a
SmolLM2-135M drafting step's attention 3× slower (0.41 against 0.12 ms per layer). Without a
mask (one sequence alone, as Hugging Face's own `generate` runs) and off the CPU this is
transformers' ``sdpa`` unchanged.
"""

from __future__ import annotations

import torch  # noqa: TID253 (a torch-bound module: only torch code imports it)

SHARED_KV_SDPA = "multispin_sdpa_shared_kv"


def _sdpa_shared_kv(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if attention_mask is None or query.device.type != "cpu" or key.shape[1] == query.shape[1]:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    if attention_mask.ndim == 4:
        attention_mask = attention_mask[:, :, :, : key.shape[-2]]
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous(), None


def share_kv_heads(model: torch.nn.Module) -> None:
    """Run `model`'s attention with `_sdpa_shared_kv` where it runs transformers' ``sdpa`` (any
    other implementation, e.g. eager, is left as it is; so is every model on a transformers
    release without attention interfaces). Outputs are unchanged bit for bit."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    except ImportError:
        return
    if not hasattr(model, "set_attn_implementation"):
        return

    AttentionInterface.register(SHARED_KV_SDPA, _sdpa_shared_kv)
    ALL_MASK_ATTENTION_FUNCTIONS.register(SHARED_KV_SDPA, sdpa_mask)  # the masks sdpa gets
    model.set_attn_implementation(SHARED_KV_SDPA)
