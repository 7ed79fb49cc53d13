"""The kinds of acceptance rate α, each defined once: its meaning, and where it is estimated.

Every α in multispin is one of these. A line that prints an α names its kind (`label`).
"""

from __future__ import annotations

from typing import Literal

from multispin.errors import ConfigError

AlphaKind = Literal[
    "teacher_forced",
    "coupled",
    "coupled_runs",
    "coupled_scaled",
    "coupled_assumed",
    "verdict",
    "shrunk",
    "tokens_matched",
    "planned",
    "online",
]

TEACHER_FORCED: AlphaKind = "teacher_forced"
COUPLED_ALPHA: AlphaKind = "coupled"
COUPLED_RUNS: AlphaKind = "coupled_runs"
COUPLED_SCALED: AlphaKind = "coupled_scaled"
COUPLED_ASSUMED: AlphaKind = "coupled_assumed"
VERDICT: AlphaKind = "verdict"
SHRUNK: AlphaKind = "shrunk"
TOKENS_MATCHED: AlphaKind = "tokens_matched"
PLANNED: AlphaKind = "planned"
ONLINE: AlphaKind = "online"

# kind -> (one-line meaning, where it is estimated)
KINDS: dict[str, tuple[str, str]] = {
    TEACHER_FORCED: (
        "E[Σ min(p, q)] over target-generated text: the standard rule's acceptance at every position",
        "experiments.acceptance (`multispin measure`); shipped as acceptance-<draft>-<task>-<policy>.json",
    ),
    COUPLED_ALPHA: (
        "E[P(argmax(log q + G) = argmax(log p + G))]: the coupled rule's acceptance at every position",
        "speculative.coupled_acceptance, teacher-forced like the standard α",
    ),
    COUPLED_RUNS: (
        "the coupled rule's α whose i.i.d. tokens per coupled drafting round are what testbed runs kept",
        "coupled_runs.coupled_runs_document; shipped as coupled-runs-<draft>-<policy>.json",
    ),
    COUPLED_SCALED: (
        "the planned α times the draft's teacher-forced coupled / standard ratio (its profile's coupled block)",
        "shipped.coupled_prior, where no coupled runs are shipped for the draft",
    ),
    COUPLED_ASSUMED: (
        "the α times smollm2-135m q5g64's teacher-forced coupled / standard ratio of the task: an assumption",
        "system.coupled_alpha, where nothing was measured for the device's draft",
    ),
    VERDICT: (
        "accepted / (accepted + rejections) over real rounds' verdicts: the i.i.d. model's maximum-likelihood α",
        "shrinkage.verdict_alpha (a profile's verdict rounds), run_verdicts.pool_jobs (testbed runs)",
    ),
    SHRUNK: (
        "the teacher-forced α plus its profile's verdict gap, shrunk across every shipped profile",
        "shrinkage.shrunk_alpha",
    ),
    TOKENS_MATCHED: (
        "the α whose i.i.d. tokens per drafting round are what testbed runs' rounds kept",
        "run_verdicts.tokens_matched_alpha; shipped as run-verdicts-<draft>-<policy>.json",
    ),
    PLANNED: (
        "what a run's plans start from: the tokens-matched α where shipped, else the shrunk α",
        "shipped.device_alpha(kind='planned')",
    ),
    ONLINE: (
        "each device's running estimate from its own verdicts, shrunk towards its group's",
        "runtime.round.acceptance_estimate.AcceptanceEstimator",
    ),
}

# the kinds a shipped file answers (`shipped.device_alpha`)
SHIPPED_KINDS: tuple[AlphaKind, ...] = (TEACHER_FORCED, SHRUNK, TOKENS_MATCHED, PLANNED)


def shipped_kind(kind: str) -> AlphaKind:
    """``kind`` as one of SHIPPED_KINDS, or a ConfigError naming the allowed values."""
    if kind not in SHIPPED_KINDS:
        raise ConfigError(f"alpha kind: unknown value {kind!r} (allowed: {', '.join(SHIPPED_KINDS)})")
    return kind


_LABELS: dict[str, str] = {
    TEACHER_FORCED: "teacher-forced α",
    COUPLED_ALPHA: "coupled teacher-forced α",
    COUPLED_RUNS: "coupled tokens-matched run α",
    COUPLED_SCALED: "ratio-scaled coupled α",
    COUPLED_ASSUMED: "ASSUMED coupled α",
    VERDICT: "verdict-rate α",
    SHRUNK: "shrunk profile α",
    TOKENS_MATCHED: "tokens-matched run α",
    PLANNED: "planned α",
    ONLINE: "online α",
}


def label(kind: str) -> str:
    """How an output line names an α of ``kind`` (e.g. "tokens-matched run α")."""
    return _LABELS.get(kind, f"{kind} α")


def planned_alpha_source(kinds: list[str | None]) -> str:
    """Where a run's starting α came from, for its set-up line: the planned kind of each device
    (`shipped.planned_kind`; ``None``: the scenario's assumed α), counted when they differ."""
    names = ["the scenario's (assumed)" if k is None else label(k) for k in kinds] or ["the scenario's (assumed)"]
    counts = {n: names.count(n) for n in dict.fromkeys(names)}
    if len(counts) == 1:
        return f"from {names[0]}"
    return "from " + ", ".join(f"{n} ×{c}" for n, c in counts.items())
