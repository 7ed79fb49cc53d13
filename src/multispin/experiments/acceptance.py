"""Measure acceptance on real prompts: α = E[Σ min(p, q)], per-position acceptance, and the mean
accepted length at a given γ next to the i.i.d. prediction (1 − α^{γ+1}) / (1 − α).

Every prompt is one device of a real Multi-SPIN run (one batched target pass per round), so the
per-position rates come from actual verdicts; α is computed afterwards from full target and draft
passes over each generated text. Confidence intervals bootstrap over prompts (the tokens of one
prompt are correlated, the prompts are independent).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from pydantic import Field

from multispin.experiments.progress import Progress, Step, reporter
from multispin.models.base import BatchedLM, SequenceLM
from multispin.runtime.local import FixedDraftLengths, FixedMode, run_rounds
from multispin.runtime.roles import DraftDevice, VerifierServer
from multispin.runtime.round import PolicyPair
from multispin.speculative.codecs import make_codec
from multispin.speculative.warp import SamplingFields, SamplingParams, warp

N_BOOTSTRAP = 1000


class MeasureConfig(SamplingFields):
    pair: str = "smollm2-135m"
    draft: str | None = None  # default: the pair's first draft
    task: str = Field("chat", pattern="^(chat|code)$")
    prompts: int = Field(50, ge=2, le=2000)
    draft_len: int = Field(8, ge=1, le=20)
    max_new_tokens: int = Field(64, ge=2, le=4096)
    seed: int = 0
    source: str = Field("auto", pattern="^(auto|builtin|sharegpt|humaneval)$")


@dataclass
class PromptMeasurement:
    overlap: np.ndarray  # Σ min(p_t, q_t) at every generated position t
    accepted: list[int]  # accepted draft tokens per full-length round
    drafted: int  # γ of those rounds


def iid_mean_accepted_length(alpha: float, gamma: int) -> float:
    """E[N] = (1 − α^{γ+1}) / (1 − α): tokens per round if acceptances were i.i.d. with rate α."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def run_prompts(target: BatchedLM, make_draft: Callable[[], SequenceLM],
                score_target: Callable[[], SequenceLM], prompts: Sequence[Sequence[int]],
                gamma: int, sampling: SamplingParams, seed: int, max_new_tokens: int,
                eos_ids: Sequence[int] = (),
                progress: Progress | None = None) -> list[PromptMeasurement]:
    """Generate from every prompt as one device each, then score α on what was generated.
    ``progress`` receives a :class:`Step` after every round (tokens generated; a prompt that
    stopped at EOS counts as complete) and after every scored prompt."""
    say = reporter(progress)
    codec = make_codec("dense-fp32")
    server = VerifierServer(target, sampling, codec, codec, seed)
    devices = {k: DraftDevice(k, make_draft(), sampling, codec, codec, seed, list(p))
               for k, p in enumerate(prompts)}
    total = max_new_tokens * len(devices)
    eos = set(eos_ids)

    def tokens_done(dev) -> int:
        stopped = bool(dev.generated) and dev.generated[-1] in eos
        return max_new_tokens if stopped else min(max_new_tokens, len(dev.generated))

    def on_round(round_idx, records) -> None:
        say(Step("generating", sum(tokens_done(d) for d in devices.values()), total, "tokens"))

    policy = PolicyPair(FixedDraftLengths({k: gamma for k in devices}), FixedMode("ul"))
    say(Step("generating", 0, total, "tokens"))
    logs = run_rounds(server, devices, policy, max_new_tokens, eos_ids, on_round=on_round)
    say(Step("generating", total, total, "tokens"))
    out = []
    for k, dev in devices.items():
        say(Step("scoring α", k, len(devices), "prompts"))
        n_gen = len(dev.generated)
        overlap = np.zeros(0)
        if n_gen:
            rows = slice(dev.num_prompt - 1, dev.num_prompt - 1 + n_gen)
            p = warp(score_target().extend(dev.tokens)[rows], sampling)
            q = warp(make_draft().extend(dev.tokens)[rows], sampling)
            overlap = np.minimum(p, q).sum(axis=-1)
        full = [r for r in logs[k] if r.draft_len == gamma]
        out.append(PromptMeasurement(overlap, [r.num_accepted for r in full], gamma))
    say(Step("scoring α", len(devices), len(devices), "prompts"))
    return out


