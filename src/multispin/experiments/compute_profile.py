"""Time the models on this host and fit the server's verification profile.

T_ver(b, γ) = T_ver^0 + b·T_ver^1 + b·(γ+1)·T_ver^tok for a batch of b devices with γ draft
tokens each (docs/system-model.md §2), fitted by non-negative least squares to timed batched forward
passes; the draft's per-token latency is timed one token at a time, as a device drafts.
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable

import numpy as np
from scipy.optimize import nnls

from multispin.models.base import next_logits
from multispin.progress import Step, StepReporter, reporter

PAST_TOKENS = 64


def median_s(fn: Callable[[], None], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_verification(
    target, batch_sizes, draft_lens, repeats: int = 3, progress: StepReporter | None = None
) -> list[dict]:
    """Median wall time of one batched target pass (a `BatchedLM`) per (batch size, γ);
    ``progress`` receives a `Step` after every batch size."""
    say = reporter(progress)
    say(Step("timing verification", 0, len(batch_sizes), "batch sizes"))
    rng = np.random.default_rng(0)
    rows = []
    max_b = max(batch_sizes)
    for s in range(max_b):
        target.open(s)
    target.extend_many({s: rng.integers(3, target.vocab_size, PAST_TOKENS).tolist() for s in range(max_b)})
    for b in batch_sizes:
        for gamma in draft_lens:
            new = {s: rng.integers(3, target.vocab_size, gamma + 1).tolist() for s in range(b)}

            def step(new=new, b=b):
                target.extend_many(new)
                for s in range(b):
                    target.rollback(s, PAST_TOKENS)

            rows.append({"batch": b, "draft_len": gamma, "seconds": median_s(step, repeats)})
        say(Step("timing verification", list(batch_sizes).index(b) + 1, len(batch_sizes), "batch sizes"))
    for s in range(max_b):
        target.close(s)
    return rows


def fit_verification(rows: list[dict]) -> dict:
    """Non-negative least squares for (T_ver^0, T_ver^1, T_ver^tok), with R²."""
    a = np.array([[1.0, r["batch"], r["batch"] * (r["draft_len"] + 1)] for r in rows])
    y = np.array([r["seconds"] for r in rows])
    coef, _ = nnls(a, y)
    pred = a @ coef
    ss_res = float(((y - pred) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum()) or 1.0
    return {
        "t_ver0_s": float(coef[0]),
        "t_ver1_s": float(coef[1]),
        "t_ver_tok_s": float(coef[2]),
        "r2": 1.0 - ss_res / ss_tot,
    }


def time_draft_per_token(lm, tokens: int = 32, repeats: int = 3) -> float:
    """Median seconds per drafted token (one-token forward passes over a growing cache)."""
    rng = np.random.default_rng(1)
    prompt = rng.integers(3, lm.vocab_size, PAST_TOKENS).tolist()

    def run():
        lm.reset()
        next_logits(lm, prompt)
        for tok in rng.integers(3, lm.vocab_size, tokens).tolist():
            next_logits(lm, [tok])

    def prefill_only():
        lm.reset()
        next_logits(lm, prompt)

    return max(0.0, (median_s(run, repeats) - median_s(prefill_only, repeats)) / tokens)


def profile_pair(
    pair, batch_sizes=(1, 2, 4, 8), draft_lens=(1, 2, 4, 8), repeats: int = 3, progress: StepReporter | None = None
) -> dict:
    """A compute profile of `pair` on this host (what `multispin profile` writes); ``progress``
    receives a `Step` after every draft timed and every batch size."""
    import torch

    from multispin.models.hf import HFBatchedLM, draft_lm  # lazy: imports torch

    say = reporter(progress)
    drafts = {}
    say(Step("timing drafts", 0, len(pair.drafts), "drafts"))
    for i, name in enumerate(pair.drafts):
        drafts[name] = time_draft_per_token(draft_lm(pair, name), repeats=repeats)
        say(Step("timing drafts", i + 1, len(pair.drafts), "drafts"))
    rows = time_verification(
        HFBatchedLM(pair.target, pair.vocab_size), batch_sizes, draft_lens, repeats, progress=progress
    )
    fit = fit_verification(rows)
    return {
        "pair": pair.name,
        "vocab_size": pair.vocab_size,  # scenarios of another vocabulary refuse this profile
        "host": {
            "machine": platform.machine(),
            "processor": platform.processor() or "unknown",
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
        },
        "draft_latency_s_per_token": drafts,
        **fit,
        "past_tokens": PAST_TOKENS,
        "samples": rows,
    }
