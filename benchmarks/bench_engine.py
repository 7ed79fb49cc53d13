"""Engine math versus the model forward pass it accompanies, one round, side by side.

Setting (issue 2): K = 20 devices, γ = 8, V = 151,665 (Qwen2.5 valid ids). Per round the server
runs the ragged acceptance test on the K·(γ+1) target rows, warped lazily (`TargetRows`: p_i(x_i)
up to each device's first rejection, whole rows only for bonus and rejection rows), samples bonus
tokens, and corrects the rejected devices (residual + decoding the moved distribution); the numpy
reference it replaced (warp every row, then verify) is timed beside it. The forward pass it rides on
is a Qwen2.5-0.5B-shaped transformer (random weights: the cost does not depend on their values)
scoring the same K·(γ+1) tokens against a 128-token KV cache per device.

Run: .venv/bin/python benchmarks/bench_engine.py [--no-model] [--device cpu|cuda|auto]
(``--device cuda``: the forward pass on the GPU in bfloat16, as ``multispin serve --device cuda``
places the target, and the server's verify reads the logits there (`TargetRows`); the corrections
and the reference steps run on the CPU.)
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from multispin.speculative.codecs import make_codec
from multispin.speculative.residual import sample_residual
from multispin.speculative.sampling import sample_categorical
from multispin.speculative.target_rows import TargetRows
from multispin.speculative.verify import RaggedDrafts, verify
from multispin.speculative.warp import SamplingParams, warp

K, GAMMA, VOCAB, PAST = 20, 8, 151_665, 128


def median_ms(fn, repeats: int = 5, sync=lambda: None) -> float:
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()  # CUDA runs asynchronously: time the work, not its launch
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


# Logit noise of the draft against the target: 0.35 gives a per-token acceptance near 0.8, as
# SmolLM2's q5g64 draft measures (~0.86); the lazily warped verify reads rows up to each
# device's first rejection, so its cost depends on acceptance (printed with the result).
DRAFT_NOISE = 0.35


def engine_round(rng: np.random.Generator, k: int = K, gamma: int = GAMMA, vocab: int = VOCAB,
                 draft_noise: float = DRAFT_NOISE, device: str = "cpu"):
    """Build one round's inputs (k devices, γ tokens each, vocabulary `vocab`) and return closures
    for each engine step, the reference steps, and the round's verdicts. The server's steps read
    the target's logits on `device`, where the target's forward pass leaves them."""
    logits = torch.from_numpy((rng.standard_normal((k * (gamma + 1), vocab)) * 3).astype(np.float32))
    sampling = SamplingParams(temperature=1.0)
    probs = warp(logits, sampling)
    noise = torch.randn(logits.shape, generator=torch.Generator().manual_seed(1)) * draft_noise
    q_rows = warp(logits + noise, sampling)
    tokens, q_at = [], []
    for j in range(k):
        rows = q_rows[j * (gamma + 1): j * (gamma + 1) + gamma]
        toks = [int(sample_categorical(r, u)) for r, u in zip(rows, rng.random(gamma))]
        tokens.append(toks)
        q_at.append([float(r[t]) for r, t in zip(rows, toks)])
    drafts = RaggedDrafts.from_lists(tokens, q_at)
    acc_u, bonus_u = rng.random(k * gamma), rng.random(k)
    result = verify(drafts, probs, acc_u, bonus_u)
    rejected = result.rejected_devices
    ul_codec, dl_codec = make_codec("sparse:v_eff=1024,q=16"), make_codec("dense-fp32")
    q_payloads = {j: ul_codec.encode(q_rows[j * (gamma + 1) + result.num_accepted[j]]) for j in rejected}

    def correct():
        for i, j in enumerate(rejected):
            p = probs[result.rejection_row[j]]
            if i % 2 == 0:  # UL: server decodes q̂_j and samples
                q_hat = ul_codec.decode(q_payloads[j], vocab)
            else:  # DL: server encodes p_j, device decodes and samples
                p = dl_codec.decode(dl_codec.encode(p), vocab)
                q_hat = q_rows[j * (gamma + 1) + result.num_accepted[j]]
            sample_residual(p, q_hat, 0.5)

    # The server's path (roles.VerifierServer.verify): the rows warped lazily on their own device.
    on_device = logits.to(device)
    steps = {
        "verify: p_i(x_i), verdicts, bonus rows (TargetRows)": lambda: verify(
            drafts, TargetRows(on_device, sampling), acc_u, bonus_u),
        f"warp the {len(rejected)} rejection rows": lambda: TargetRows(on_device, sampling).warped(
            result.rejection_row[rejected]),
        f"correction ({len(rejected)} rejected, half UL/half DL)": correct,
    }
    # The numpy reference it replaced, timed for comparison (not part of the engine total).
    reference = {
        "reference: warp every target row": lambda: warp(logits, sampling),
        "reference: ragged verify on the warped rows": lambda: verify(drafts, probs, acc_u, bonus_u),
    }
    return steps, reference, result


def model_forward_ms(device: str = "cpu") -> float:
    from transformers import Qwen2Config, Qwen2ForCausalLM, DynamicCache

    config = Qwen2Config(vocab_size=151_936, hidden_size=896, intermediate_size=4864,
                         num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                         tie_word_embeddings=True)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32  # as models/placement.py places it
    model = Qwen2ForCausalLM(config).eval().to(device=device, dtype=dtype)
    head_dim = config.hidden_size // config.num_attention_heads

    def forward():
        past = [(torch.zeros(K, 2, PAST, head_dim, device=device, dtype=dtype),
                 torch.zeros(K, 2, PAST, head_dim, device=device, dtype=dtype))
                for _ in range(config.num_hidden_layers)]
        ids = torch.randint(0, VOCAB, (K, GAMMA + 1), device=device)
        with torch.inference_mode():
            model(input_ids=ids, past_key_values=DynamicCache(past), use_cache=True)

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    return median_ms(forward, repeats=3, sync=sync)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-model", action="store_true", help="skip the 0.5B forward pass")
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu",
                        help="where the forward pass runs (cuda: bfloat16)")
    args = parser.parse_args()
    from multispin.errors import ConfigError
    from multispin.models.placement import resolve_device

    try:
        device = resolve_device(args.device)
    except ConfigError as exc:
        parser.error(str(exc))
    steps, reference, result = engine_round(np.random.default_rng(0), device=device)
    accepted = int(result.num_accepted.sum())
    print(f"K={K}, γ={GAMMA}, V={VOCAB:,}, torch threads={torch.get_num_threads()}; {accepted} of {K * GAMMA} "
          f"draft tokens accepted, {int(result.rejected.sum())} devices rejected")
    total = 0.0
    for name, fn in steps.items():
        ms = median_ms(fn)
        total += ms
        print(f"  {name:<56} {ms:9.1f} ms")
    print(f"  {'engine total (server side)':<56} {total:9.1f} ms")
    for name, fn in reference.items():
        print(f"  {name:<56} {median_ms(fn):9.1f} ms")
    if not args.no_model:
        fwd = model_forward_ms(device)
        where = "CUDA, bfloat16" if device == "cuda" else "CPU, float32"
        print(f"  {f'target forward, Qwen2.5-0.5B shape ({where})':<56} {fwd:9.1f} ms")
        print(f"  engine / forward = {total / fwd:.3f}")


if __name__ == "__main__":
    main()
