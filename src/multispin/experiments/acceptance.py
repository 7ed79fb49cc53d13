"""Measure acceptance on real prompts: α = E[Σ min(p, q)], per-position acceptance, and the mean
accepted length at a given γ next to the i.i.d. prediction (1 − α^{γ+1}) / (1 − α).

Three steps, for any number of drafts of one pair at once:

1. **Target text.** Every prompt is one device of a target-only run through the round engine
   (γ = 0: one batched target pass per token), so the texts follow the target's distribution
   under the sampling policy, as a speculative run's committed texts do.
2. **α by teacher forcing.** One target pass and one pass of each draft over each whole text give
   p and q at every generated position; α is the mean of Σ min(p, q). All drafts share step 1.
   The coupled α (Gumbel-coupled verification) is the mean of the exact match probability on the
   same rows (`multispin.speculative.coupled_acceptance`), so the two are paired position by
   position; each prompt's sums are kept in the profile (``coupled_per_prompt``).
3. **Verdicts.** Per-position acceptance needs real verdicts at a fixed γ: the first
   ``verdict_prompts`` prompts run again as devices of a real Multi-SPIN run per draft (one
   batched draft pass per drafting step, one batched verify per round).

Confidence intervals bootstrap over prompts (the tokens of one prompt are correlated, the
prompts are independent); a prompt's α and its verdicts are resampled together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import Field

from multispin.acceptance.run_verdicts import iid_tokens
from multispin.experiments.intervals import expanded_percentile
from multispin.models.base import BatchedLM, BatchedSequence
from multispin.models.prompts import encode_prompt, load_prompts, prompt_categories
from multispin.models.registry import resolve_pair
from multispin.progress import Step, StepReporter, reporter
from multispin.runtime.round.engine import PolicyPair
from multispin.runtime.round.local import FixedLink, UniformDraftLength, run_rounds
from multispin.runtime.round.roles import DraftDevice, VerifierServer
from multispin.speculative.codecs import make_codec
from multispin.speculative.coupled_acceptance import coupled_acceptance
from multispin.speculative.warp import SamplingFields, SamplingParams, warp

N_BOOTSTRAP = 1000
# Where each prompt source's α goes in a profile's task table (scenarios read it from there).
SOURCE_LABELS = {"humaneval": "humaneval", "mtbench": "mt_bench", "sharegpt": "sharegpt"}


class MeasureConfig(SamplingFields):
    pair: str = "smollm2-135m"
    drafts: list[str] | None = None  # default: the pair's first draft
    task: str = Field("chat", pattern="^(chat|code)$")
    prompts: int = Field(50, ge=2, le=2000)
    verdict_prompts: int | None = Field(None, ge=0, le=2000)  # default: every prompt
    draft_len: int = Field(8, ge=1, le=20)
    max_new_tokens: int = Field(64, ge=2, le=4096)
    seed: int = 0
    source: str = Field("auto", pattern="^(auto|builtin|sharegpt|humaneval|mtbench)$")
    batch: int = Field(32, ge=1, le=512)  # prompts run together (one batched draft and verify pass)


@dataclass
class PromptMeasurement:
    overlap: np.ndarray  # Σ min(p_t, q_t) at every generated position t
    accepted: list[int]  # accepted draft tokens per full-length round
    drafted: int  # γ of those rounds
    group: str = ""  # the prompt's category (MT-Bench's), for per-category α
    coupled: np.ndarray | None = None  # P(Gumbel-coupled match) at the same positions as ``overlap``


def iid_mean_accepted_length(alpha: float, gamma: int) -> float:
    """E[N] = (1 − α^{γ+1}) / (1 − α): tokens per round if acceptances were i.i.d. with rate α."""
    if alpha >= 1.0:
        return gamma + 1.0
    return float(iid_tokens(gamma, alpha))


def measure_prompts(
    make_target: Callable[[], BatchedLM],
    make_drafts: dict[str, Callable[[], BatchedLM]],
    prompts: Sequence[Sequence[int]],
    gamma: int,
    sampling: SamplingParams,
    seed: int,
    max_new_tokens: int,
    eos_ids: Sequence[int] = (),
    batch: int = 32,
    verdict_prompts: int | None = None,
    groups: Sequence[str] | None = None,
    progress: StepReporter | None = None,
) -> dict[str, list[PromptMeasurement]]:
    """Each draft's measurement on every prompt (the three steps of this module's docstring).
    ``progress`` receives a `Step` after every round and every scored prompt."""
    say = reporter(progress)
    n_verdicts = len(prompts) if verdict_prompts is None else min(verdict_prompts, len(prompts))
    texts = [
        dev.tokens
        for dev, _ in _runs(
            make_target, make_target, prompts, 0, sampling, seed, max_new_tokens, eos_ids, batch, say, "target text"
        )
    ]
    overlaps, coupled = _teacher_forced_overlaps(
        make_target, make_drafts, texts, [len(p) for p in prompts], sampling, say
    )
    out = {}
    for name, make_draft in make_drafts.items():
        runs = _runs(
            make_target,
            make_draft,
            prompts[:n_verdicts],
            gamma,
            sampling,
            seed,
            max_new_tokens,
            eos_ids,
            batch,
            say,
            f"verdicts {name}",
        )
        accepted = [[r.num_accepted for r in log if r.draft_len == gamma] for _, log in runs]
        accepted += [[] for _ in range(len(prompts) - n_verdicts)]
        out[name] = [
            PromptMeasurement(ov, acc, gamma, groups[k] if groups is not None else "", cp)
            for k, (ov, acc, cp) in enumerate(zip(overlaps[name], accepted, coupled[name]))
        ]
    return out


def _runs(
    make_target,
    make_draft,
    prompts,
    gamma: int,
    sampling: SamplingParams,
    seed: int,
    max_new_tokens: int,
    eos_ids: Sequence[int],
    batch: int,
    say: StepReporter,
    phase: str,
):
    """(device, round log) of every prompt, run as devices of Multi-SPIN runs of ``batch``
    devices that draft on one shared model (γ = 0: target-only, the draft model is never used)."""
    eos, total, out = set(eos_ids), max_new_tokens * len(prompts), []
    codec = make_codec("dense-fp32")
    policy = PolicyPair(UniformDraftLength(gamma), FixedLink("ul"))

    def tokens_done(dev) -> int:
        stopped = bool(dev.generated) and dev.generated[-1] in eos
        return max_new_tokens if stopped else min(max_new_tokens, len(dev.generated))

    say(Step(phase, 0, total, "tokens"))
    for lo in range(0, len(prompts), batch):
        server = VerifierServer(make_target(), sampling, codec, codec, seed)
        shared = make_draft()
        devices = {
            k: DraftDevice(k, BatchedSequence(shared, k), sampling, codec, codec, seed, list(prompts[k]))
            for k in range(lo, min(lo + batch, len(prompts)))
        }
        before = max_new_tokens * lo
        logs = run_rounds(
            server,
            devices,
            policy,
            max_new_tokens,
            eos_ids,
            on_round=lambda r, recs, before=before, devices=devices: say(
                Step(phase, before + sum(tokens_done(d) for d in devices.values()), total, "tokens")
            ),
        )
        out += [(devices[k], logs[k]) for k in devices]
    say(Step(phase, total, total, "tokens"))
    return out


def _teacher_forced_overlaps(
    make_target,
    make_drafts,
    texts: list[list[int]],
    prompt_lens: list[int],
    sampling: SamplingParams,
    say: StepReporter,
) -> tuple[dict[str, list[np.ndarray]], dict[str, list[np.ndarray]]]:
    """Σ min(p, q) and the coupled match probability at every generated position of every text,
    for each draft: one pass of the target and one of each draft over each whole text."""
    target = make_target()
    drafts = {name: make() for name, make in make_drafts.items()}
    out: dict[str, list[np.ndarray]] = {name: [] for name in drafts}
    cpl: dict[str, list[np.ndarray]] = {name: [] for name in drafts}
    for k, (tokens, n_prompt) in enumerate(zip(texts, prompt_lens)):
        say(Step("scoring α", k, len(texts), "prompts"))
        rows = slice(n_prompt - 1, len(tokens) - 1)
        p = warp(_full_pass(target, tokens)[rows], sampling) if len(tokens) > n_prompt else None
        for name, lm in drafts.items():
            if p is None:
                out[name].append(np.zeros(0))
                cpl[name].append(np.zeros(0))
                continue
            q = warp(_full_pass(lm, tokens)[rows], sampling)
            out[name].append(np.minimum(p, q).sum(axis=-1))
            cpl[name].append(coupled_acceptance(p, q))
    say(Step("scoring α", len(texts), len(texts), "prompts"))
    return out, cpl


def _full_pass(lm: BatchedLM, tokens: Sequence[int]) -> np.ndarray:
    """Logits at every position of ``tokens`` in one pass (a fresh sequence, closed after)."""
    lm.open(-1)
    try:
        return lm.extend_many({-1: list(tokens)})[-1]
    finally:
        lm.close(-1)


def summarise_acceptance(measured: list[PromptMeasurement], gamma: int, seed: int) -> dict:
    """Point estimates and 95% bootstrap intervals (resampling prompts: the tokens of one prompt
    are correlated, the prompts are independent), the i.i.d. check, and α per prompt category."""
    rng = np.random.default_rng([seed, 99])
    n = len(measured)
    resamples = rng.integers(0, n, (N_BOOTSTRAP, n)) if n else np.zeros((N_BOOTSTRAP, 0), int)
    point = _estimates(measured, gamma, np.arange(n)[None, :])
    boot = _estimates(measured, gamma, resamples)
    n_rounds = sum(len(m.accepted) for m in measured)
    conditional = point["conditional"][0]
    summary = {
        "alpha": float(point["alpha"][0]),
        "alpha_ci95": _ci(boot["alpha"], n),
        "mean_accepted_length": float(point["mean_length"][0, -1]),
        "mean_accepted_length_ci95": _ci(boot["mean_length"][:, -1], n),
        "iid_prediction": float(point["iid"][0, -1]),
        "per_position_rate": [float(x) for x in conditional],
        "per_position_ci95": [_ci(boot["conditional"][:, i], n) for i in range(gamma)],
        "draft_len": gamma,
        "num_prompts": n,
        "num_tokens": int(sum(m.overlap.size for m in measured)),
        "num_rounds": n_rounds,
        "iid_check": _iid_check(point, boot, gamma, n),
        "notes": undefined_notes(float(point["alpha"][0]), n_rounds, conditional, gamma),
    }
    if "alpha_coupled" in point:
        summary.update(
            alpha_coupled=float(point["alpha_coupled"][0]),
            alpha_coupled_ci95=_ci(boot["alpha_coupled"], n),
            # paired over prompts: α and the coupled α of one resample share its positions
            coupled_ratio=float(point["alpha_coupled"][0] / point["alpha"][0]),
            coupled_ratio_ci95=_ci(boot["alpha_coupled"] / boot["alpha"], n),
            coupled_per_prompt=[_prompt_sums(m) for m in measured],
        )
    groups = sorted({m.group for m in measured})
    if len(groups) > 1:
        summary["groups"] = {g: _alpha_of([m for m in measured if m.group == g], gamma, rng) for g in groups}
    return summary


def _estimates(measured: list[PromptMeasurement], gamma: int, samples: np.ndarray) -> dict[str, np.ndarray]:
    """α, mean accepted length at γ' = 1..γ (measured and i.i.d.-predicted) and the per-position
    conditional acceptance, for each row of prompt indices in ``samples`` (one bootstrap each).

    A round that accepted a tokens at γ would have accepted min(a, γ') at γ' ≤ γ (a position's
    verdict depends only on the tokens before it), so one run at γ gives every shorter γ'."""
    overlap_sum = np.array([m.overlap.sum(dtype=float) for m in measured], dtype=float)
    overlap_n = np.array([m.overlap.size for m in measured], dtype=float)
    hist = np.array(
        [np.bincount(np.asarray(m.accepted, dtype=int), minlength=gamma + 1)[: gamma + 1] for m in measured],
        dtype=float,
    ).reshape(len(measured), gamma + 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        alpha = overlap_sum[samples].sum(1) / overlap_n[samples].sum(1)
        counts = hist[samples].sum(1)  # (B, γ+1): rounds that accepted exactly a tokens
        reach = counts[:, ::-1].cumsum(1)[:, ::-1]  # rounds that accepted ≥ a tokens
        conditional = reach[:, 1:] / reach[:, :-1]  # P(accept position i | reached it)
        rounds = reach[:, 0]
        # E[1 + min(N, γ')] = 1 + Σ_{i ≤ γ'} P(N ≥ i)
        mean_length = 1.0 + (reach[:, 1:] / rounds[:, None]).cumsum(1)
    g = np.arange(1, gamma + 1)
    a = alpha[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        iid = np.where(a >= 1.0, g + 1.0, (1.0 - a ** (g + 1)) / (1.0 - a))
    out = {"alpha": alpha, "mean_length": mean_length, "iid": iid, "conditional": conditional}
    if measured and all(m.coupled is not None for m in measured):
        coupled_sum = np.array([m.coupled.sum(dtype=float) for m in measured if m.coupled is not None])
        with np.errstate(invalid="ignore", divide="ignore"):
            out["alpha_coupled"] = coupled_sum[samples].sum(1) / overlap_n[samples].sum(1)
    return out


def _prompt_sums(m: PromptMeasurement) -> list[float]:
    """[positions, Σ min(p, q), Σ P(coupled match)] of one prompt: a profile's α and coupled α are
    the ratios of these sums over its prompts (what a check recomputes prompt by prompt)."""
    assert m.coupled is not None
    return [float(m.overlap.size), float(m.overlap.sum(dtype=float)), float(m.coupled.sum(dtype=float))]


def _iid_check(point: dict, boot: dict, gamma: int, n: int) -> dict:
    """Does E[N] = (1 − α^{γ+1})/(1 − α) describe the measured rounds? The difference measured −
    predicted at γ' = 1..γ with a paired bootstrap interval (α and the rounds resampled together);
    the verdict is the test at the measured γ: i.i.d. holds when its interval contains 0."""
    diff, diff_boot = point["mean_length"][0] - point["iid"][0], boot["mean_length"] - boot["iid"]
    cis = [_ci(diff_boot[:, i], n) for i in range(gamma)]
    last = cis[-1]
    holds = None if not np.isfinite(last).all() else bool(last[0] <= 0.0 <= last[1])
    return {
        "draft_len": list(range(1, gamma + 1)),
        "measured": [float(x) for x in point["mean_length"][0]],
        "measured_ci95": [_ci(boot["mean_length"][:, i], n) for i in range(gamma)],
        "iid": [float(x) for x in point["iid"][0]],
        "difference": [float(x) for x in diff],
        "difference_ci95": cis,
        "holds": holds,
    }


def _alpha_of(measured: list[PromptMeasurement], gamma: int, rng: np.random.Generator) -> dict:
    """α with its bootstrap interval for one category's prompts."""
    n = len(measured)
    alpha = _estimates(measured, gamma, np.arange(n)[None, :])["alpha"][0]
    boot = _estimates(measured, gamma, rng.integers(0, n, (N_BOOTSTRAP, n)))["alpha"]
    return {
        "alpha": float(alpha),
        "alpha_ci95": _ci(boot, n),
        "num_prompts": n,
        "num_tokens": int(sum(m.overlap.size for m in measured)),
    }


def _ci(replicates, n: int) -> list[float]:
    """The 95% interval of bootstrap ``replicates`` over ``n`` prompts: the project's expanded
    percentile interval (`multispin.experiments.intervals.expanded_percentile`); the plain
    percentile interval under-covers at a few dozen prompts."""
    return list(expanded_percentile(replicates, n))


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
        notes.append(
            f"mean accepted length and per-position acceptance: no round drafted the full "
            f"γ = {gamma} (each prompt's text ended first); raise --max-new-tokens well above --draft-len"
        )
        return notes
    unreached = [i + 1 for i, r in enumerate(conditional) if not np.isfinite(r)]
    if unreached:
        notes.append(
            f"acceptance at position {_spans(unreached)}: no round reached it "
            f"(every draft was rejected earlier); more --prompts give it samples"
        )
    return notes


def measure(config: MeasureConfig, pair=None, progress: StepReporter | None = None) -> dict[str, dict]:
    """`multispin measure`: an acceptance profile per draft for one (pair, prompt set, sampling
    policy), all drafts scored on the same target texts; ``progress`` receives a
    `multispin.progress.Step` per round and per scored prompt."""
    from multispin.models.hf import HFBatchedLM, draft_batched  # lazy: imports torch

    pair = pair or resolve_pair(config.pair, drafts=config.drafts)
    names = pair.check_drafts(config.drafts or [pair.default_draft])
    sampling = config.sampling
    texts = load_prompts(config.task, config.prompts, config.seed, source=config.source)
    categories = prompt_categories(config.source) if config.source not in ("auto", "builtin") else {}
    pad = getattr(pair.tokenizer, "pad_token_id", None) or 0
    measured = measure_prompts(
        lambda: HFBatchedLM(pair.target, pair.vocab_size, pad),
        {n: (lambda n=n: draft_batched(pair, n, pad)) for n in names},
        [encode_prompt(pair, t) for t in texts],
        config.draft_len,
        sampling,
        config.seed,
        config.max_new_tokens,
        pair.eos_token_ids,
        batch=config.batch,
        verdict_prompts=config.verdict_prompts,
        groups=[categories.get(t, config.task) for t in texts],
        progress=progress,
    )
    label = SOURCE_LABELS.get(config.source, config.task)
    return {
        name: _profile(pair, name, config, label, summarise_acceptance(m, config.draft_len, config.seed))
        for name, m in measured.items()
    }


def policy_label(sampling: dict) -> str:
    """``greedy``, ``t1-topk1024``, ...: the sampling policy in a file name."""
    if sampling["temperature"] == 0:
        return "greedy"
    out = f"t{sampling['temperature']:g}"
    out += f"-topk{sampling['top_k']}" if sampling.get("top_k") else ""
    out += f"-topp{sampling['top_p']:g}" if sampling.get("top_p", 1.0) < 1.0 else ""
    return out


def profile_file_name(profile: dict) -> str:
    """acceptance-<draft>-<task>-<policy>.json, task being the prompt set's label."""
    label = SOURCE_LABELS.get(profile["source"], profile["task"])
    return f"acceptance-{profile['draft']}-{label}-{policy_label(profile['sampling'])}.json"


def _profile(pair, draft: str, config: MeasureConfig, label: str, summary: dict) -> dict:
    tasks = {
        label: {"alpha": summary["alpha"], "alpha_ci95": summary["alpha_ci95"], "num_tokens": summary["num_tokens"]}
    }
    if "alpha_coupled" in summary:  # the coupled rule's α on the same rows (absent in older profiles)
        tasks[label].update(alpha_coupled=summary["alpha_coupled"], alpha_coupled_ci95=summary["alpha_coupled_ci95"])
    if "math" in summary.get("groups", {}):  # MT-Bench's math questions: the offline stand-in for GSM8K
        tasks["mt_bench_math"] = summary["groups"]["math"]
    return {
        "pair": pair.name,
        "vocab_size": pair.vocab_size,  # scenarios of another vocabulary refuse this profile
        "draft": draft,
        "task": config.task,
        "source": config.source,
        "sampling": config.sampling.model_dump(),
        "seed": config.seed,
        "max_new_tokens": config.max_new_tokens,
        "verdict_prompts": min(
            config.prompts, config.prompts if config.verdict_prompts is None else config.verdict_prompts
        ),
        **summary,
        # scenarios read per-task α from here (system.scenario.parse_acceptance_profile)
        "tasks": tasks,
    }
