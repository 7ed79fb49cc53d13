"""multispin against Hugging Face transformers doing the same work, side by side in one process.

Three configurations, greedy, on the same prompts, γ and draft model:

1. target-only, K = 1: HF ``generate`` (no assistant) against ``generate`` with γ = 0, prompt
   after prompt;
2. speculative, K = 1, γ: HF assisted generation (``assistant_model``) against ``generate`` with one
   device, prompt after prompt;
3. K devices at once: one ``generate`` with K devices (drafts batched over the devices that share
   the draft, one batched verify per round) against K HF assisted loops one after another (HF's
   assisted generation takes one sequence at a time), i.e. the HF time of configuration 2.

HF's draft is set to the same constant γ with its confidence threshold off, so both sides do the
same work; every forward pass of target and draft is counted on both sides (a hook on each
module) and printed next to the times. Every configuration must emit exactly the target's greedy
tokens on both sides: the benchmark checks them token for token and exits 1 if any differ.

Repetitions are interleaved (HF and multispin alternate, the order flipping each repetition) and
each repetition gives a paired ratio multispin tok/s / HF tok/s; the table shows the geometric
mean ratio and its 95% Student-t interval over repetitions (on log ratios), with the range.

Run: .venv/bin/python benchmarks/bench_vs_hf.py [--pair smollm2-135m] [--draft q5g64] [--gamma 4]
     [--prompts 8] [--max-new-tokens 64] [--reps 3] [--json out.json]
(``--pair tiny`` for a quick run without downloads.)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch  # noqa: TID253  (a benchmark of the models)

from multispin.experiments.intervals import mean_ci
from multispin.models.base import LoadedPair
from multispin.models.prompts import default_prompts, encode_prompt
from multispin.models.registry import resolve_pair
from multispin.runtime.round.session import GenerateConfig, generate


@dataclass
class Measured:
    tokens: list[list[int]]  # per prompt
    seconds: float
    target_passes: int
    draft_passes: int

    @property
    def tok_per_s(self) -> float:
        return sum(len(t) for t in self.tokens) / self.seconds


@contextmanager
def counting(module: torch.nn.Module):
    """Count forward calls of `module` (top-level calls: one per model pass)."""
    calls = [0]
    handle = module.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    try:
        yield calls
    finally:
        handle.remove()


def timed(pair: LoadedPair, draft: torch.nn.Module, run) -> Measured:
    with counting(pair.target) as t_calls, counting(draft) as d_calls:
        start = time.perf_counter()
        tokens = run()
        seconds = time.perf_counter() - start
    return Measured(tokens, seconds, t_calls[0], d_calls[0])


def hf_runner(pair: LoadedPair, draft: torch.nn.Module | None, prompts: list[list[int]], gamma: int, max_new: int):
    """HF greedy generation, one prompt after another (assisted when `draft` is given)."""
    if draft is not None:
        cfg = draft.generation_config
        cfg.num_assistant_tokens = gamma
        cfg.num_assistant_tokens_schedule = "constant"
        cfg.assistant_confidence_threshold = 0.0  # no early stop: exactly γ draft tokens a round
    eos = list(pair.eos_token_ids) or None
    pad = getattr(pair.tokenizer, "pad_token_id", None)
    pad = pad if pad is not None else (eos[0] if eos else 0)

    @torch.inference_mode()
    def run() -> list[list[int]]:
        out = []
        for ids in prompts:
            x = torch.tensor([ids], dtype=torch.long, device=pair.target.device)
            kw = {"assistant_model": draft} if draft is not None else {}
            y = pair.target.generate(
                x,
                attention_mask=torch.ones_like(x),
                do_sample=False,
                max_new_tokens=max_new,
                eos_token_id=eos,
                pad_token_id=pad,
                temperature=None,
                top_p=None,
                top_k=None,
                **kw,
            )
            out.append(y[0, len(ids) :].tolist())
        return out

    return run


def ms_runner(pair: LoadedPair, draft_name: str, texts: list[str], gamma: int, max_new: int, together: bool):
    """multispin `generate`, greedy: all prompts as devices of one run, or one run per prompt."""

    def config(prompts: list[str]) -> GenerateConfig:
        return GenerateConfig(
            pair=pair.name,
            devices=len(prompts),
            draft_len=gamma,
            max_new_tokens=max_new,
            temperature=0.0,
            drafts=[draft_name],
            prompts=prompts,
            seed=0,
        )

    def run() -> list[list[int]]:
        groups = [texts] if together else [[t] for t in texts]
        return [d.tokens for g in groups for d in generate(config(g), pair=pair).devices]

    return run


def paired_summary(ratios: list[float]) -> dict:
    mean, lo, hi, n = mean_ci(math.log(r) for r in ratios)
    return {
        "ratio": math.exp(mean),
        "ci95": [math.exp(lo), math.exp(hi)] if n > 1 else None,
        "range": [min(ratios), max(ratios)],
        "ratios": ratios,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", default="smollm2-135m")
    parser.add_argument("--draft", default=None, help="draft name (default: the pair's first)")
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=8, help="prompts, and K of configuration 3")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    for name in ("gamma", "prompts", "max_new_tokens", "reps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be >= 1")

    pair = resolve_pair(args.pair, drafts=[args.draft] if args.draft else None)
    draft_name = args.draft or pair.default_draft
    draft = pair.drafts[draft_name]
    texts = default_prompts(args.prompts, 0)
    prompts = [encode_prompt(pair, t) for t in texts]
    g, n = args.gamma, args.max_new_tokens

    def configurations(n: int) -> dict:
        return {
            "target-only, K = 1": (
                hf_runner(pair, None, prompts, g, n),
                ms_runner(pair, draft_name, texts, 0, n, False),
            ),
            f"speculative, K = 1, γ = {g}": (
                hf_runner(pair, draft, prompts, g, n),
                ms_runner(pair, draft_name, texts, g, n, False),
            ),
            f"K = {len(texts)} in one batched run vs {len(texts)} HF assisted loops": (
                None,
                ms_runner(pair, draft_name, texts, g, n, True),
            ),
        }

    configs = configurations(n)
    spec_key = list(configs)[1]
    print(
        f"pair {pair.name}, draft {draft_name}, γ = {g}, {len(texts)} prompts, {n} new tokens, greedy, "
        f"{args.reps} interleaved repetitions, torch threads {torch.get_num_threads()}",
        flush=True,
    )

    # Warm-up (first calls allocate and pick kernels), untimed: every path with 2 new tokens.
    for hf, ms in configurations(min(n, 2)).values():
        for run in (hf, ms):
            if run is not None:
                run()

    results: dict[str, dict[str, list[Measured]]] = {k: {"hf": [], "ms": []} for k in configs}
    for rep in range(args.reps):
        for key, (hf, ms) in configs.items():
            order = [("hf", hf), ("ms", ms)] if rep % 2 == 0 else [("ms", ms), ("hf", hf)]
            for side, run in order:
                if run is None:  # configuration 3's HF side is configuration 2's (same work)
                    continue
                results[key][side].append(timed(pair, draft, run))
            print(f"  rep {rep + 1}/{args.reps} {key}: done", flush=True)
    results[list(configs)[2]]["hf"] = results[spec_key]["hf"]

    mismatches, table = [], {}
    greedy = results["target-only, K = 1"]["hf"][0].tokens
    for key, sides in results.items():
        for side, runs in sides.items():
            for m in runs:
                if m.tokens != greedy:
                    mismatches.append(f"{key} ({side})")
        ratios = [m.tok_per_s / h.tok_per_s for m, h in zip(sides["ms"], sides["hf"])]
        table[key] = {
            "hf_tok_s": sum(h.tok_per_s for h in sides["hf"]) / len(sides["hf"]),
            "ms_tok_s": sum(m.tok_per_s for m in sides["ms"]) / len(sides["ms"]),
            "hf_passes": {"target": sides["hf"][0].target_passes, "draft": sides["hf"][0].draft_passes},
            "ms_passes": {"target": sides["ms"][0].target_passes, "draft": sides["ms"][0].draft_passes},
            **paired_summary(ratios),
        }

    print(
        "\n| configuration | HF tok/s | multispin tok/s | paired ratio (95% CI) [range] "
        "| HF passes target/draft | multispin passes target/draft |"
    )
    print("|---|---|---|---|---|---|")
    for key, row in table.items():
        ci = "–".join(f"{x:.2f}" for x in row["ci95"]) if row["ci95"] else "n/a"
        rng = "–".join(f"{x:.2f}" for x in row["range"])
        print(
            f"| {key} | {row['hf_tok_s']:.2f} | {row['ms_tok_s']:.2f} | {row['ratio']:.2f} ({ci}) [{rng}] "
            f"| {row['hf_passes']['target']}/{row['hf_passes']['draft']} "
            f"| {row['ms_passes']['target']}/{row['ms_passes']['draft']} |"
        )
    n_tokens = sum(len(t) for t in greedy)
    print(
        f"\ntokens: {n_tokens} over {len(greedy)} prompts; "
        + (
            "every run emitted the target's greedy tokens"
            if not mismatches
            else f"MISMATCH against the target's greedy tokens: {', '.join(sorted(set(mismatches)))}"
        )
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "pair": pair.name,
                    "draft": draft_name,
                    "gamma": g,
                    "prompts": len(texts),
                    "max_new_tokens": n,
                    "reps": args.reps,
                    "torch_threads": torch.get_num_threads(),
                    "tokens_equal": not mismatches,
                    "configurations": table,
                },
                fh,
                indent=2,
            )
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
