"""The α a running system sees, measured from its own verdicts.

A profile's verdict rounds draft γ = 8 every round; a run drafts the γ its planner picks (4-7 on
the testbed) and stops at each prompt's budget. Acceptance is not i.i.d. along a draft (after a
rejection the next position is a hard one; a long run of acceptances is an easy stretch), so the
i.i.d. rate a run's verdicts show depends on the γ it drafts: for smollm2-135m's q5g64 draft the
γ = 8 rounds on 160 prompts read chat 0.841 against 0.827 in 96 runs, and the shrunk profile
estimate (`shrinkage.shrunk_alpha`) read code 0.879 against 0.891. A forecast moves about 3.3% per
0.01 of α, so a forecast within 2% needs α to about ±0.006: only the runs themselves measure it
that well.

This module reads each job's verdicts from a run's rounds (`job_verdicts`) and pools them into a
per-task rate with a bootstrap interval over jobs (`pool_jobs`). ``tools/forecast_gap.py
calibrate`` runs the testbed on seeds kept apart from those it is checked on and ``multispin
profiles run-alpha`` writes ``data/profiles/<pair>/run-verdicts-<draft>-<policy>.json``
(`run_verdicts_document`); `shipped.shipped_tokens_matched_alpha` reads it, and
`shipped.device_alpha(kind="planned")` prefers it to the shrunk profile estimate. What the planner
plans on is that file's tokens-matched α where it has one (`tokens_matched_alpha`, below;
``multispin profiles tokens-alpha``): the rate whose i.i.d. tokens per drafting round are the
runs' own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from multispin.acceptance.shipped import RUN_VERDICTS_SCHEMA, TASK_SOURCE
from multispin.acceptance.spread import round_trials


@dataclass(frozen=True)
class JobVerdicts:
    """One job's verdicts in a run: its task and each drafting round's (accepted, trials)."""

    task: str
    rounds: list[tuple[int, int]]

    @property
    def accepted(self) -> int:
        return sum(a for a, _ in self.rounds)

    @property
    def trials(self) -> int:
        return sum(n for _, n in self.rounds)

    def to_dict(self) -> dict:
        return {"task": self.task, "rounds": [list(r) for r in self.rounds]}

    @classmethod
    def from_dict(cls, doc: Mapping) -> JobVerdicts:
        return cls(str(doc["task"]), [(int(a), int(n)) for a, n in doc["rounds"]])


def job_verdicts(rows: Sequence, tasks: Mapping[str, str]) -> list[JobVerdicts]:
    """Each job's verdicts from a run's round rows (`RoundRow`; a job is one device id, k + K·j
    for device k's j-th prompt) and the run's task per device (``{"0": "chat", ...}``, the
    summary's ``tasks``). A round cut short by EOS (fewer tokens than its verdict gives) is left
    out: its verdict is not the draft's."""
    k = len(tasks)
    per_job: dict[int, list[tuple[int, int]]] = {}
    for row in rows:
        rejected = set(row.rejected)
        for dev_id, gamma in row.gamma.items():
            verdict = _round_verdict(row, dev_id, gamma, rejected)
            if verdict is not None:
                per_job.setdefault(int(dev_id), []).append(verdict)
    return [JobVerdicts(tasks[str(dev_id % k)], rounds) for dev_id, rounds in sorted(per_job.items())]


def _round_verdict(row, dev_id, gamma: int, rejected: set) -> tuple[int, int] | None:
    """One device's (accepted, trials) in one round, or ``None`` where the round has no verdict
    of the draft's: no draft (γ = 0), or cut short by EOS (fewer tokens than its verdict gives)."""
    accepted = int(row.tokens_gained.get(dev_id, 0)) - 1
    if gamma == 0 or accepted < 0 or (dev_id not in rejected and accepted != gamma):
        return None
    if dev_id in row.coupled:  # the coupled rule's verdicts are another rate (`coupled_draft_rounds`)
        return None
    return accepted, round_trials(gamma, accepted, dev_id in rejected)


@dataclass(frozen=True)
class PooledRate:
    """One task's i.i.d. acceptance rate over jobs: Σ accepted / Σ trials, with a 95% bootstrap
    interval over jobs (a job's verdicts are correlated: within-text stretches, its prompt's own
    rate)."""

    alpha: float
    ci95: tuple[float, float]
    jobs: int
    trials: int


def pool_jobs(jobs: Sequence[JobVerdicts], resamples: int = 2000, seed: int = 0) -> PooledRate:
    """`PooledRate` of ``jobs`` (all of one task)."""
    acc = np.array([j.accepted for j in jobs], dtype=float)
    tri = np.array([j.trials for j in jobs], dtype=float)
    if acc.size < 2 or tri.sum() <= 0:
        raise ValueError(f"jobs: need at least 2 jobs with trials (got {acc.size})")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, acc.size, size=(resamples, acc.size))
    boot = acc[idx].sum(axis=1) / np.maximum(tri[idx].sum(axis=1), 1.0)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return PooledRate(float(acc.sum() / tri.sum()), (float(lo), float(hi)), int(acc.size), int(tri.sum()))


# where in its response a verdict falls: the job's first token, its next seven, the rest
RESPONSE_BINS = (0, 1, 8)


def verdicts_by_response_token(
    rows: Sequence, tasks: Mapping[str, str], bins: Sequence[int] = RESPONSE_BINS
) -> dict[tuple[str, int], list[JobVerdicts]]:
    """Each job's trials split by where in its response they fall: ``(task, start)`` → one
    `JobVerdicts` per job holding its trials at response tokens ``start`` … up to the next bin's
    start (a drafted position i of a round that starts at response token t is token t + i − 1,
    tested when the positions before it passed). Rows and rounds as `job_verdicts`; γ = 0 rounds
    and rounds cut short by EOS move a job along without a verdict. The i.i.d. model has one rate
    per task at every token; a job's first token (the opening of an answer, the first line of a
    function body) is where it is least like that (docs/system-model.md §5.5)."""
    edges = sorted(set(int(b) for b in bins))
    if not edges or edges[0] != 0:
        raise ValueError(f"bins: response-token starts beginning at 0 (got {list(bins)})")
    k = len(tasks)
    spent: dict[int, int] = {}  # response tokens each job has so far
    cells: dict[tuple[str, int], dict[int, list[int]]] = {}  # (task, bin) → job → [accepted, trials]
    for row in rows:
        rejected = set(row.rejected)
        for dev_id, gamma in row.gamma.items():
            start = spent.get(int(dev_id), 0)
            spent[int(dev_id)] = start + int(row.tokens_gained.get(dev_id, 0))
            verdict = _round_verdict(row, dev_id, gamma, rejected)
            if verdict is None:
                continue
            accepted, trials = verdict
            task = tasks[str(int(dev_id) % k)]
            for i in range(1, trials + 1):
                b = edges[int(np.searchsorted(edges, start + i - 1, side="right")) - 1]
                cell = cells.setdefault((task, b), {}).setdefault(int(dev_id), [0, 0])
                cell[0] += int(accepted >= i)
                cell[1] += 1
    return {
        key: [JobVerdicts(key[0], [(a, n)]) for _, (a, n) in sorted(jobs.items())]
        for key, jobs in sorted(cells.items())
    }


# ---- the α whose i.i.d. tokens are the runs' tokens ---------------------------------------------
#
# Σ accepted / Σ trials is the i.i.d. model's maximum-likelihood α, but the model is used for the
# tokens a round gains, E[N](γ, α) = (1 − α^{γ+1}) / (1 − α), and the two part where acceptance
# varies from draft to draft (easy and hard stretches of a text): a draft on an easy stretch tests
# more positions, so the pooled rate leans towards the easy drafts, while E[N] at that rate
# over-counts what the mix of drafts gains. On smollm2-135m's 150 runs of seeds 0-9 and 30-49 the
# rate that reproduces the drafting rounds' tokens is 0.003 below the verdict rate of the same
# rounds (chat and code alike); the forecast moves about 3.3% per 0.01 of α, so ~1%.


@dataclass(frozen=True)
class DraftRound:
    """One job's drafting round: its task, the γ it drafted and E[tokens | its draft] (rounds.jsonl
    ``expected_tokens``: every drafted position's β = min(1, p/q̂), so the round's expected tokens
    without the acceptance test's luck)."""

    task: str
    gamma: int
    expected_tokens: float


def draft_rounds(rows: Sequence, tasks: Mapping[str, str]) -> list[DraftRound]:
    """Every drafting round with a verdict of its draft (the rule of `job_verdicts`) and its
    expected tokens, from a run's round rows."""
    k = len(tasks)
    out = []
    for row in rows:
        rejected = set(row.rejected)
        for dev_id, gamma in row.gamma.items():
            if dev_id in row.expected_tokens and _round_verdict(row, dev_id, gamma, rejected) is not None:
                task = tasks[str(int(dev_id) % k)]
                out.append(DraftRound(task, int(gamma), float(row.expected_tokens[dev_id])))
    return out


def iid_tokens(gamma, alpha):
    """E[N] = (1 − α^{γ+1}) / (1 − α) = 1 + α + … + α^γ: tokens per round of a draft of γ if
    acceptances were i.i.d. with rate α < 1 (arrays broadcast)."""
    g = np.asarray(gamma, dtype=float)
    return (1.0 - alpha ** (g + 1.0)) / (1.0 - alpha)


def tokens_matched_alpha(rounds: Sequence[DraftRound]) -> float:
    """The α at which the i.i.d. model's tokens over ``rounds`` (their own γ) are theirs:
    Σ E[N](γ_r, α) = Σ E[tokens | draft_r]. Rounds with γ ≥ 1 only."""
    counts, target = _gamma_counts(rounds)
    return float(_solve(counts[None, :], np.array([target]))[0])


def _gamma_counts(rounds: Sequence[DraftRound]) -> tuple[np.ndarray, float]:
    """How many of ``rounds`` drafted each γ (index γ), and their expected tokens' sum."""
    g = np.array([r.gamma for r in rounds], dtype=np.int64)
    if g.size == 0 or np.any(g < 1):
        raise ValueError("rounds: need drafting rounds (γ ≥ 1)")
    return np.bincount(g).astype(float), float(sum(r.expected_tokens for r in rounds))


def _solve(counts: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Per row b, the α with Σ_γ counts[b, γ]·E[N](γ, α) = targets[b], by bisection on all rows at
    once (E[N] rises with α; a row beyond either end, every draft rejected at once or kept whole,
    gets that end)."""
    g = np.arange(counts.shape[1], dtype=float)
    lo, hi = np.full(len(targets), 1e-6), np.full(len(targets), 1 - 1e-9)
    for _ in range(60):
        mid = (lo + hi) / 2
        tokens = (counts * iid_tokens(g, mid[:, None])).sum(axis=1)
        low = tokens < targets
        lo, hi = np.where(low, mid, lo), np.where(low, hi, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class TokensRate:
    """One task's tokens-matched α (`tokens_matched_alpha`) with a 95% bootstrap interval over
    runs (a run's rounds share its prompts and its planner's path)."""

    alpha: float
    ci95: tuple[float, float]
    runs: int
    rounds: int


def pool_runs(runs: Sequence[Sequence[DraftRound]], resamples: int = 1000, seed: int = 0) -> TokensRate:
    """`TokensRate` of the drafting rounds of ``runs`` (each a run's rounds, all of one task)."""
    runs = [list(r) for r in runs if r]
    if len(runs) < 2:
        raise ValueError(f"runs: need at least 2 runs with drafting rounds (got {len(runs)})")
    per_run = [_gamma_counts(r) for r in runs]
    width = max(len(c) for c, _ in per_run)
    counts = np.array([np.pad(c, (0, width - len(c))) for c, _ in per_run])
    targets = np.array([t for _, t in per_run])
    idx = np.random.default_rng(seed).integers(0, len(runs), size=(resamples, len(runs)))
    boot = _solve(counts[idx].sum(axis=1), targets[idx].sum(axis=1))
    lo, hi = np.percentile(boot, [2.5, 97.5])
    alpha = _solve(counts.sum(axis=0)[None, :], np.array([targets.sum()]))[0]
    return TokensRate(float(alpha), (float(lo), float(hi)), len(runs), int(counts.sum()))


# ---- the run-verdicts file ----------------------------------------------------------------------
#
# Its inputs (`run_verdicts_document`): ``pair``, ``draft``, ``sampling``; ``calibration``, one
# line per run (``seed``, ``policy``, ``shape``: devices, rounds, max_new_tokens; ``jobs``: each
# job's `JobVerdicts.to_dict`; ``planned_with``: the prior each task planned on); ``fallback_prior``,
# per task the prior of a run that did not record one (the shrunk α, which runs planned on before
# any run-verdicts file was shipped); and, for the tokens-matched α, ``token_runs``: per run its
# ``seed``, ``policy``, ``tasks``, ``jobs`` and ``rounds`` ([task, γ, E[tokens | draft]] each).

RUN_VERDICTS_METHOD = (
    "acceptance/run_verdicts.py pool_jobs: Σ accepted / Σ (accepted + rejections) over every drafting round "
    "of testbed runs (rounds cut by EOS left out); 95% bootstrap interval over jobs"
)
TOKENS_METHOD = (
    "acceptance/run_verdicts.py tokens_matched_alpha: Σ E[N](γ_r, α) = Σ E[tokens | draft_r] over every "
    "drafting round with a verdict (rounds.jsonl expected_tokens); 95% bootstrap interval over runs"
)


def rate_entry(jobs: Sequence[JobVerdicts]) -> dict:
    """`pool_jobs` of ``jobs`` as a file entry: alpha, ci95, jobs, trials."""
    r = pool_jobs(jobs)
    return {"alpha": r.alpha, "ci95": list(r.ci95), "jobs": r.jobs, "trials": r.trials}


def _planned_with(line: Mapping, task: str, fallback: float | None) -> float:
    """The prior ``task`` planned on in the run of ``line`` (its γ follows from it), to 4 digits."""
    prior = line.get("planned_with", {}).get(task, fallback)
    if prior is None:
        raise ValueError(f"planned_with: seed {line['seed']} records no prior for {task} and none is shipped")
    return round(float(prior), 4)


def _task_entry(lines: list[dict], task: str, fallback: float | None) -> dict:
    """One task's pooled rate, and split by policy and by the prior the runs planned on (to show
    how much the γ a run drafts moves the rate)."""
    jobs = [
        (line["policy"], _planned_with(line, task, fallback), JobVerdicts.from_dict(j))
        for line in lines
        for j in line["jobs"]
        if j["task"] == task
    ]
    entry = rate_entry([j for *_, j in jobs])
    entry["by_policy"] = {p: rate_entry([j for q, _, j in jobs if q == p]) for p in sorted({q for q, *_ in jobs})}
    entry["by_prior"] = {str(a): rate_entry([j for _, b, j in jobs if b == a]) for a in sorted({b for _, b, _ in jobs})}
    return entry


def _runs_shape(lines: list[dict]) -> dict:
    """The runs' devices, rounds and prompt budget (where every run agrees), policies and seeds."""
    shape: dict = {}
    for key in ("devices", "rounds", "max_new_tokens"):
        values = {line.get("shape", {}).get(key) for line in lines}
        if len(values) == 1 and None not in values:
            shape[key] = values.pop()
    return {
        **shape,
        "policies": sorted({line["policy"] for line in lines}),
        "seeds": sorted(line["seed"] for line in lines),
    }


def run_verdicts_document(inputs: Mapping) -> dict:
    """The run-verdicts file of ``inputs`` (above), without its provenance. A seed run twice counts once."""
    lines = list({line["seed"]: line for line in inputs["calibration"]}.values())
    task_names = sorted({j["task"] for line in lines for j in line["jobs"]})
    doc = {
        "schema": RUN_VERDICTS_SCHEMA,
        "schema_version": 1,
        "pair": inputs["pair"],
        "draft": inputs["draft"],
        "sampling": inputs["sampling"],
        "runs": _runs_shape(lines),
        "method": RUN_VERDICTS_METHOD,
        "tasks": {TASK_SOURCE[t]: _task_entry(lines, t, inputs["fallback_prior"].get(t)) for t in task_names},
    }
    if inputs.get("token_runs"):
        _add_tokens_alpha(doc, inputs["token_runs"])
    return doc


def tokens_rates(token_runs: Sequence[Mapping]) -> dict[str, dict]:
    """Per task (its prompt-set label), the tokens-matched α of ``token_runs``' drafting rounds
    (each run's ``tasks`` and ``rounds``, [task, γ, E[tokens | draft]] each; `pool_runs`) as a
    file entry: alpha, ci95, runs, rounds."""
    per_task: dict[str, list[list[DraftRound]]] = {}
    for run in token_runs:
        rounds = [DraftRound(str(t), int(g), float(e)) for t, g, e in run["rounds"]]
        for task in run["tasks"]:
            per_task.setdefault(task, []).append([r for r in rounds if r.task == task])
    out = {}
    for task, runs_of_task in sorted(per_task.items()):
        r = pool_runs(runs_of_task)
        out[TASK_SOURCE[task]] = {"alpha": r.alpha, "ci95": list(r.ci95), "runs": r.runs, "rounds": r.rounds}
    return out


def runs_identity(token_runs: Sequence[Mapping]) -> dict:
    """The seeds and policies of ``token_runs``, and how many there are."""
    return {
        "seeds": sorted({int(run["seed"]) for run in token_runs}),
        "policies": sorted({str(run["policy"]) for run in token_runs}),
        "runs": len(token_runs),
    }


def tokens_sample_block(token_runs: Sequence[Mapping]) -> dict:
    """The re-run sample of a run-verdicts file whose own runs were not kept: the runs' seeds and
    policies and per task their tokens-matched α with its interval (`recompute.sample_difference`
    checks the file's α against it)."""
    return {**runs_identity(token_runs), "tasks": tokens_rates(token_runs)}


def _add_tokens_alpha(doc: dict, token_runs: Sequence[Mapping]) -> None:
    """Per task, the tokens-matched α of ``token_runs`` (`tokens_rates`) and beside it the verdict
    rate of the same rounds, to show the two estimators apart on one set of drafts."""
    jobs: dict[str, list[JobVerdicts]] = {}  # by the task's prompt-set label, as tokens_rates keys them
    for run in token_runs:
        for job in run["jobs"]:
            jobs.setdefault(TASK_SOURCE[job["task"]], []).append(JobVerdicts.from_dict(job))
    for label, entry in tokens_rates(token_runs).items():
        doc["tasks"][label]["tokens"] = {**entry, "verdict_alpha_same_rounds": pool_jobs(jobs[label]).alpha}
    doc["tokens_runs"] = runs_identity(token_runs)
    doc["tokens_method"] = TOKENS_METHOD
