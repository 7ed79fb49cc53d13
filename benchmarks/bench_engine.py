"""Engine math versus the model forward pass it accompanies, one round, side by side.

Setting: K = 20 devices, γ = 8, V = 151,665 (Qwen2.5 valid ids). Per round the server
runs the ragged acceptance test on the K·(γ+1) target rows, warped lazily (`TargetRows`: p_i(x_i)
up to each device's first rejection, whole rows only for bonus and rejection rows), samples bonus
tokens, and corrects the rejected devices (norm(max(0, p_j - q̂_j)) on torch, half UL at the
server, half DL: the server encodes p_j, the device decodes it and samples), as
`roles.VerifierServer` and `roles.DraftDevice` do. The numpy reference it replaced (warp every
row, verify, numpy residuals) is timed beside it. The forward pass it rides on is a
Qwen2.5-0.5B-shaped transformer (random weights: the cost does not depend on their values)
scoring the same K·(γ+1) tokens against a 128-token KV cache per device.

Each repetition times every engine step once and then the forward pass once, so the share
(warping + corrections) / forward is paired within a repetition; the median and the range over
repetitions are printed.

Run: .venv/bin/python benchmarks/bench_engine.py [--no-model] [--device cpu|cuda|auto] [--repeats N]
(``--device cuda``: the forward pass on the GPU in bfloat16, as ``multispin serve --device cuda``
places the target, and the server's steps read the logits there: verify, the rejection rows and
the UL corrections stay on the GPU; the DL payload is encoded from p_j brought to the CPU.)
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch  # noqa: TID253 (a benchmark of the torch engine)

from multispin.errors import ConfigError
from multispin.models.placement import resolve_device
from multispin.speculative.codecs import make_codec
from multispin.speculative.residual import residual_distribution, sample_residual
from multispin.speculative.sampling import sample_categorical
from multispin.speculative.target_rows import TargetRows
from multispin.speculative.verify import RaggedDrafts, verify
from multispin.speculative.warp import SamplingParams, warp

K, GAMMA, VOCAB, PAST = 20, 8, 151_665, 128


def _sync_for(device: str):
    return torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)


def median_ms(fn, repeats: int = 5, sync=lambda: None) -> float:
    return statistics.median(times_ms(fn, repeats, sync))


def times_ms(fn, repeats: int = 5, sync=lambda: None) -> list[float]:
    """`repeats` timings of fn after one untimed warm-up call."""
    fn()
    sync()
    return [_time_once(fn, sync) for _ in range(repeats)]


def _time_once(fn, sync=lambda: None) -> float:
    t0 = time.perf_counter()
    fn()
    sync()  # CUDA runs asynchronously: time the work, not its launch
    return 1000 * (time.perf_counter() - t0)


# Logit noise of the draft against the target. Its per-token acceptance Σ_x min(p(x), q(x)) is
# 0.863 (mean over the 180 rows, sd 0.010; printed with the result), near SmolLM2's q5g64 draft
# (~0.86). At γ = 8 a device stops at its first rejection, so only α(1 - α^8) / (1 - α) ≈ 4.4 of
# its 8 drafts are accepted on average (0.55 of all drafts): most devices are corrected each round.
# The lazily warped verify reads rows up to each device's first rejection, so its cost depends on α.
DRAFT_NOISE = 0.35


def engine_round(
    rng: np.random.Generator,
    k: int = K,
    gamma: int = GAMMA,
    vocab: int = VOCAB,
    draft_noise: float = DRAFT_NOISE,
    device: str = "cpu",
):
    """Build one round's inputs (k devices, γ tokens each, vocabulary `vocab`) and return closures
    for each engine step ("warping: ..." and "corrections: ..."), the reference steps, and the
    round's verdicts and its per-token acceptance (the rows' mean Σ min(p, q)). The server's steps read
    the target's logits on `device`, where the target's forward pass leaves them; each closure
    waits for the device, so timing one times its work."""
    logits = torch.from_numpy((rng.standard_normal((k * (gamma + 1), vocab)) * 3).astype(np.float32))
    sampling = SamplingParams(temperature=1.0)
    probs = warp(logits, sampling)
    noise = torch.randn(logits.shape, generator=torch.Generator().manual_seed(1)) * draft_noise
    q_rows = warp(logits + noise, sampling)
    tokens, q_at = [], []
    for j in range(k):
        rows = q_rows[j * (gamma + 1) : j * (gamma + 1) + gamma]
        toks = [int(sample_categorical(r, u)) for r, u in zip(rows, rng.random(gamma))]
        tokens.append(toks)
        q_at.append([float(r[t]) for r, t in zip(rows, toks)])
    drafts = RaggedDrafts.from_lists(tokens, q_at)
    acc_u, bonus_u = rng.random(k * gamma), rng.random(k)
    result = verify(drafts, probs, acc_u, bonus_u)
    rejected = result.rejected_devices
    ul_codec, dl_codec = make_codec("sparse:v_eff=1024,q=16"), make_codec("dense-fp32")
    q_of = {j: q_rows[j * (gamma + 1) + result.num_accepted[j]] for j in rejected}  # the device's q̂_j
    q_payloads = {j: ul_codec.encode(q_of[j]) for j in rejected}
    ul, dl = rejected[0::2], rejected[1::2]
    corr_u = rng.random(k)

    # The server's path (roles.VerifierServer): the rows warped lazily on their own device, p_j
    # kept there for the correction.
    on_device = logits.to(device)
    sync = _sync_for(device)
    p_j = dict(zip(rejected, TargetRows(on_device, sampling).warped(result.rejection_row[rejected])))

    def correct_ul():  # the server decodes q̂_j and samples next to p_j
        for j in ul:
            sample_residual(p_j[j], ul_codec.decode(q_payloads[j], vocab), corr_u[j])

    def correct_dl():  # the server encodes p_j; the device decodes it and samples
        for j in dl:
            p_hat = dl_codec.decode(dl_codec.encode(p_j[j].cpu().numpy()), vocab)
            sample_residual(p_hat, q_of[j], corr_u[j])

    def synced(fn):
        return lambda: (fn(), sync())

    steps = {
        "warping: verify (p_i(x_i), verdicts, bonus rows)": lambda: verify(
            drafts, TargetRows(on_device, sampling), acc_u, bonus_u
        ),
        f"warping: the {len(rejected)} rejection rows p_j": synced(
            lambda: TargetRows(on_device, sampling).warped(result.rejection_row[rejected])
        ),
        f"corrections: {len(ul)} UL (decode q̂_j, sample at the server)": correct_ul,
        f"corrections: {len(dl)} DL (encode p_j; device decodes, samples)": correct_dl,
    }

    def numpy_corrections():
        for j in rejected:
            sample_categorical(residual_distribution(probs[result.rejection_row[j]], q_of[j]), corr_u[j])

    # The numpy reference it replaced, timed for comparison (not part of the engine total).
    reference = {
        "reference: warp every target row": lambda: warp(logits, sampling),
        "reference: ragged verify on the warped rows": lambda: verify(drafts, probs, acc_u, bonus_u),
        f"reference: numpy residuals of the {len(rejected)} rejections": numpy_corrections,
    }
    acceptance = float(np.minimum(probs, q_rows).sum(axis=-1).mean())
    return steps, reference, result, acceptance


def model_forward(device: str = "cpu"):
    """One forward pass of a Qwen2.5-0.5B-shaped target over the round's K·(γ+1) tokens, as a
    closure that waits for the device."""
    from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=151_936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    dtype = torch.bfloat16 if device == "cuda" else torch.float32  # as models/placement.py places it
    model = Qwen2ForCausalLM(config).eval().to(device=device, dtype=dtype)
    head_dim = config.hidden_size // config.num_attention_heads
    sync = _sync_for(device)

    def forward():
        past = [
            (
                torch.zeros(K, 2, PAST, head_dim, device=device, dtype=dtype),
                torch.zeros(K, 2, PAST, head_dim, device=device, dtype=dtype),
            )
            for _ in range(config.num_hidden_layers)
        ]
        ids = torch.randint(0, VOCAB, (K, GAMMA + 1), device=device)
        with torch.inference_mode():
            model(input_ids=ids, past_key_values=DynamicCache(past), use_cache=True)
        sync()

    return forward


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    """Median and range over repetitions."""
    lo, mid, hi = min(values), statistics.median(values), max(values)
    return f"{fmt.format(mid)} ({fmt.format(lo)}–{fmt.format(hi)})"


def repeated(steps: dict, forward, repeats: int) -> tuple[dict[str, list[float]], list[float]]:
    """Per repetition: every step once, then the forward pass once (after one warm-up of each),
    so a repetition's share compares timings taken under the same load."""
    for fn in steps.values():
        fn()
    if forward is not None:
        forward()
    ms: dict[str, list[float]] = {name: [] for name in steps}
    fwd: list[float] = []
    for _ in range(repeats):
        for name, fn in steps.items():
            ms[name].append(_time_once(fn))  # each step waits for its device itself
        if forward is not None:
            fwd.append(_time_once(forward))
    return ms, fwd


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-model", action="store_true", help="skip the 0.5B forward pass")
    parser.add_argument(
        "--device", choices=("cpu", "cuda", "auto"), default="cpu", help="where the forward pass runs (cuda: bfloat16)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="repetitions (>= 2) for the spread")
    args = parser.parse_args()
    if args.repeats < 2:
        parser.error(f"--repeats: must be an integer >= 2 (got {args.repeats})")
    try:
        device = resolve_device(args.device)
    except ConfigError as exc:
        parser.error(str(exc))
    steps, reference, result, acceptance = engine_round(np.random.default_rng(0), device=device)
    accepted = int(result.num_accepted.sum())
    print(
        f"K={K}, γ={GAMMA}, V={VOCAB:,}, torch threads={torch.get_num_threads()}, {args.repeats} repetitions; "
        f"per-token acceptance Σ min(p, q) = {acceptance:.3f}; {accepted} of {K * GAMMA} draft tokens "
        f"accepted, {int(result.rejected.sum())} devices rejected"
    )
    forward = None if args.no_model else model_forward(device)
    ms, fwd = repeated(steps, forward, args.repeats)
    print("  median (min–max) over repetitions, ms")
    for name, values in ms.items():
        print(f"  {name:<60} {spread(values):>22}")
    groups = {g: [sum(v) for v in zip(*(ms[n] for n in ms if n.startswith(g)))] for g in ("warping", "corrections")}
    total = [w + c for w, c in zip(groups["warping"], groups["corrections"])]
    for g, values in groups.items():
        print(f"  {g + ' (sum of its steps)':<60} {spread(values):>22}")
    print(f"  {'engine total: warping + corrections':<60} {spread(total):>22}")
    for name, fn in reference.items():
        print(f"  {name:<60} {spread(times_ms(fn, args.repeats)):>22}")
    if forward is not None:
        where = "CUDA, bfloat16" if device == "cuda" else "CPU, float32"
        print(f"  {f'target forward, Qwen2.5-0.5B shape ({where})':<60} {spread(fwd):>22}")
        for name, values in (*groups.items(), ("warping + corrections", total)):
            share = [100 * e / f for e, f in zip(values, fwd)]  # paired within each repetition
            print(f"  {name + ' / forward, %':<60} {spread(share, '{:.2f}'):>22}")


if __name__ == "__main__":
    main()
