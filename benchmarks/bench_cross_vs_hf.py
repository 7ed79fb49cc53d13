"""Cross-vocabulary speculative decoding, multispin vs Hugging Face assisted generation, on the
same pair, prompts and machine, side by side in one run.

Pair: SmolLM2-135M-Instruct drafts for Qwen2.5-Coder-0.5B-Instruct (different tokenizers).
Greedy decoding, so every method must give the target's own greedy text (checked: "exact").

- plain: the target alone (`model.generate`), the reference text and speed;
- HF: `generate(assistant_model=..., tokenizer=..., assistant_tokenizer=...)` with a constant
  γ draft tokens per pass (Hugging Face's different-tokenizer assisted generation);
- multispin K=1: one device, `generate` with the same γ;
- K=4: four prompts as four multispin devices in one batched round loop vs four HF loops one
  after the other.

Per prompt (K=1) or per group of four (K=4) the two wall times are paired; the table gives the
geometric mean of multispin/HF speed with its 95% t-interval over the pairs, tokens per target
pass (target forward passes counted by a hook), and exactness.

Run: .venv/bin/python benchmarks/bench_cross_vs_hf.py [--prompts 8] [--max-new-tokens 32]
     [--gamma 4] [--threads 2] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from scipy import stats

from multispin.models.acquire import model_dir
from multispin.models.prompts import encode_prompt, load_prompts
from multispin.models.registry import resolve_pair
from multispin.runtime.round.session import GenerateConfig, generate

PAIR = "smollm2-135m:qwen2.5-coder-0.5b"


class PassCounter:
    """Counts forward passes of a torch module."""

    def __init__(self, model):
        self.calls = 0
        model.register_forward_hook(lambda *_: self._hit())

    def _hit(self):
        self.calls += 1


def paired_ratio(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Geometric mean of a_i / b_i with a 95% t-interval (log scale)."""
    logs = np.log(np.asarray(a) / np.asarray(b))
    m = float(logs.mean())
    if len(logs) < 2:
        return float(np.exp(m)), float("nan"), float("nan")
    half = float(stats.t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / np.sqrt(len(logs)))
    return float(np.exp(m)), float(np.exp(m - half)), float(np.exp(m + half))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--task", default="chat", choices=["chat", "code"])
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    pair = resolve_pair(PAIR)
    draft_name = pair.default_draft
    if args.device != "cpu":
        pair.target.to(args.device)
        pair.drafts[draft_name].to(args.device)
    target, draft = pair.target, pair.drafts[draft_name]
    from transformers import AutoTokenizer

    draft_tok = AutoTokenizer.from_pretrained(str(model_dir("smollm2-135m")))
    draft.generation_config.num_assistant_tokens = args.gamma
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    counter = PassCounter(target)
    texts = load_prompts(args.task, args.prompts, 0, source="auto")
    eos = list(pair.eos_token_ids)
    pad = pair.tokenizer.pad_token_id or eos[0]

    def hf_run(ids: list[int], assisted: bool) -> tuple[list[int], float, int]:
        x = torch.tensor([ids], device=target.device)
        kw = dict(max_new_tokens=args.max_new_tokens, do_sample=False, eos_token_id=eos, pad_token_id=pad)
        if assisted:
            kw.update(assistant_model=draft, tokenizer=pair.tokenizer, assistant_tokenizer=draft_tok)
        before, t0 = counter.calls, time.perf_counter()
        with torch.inference_mode():
            out = target.generate(x, attention_mask=torch.ones_like(x), **kw)
        wall = time.perf_counter() - t0
        return out[0, len(ids) :].tolist(), wall, counter.calls - before

    def ms_run(batch: list[str]) -> tuple[list[list[int]], float, int]:
        cfg = GenerateConfig(
            pair=PAIR,
            devices=len(batch),
            draft_len=args.gamma,
            mode="ul",
            temperature=0.0,
            max_new_tokens=args.max_new_tokens,
            prompts=batch,
            drafts=[draft_name],
        )
        before = counter.calls
        res = generate(cfg, pair=pair)
        return [d.tokens for d in res.devices], res.wall_s, counter.calls - before

    def trim(tokens: list[int]) -> list[int]:  # up to and including the first EOS
        for i, t in enumerate(tokens):
            if t in eos:
                return tokens[: i + 1]
        return tokens

    ms_run(texts[:1])  # warm-up: first calls allocate
    rows = {"plain": [], "hf": [], "ms": []}
    exact = {"hf": True, "ms": True}
    for text in texts:
        ids = encode_prompt(pair, text)
        ref, t_plain, _ = hf_run(ids, assisted=False)
        hf, t_hf, p_hf = hf_run(ids, assisted=True)
        (ms,), t_ms, p_ms = ms_run([text])
        exact["hf"] &= trim(hf) == trim(ref)
        exact["ms"] &= trim(ms) == trim(ref)
        n = len(trim(ref))
        rows["plain"].append((n, t_plain, n))
        rows["hf"].append((len(trim(hf)), t_hf, p_hf))
        rows["ms"].append((len(trim(ms)), t_ms, p_ms))

    def speed(r):
        return [n / t for n, t, _ in r]

    def per_pass(r):
        return sum(n for n, _, _ in r) / max(1, sum(p for _, _, p in r))

    print(
        f"{PAIR}, greedy, γ={args.gamma}, {len(texts)} {args.task} prompts, ≤{args.max_new_tokens} new "
        f"tokens, {args.threads} threads on {args.device}"
    )
    print(f"{'method':<16}{'tokens/s':>10}{'tok/target pass':>17}{'exact':>7}")
    for key, name in (("plain", "target only"), ("hf", "HF assisted"), ("ms", "multispin K=1")):
        ex = "yes" if key == "plain" or exact[key] else "NO"
        print(f"{name:<16}{statistics.mean(speed(rows[key])):>10.2f}{per_pass(rows[key]):>17.2f}{ex:>7}")
    g, lo, hi = paired_ratio(speed(rows["ms"]), speed(rows["hf"]))
    print(
        f"multispin K=1 / HF assisted speed: {g:.2f}x (95% interval {lo:.2f} … {hi:.2f}, {len(texts)} paired prompts)"
    )

    groups = [texts[i : i + 4] for i in range(0, len(texts) - 3, 4)]
    ms4, hf4, exact4 = [], [], True
    for group in groups:
        toks, t_ms4, _ = ms_run(group)
        t_hf4, n_hf4 = 0.0, 0
        for text, got in zip(group, toks):
            ids = encode_prompt(pair, text)
            hf, t, _ = hf_run(ids, assisted=True)
            ref, _, _ = hf_run(ids, assisted=False)
            exact4 &= trim(got) == trim(ref)
            t_hf4 += t
            n_hf4 += len(trim(hf))
        ms4.append(sum(len(trim(t)) for t in toks) / t_ms4)
        hf4.append(n_hf4 / t_hf4)
    if groups:
        g, lo, hi = paired_ratio(ms4, hf4)
        print(
            f"K=4: multispin one batched loop {statistics.mean(ms4):.2f} tokens/s vs 4 HF loops "
            f"{statistics.mean(hf4):.2f} tokens/s: {g:.2f}x (95% interval {lo:.2f} … {hi:.2f}, "
            f"{len(groups)} paired groups; exact {'yes' if exact4 else 'NO'})"
        )


if __name__ == "__main__":
    main()