def summarise(measured: list[PromptMeasurement], gamma: int, seed: int) -> dict:
    """Point estimates and 95% bootstrap intervals (resampling prompts)."""
    rng = np.random.default_rng([seed, 99])
    n = len(measured)

    def stats_of(idx: np.ndarray) -> tuple[float, float, np.ndarray]:
        ov = np.concatenate([measured[i].overlap for i in idx]) if len(idx) else np.zeros(0)
        acc = np.array([a for i in idx for a in measured[i].accepted], dtype=float)
        alpha = float(ov.mean()) if ov.size else float("nan")
        mean_len = float(1.0 + acc.mean()) if acc.size else float("nan")
        reach = np.array([(acc >= i).sum() for i in range(gamma + 1)], dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            conditional = reach[1:] / reach[:-1]  # P(accept position i | reached it)
        return alpha, mean_len, conditional

    alpha, mean_len, conditional = stats_of(np.arange(n))
    boot = [stats_of(rng.integers(0, n, n)) for _ in range(N_BOOTSTRAP)]

    def ci(values) -> list[float]:
        v = np.array(values, dtype=float)
        v = v[np.isfinite(v)]
        if not v.size:
            return [float("nan"), float("nan")]
        return [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))]

    cond_boot = np.array([b[2] for b in boot])
    n_rounds = sum(len(m.accepted) for m in measured)
    return {
        "alpha": alpha,
        "alpha_ci95": ci([b[0] for b in boot]),
        "mean_accepted_length": mean_len,
        "mean_accepted_length_ci95": ci([b[1] for b in boot]),
        "iid_prediction": iid_mean_accepted_length(alpha, gamma),
        "per_position_rate": [float(x) for x in conditional],
        "per_position_ci95": [ci(cond_boot[:, i]) for i in range(gamma)],
        "draft_len": gamma,
        "num_prompts": n,
        "num_tokens": int(sum(m.overlap.size for m in measured)),
        "num_rounds": n_rounds,
        "notes": undefined_notes(alpha, n_rounds, conditional, gamma),
    }


def _spans(numbers: list[int]) -> str:
    """``[3, 4, 5, 8]`` → ``3–5, 8``."""
    out, start = [], None
    for i, x in enumerate(numbers):
        start = x if start is None else start
        if i + 1 == len(numbers) or numbers[i + 1] != x + 1:
            out.append(f"{start}" if start == x else f"{start}–{x}")
            start = None
    return ", ".join(out)


def undefined_notes(alpha: float, n_rounds: int, conditional: np.ndarray, gamma: int) -> list[str]:
    """One line for every estimate that is undefined (NaN) and why."""
    notes = []
    if not np.isfinite(alpha):
        notes.append("α: no token was generated")
    if n_rounds == 0:
        notes.append(f"mean accepted length and per-position acceptance: no round drafted the full "
                     f"γ = {gamma} (each prompt's text ended first); raise --max-new-tokens well above --draft-len")
        return notes
    unreached = [i + 1 for i, r in enumerate(conditional) if not np.isfinite(r)]
    if unreached:
        notes.append(f"acceptance at position {_spans(unreached)}: no round reached it "
                     f"(every draft was rejected earlier); more --prompts give it samples")
    return notes


def measure(config: MeasureConfig, pair=None, progress: Progress | None = None) -> dict:
    """`multispin measure`: an acceptance profile for one (pair, draft, task); ``progress``
    receives a :class:`~multispin.experiments.progress.Step` per round and per scored prompt."""
    from multispin.models.hf import HFBatchedLM, HFSequenceLM
    from multispin.models.prompts import load_prompts
    from multispin.models.registry import resolve_pair
    from multispin.runtime.session import encode_prompt

    drafts = [config.draft] if config.draft else None
    pair = pair or resolve_pair(config.pair, drafts=drafts)
    draft_name = config.draft or pair.default_draft
    sampling = config.sampling
    texts = load_prompts(config.task, config.prompts, config.seed, source=config.source)
    prompts = [encode_prompt(pair, t) for t in texts]
    pad = getattr(pair.tokenizer, "pad_token_id", None) or 0
    measured = run_prompts(
        HFBatchedLM(pair.target, pair.vocab_size, pad),
        lambda: HFSequenceLM(pair.drafts[draft_name], pair.vocab_size),
        lambda: HFSequenceLM(pair.target, pair.vocab_size),
        prompts, config.draft_len, sampling, config.seed, config.max_new_tokens, pair.eos_token_ids,
        progress=progress,
    )
    summary = summarise(measured, config.draft_len, config.seed)
    return {
        "pair": pair.name,
        "vocab_size": pair.vocab_size,  # scenarios of another vocabulary refuse this profile
        "draft": draft_name,
        "task": config.task,
        "sampling": sampling.model_dump(),
        "seed": config.seed,
        **summary,
        # scenarios read per-task α from here (system.scenario.parse_acceptance_profile)
        "tasks": {config.task: {"alpha": summary["alpha"], "num_tokens": summary["num_tokens"]}},
    }
