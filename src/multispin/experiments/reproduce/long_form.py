"""A drop's numbers in long form, (drop, policy, knowledge, metric, value), and the one rule that
spells them as the wide columns of the CSVs (``goodput_all_ul``, ``gamma_naive_all_dl``, …).

The wide columns are what the drops and the figure tables have always been written in, so the files
stay the same; every module that names a policy's column asks `column` (or `gain_column` for a gain
of means) instead of spelling it. The rule, per policy of `multispin.vocabulary.POLICY_TABLE`:

- a metric of the reference plan (``adaptive``) has no suffix, any other policy's ends in
  ``_<policy>`` (`multispin.vocabulary.Policy.suffix`); the reference's mean γ is ``gamma_mean``;
- a planning knowledge of the channel-knowledge study (perfect, naive, robust) follows the metric:
  ``goodput_naive_all_ul``;
- a capacity names its policy before the objective: ``capacity_all_ul_sum``.

Columns that no policy owns (``rho``, ``payload_bits_sparse``) belong to the reference in long form;
`to_wide` inverts `to_long` on every column a drop writes (a test checks).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from multispin.vocabulary import POLICY_TABLE, REFERENCE

# how the channel-knowledge study plans (multispin.experiments.reproduce.csi)
KNOWLEDGE = ("perfect", "naive", "robust")
# metrics that carry a knowledge: the goodput and the mean γ of a plan
_KNOWN_METRICS = ("goodput", "gamma")
_CAPACITY = "capacity_"


class Record(NamedTuple):
    """One number of one drop in long form (``knowledge`` is "" outside the channel-knowledge study)."""

    drop: int
    policy: str
    knowledge: str
    metric: str
    value: float


def column(metric: str, policy: str = REFERENCE, knowledge: str = "") -> str:
    """The wide column of ``metric`` of ``policy`` under ``knowledge`` (module doc)."""
    if metric.startswith(_CAPACITY):
        return f"{_CAPACITY}{policy}_{metric[len(_CAPACITY) :]}"
    suffix = POLICY_TABLE[policy].suffix
    if knowledge:
        return f"{metric}_{knowledge}{suffix}"
    return ("gamma_mean" if metric == "gamma" and not suffix else metric) + suffix


def gain_column(over: str, of: str = "", metric: str = "") -> str:
    """The gain-of-means column of ``of`` over ``over`` (each a policy, or a knowledge of the
    reference; ``of`` "" for the reference) on ``metric``'s short name ("" for goodput):
    ``gom_vs_all_ul_pct``, ``gom_three_way_vs_adaptive_pct``, ``gom_naive_vs_all_dl_pct``,
    ``gom_worst_vs_random_pct``."""
    return "_".join(x for x in ("gom", metric, of, "vs", over, "pct") if x)


def per_drop_gain_column(policy: str) -> str:
    """The per-drop gain of the reference over ``policy`` (averaged over drops): ``gain_vs_<policy>_pct``."""
    return f"gain_vs_{policy}_pct"


def _policies_by_suffix() -> list[tuple[str, str]]:
    # longest suffix first, so that no policy's suffix is taken for a shorter one's
    pairs = [(p.suffix, p.name) for p in POLICY_TABLE.values() if p.suffix]
    return sorted(pairs, key=lambda sp: -len(sp[0]))


def parse_column(name: str) -> tuple[str, str, str]:
    """(policy, knowledge, metric) of a wide column: the inverse of `column`."""
    if name.startswith(_CAPACITY):
        for policy in sorted(POLICY_TABLE, key=len, reverse=True):
            if name.startswith(f"{_CAPACITY}{policy}_"):
                return policy, "", _CAPACITY + name[len(_CAPACITY) + len(policy) + 1 :]
    policy, head = REFERENCE, name
    for suffix, owner in _policies_by_suffix():
        if name.endswith(suffix) and len(name) > len(suffix):
            policy, head = owner, name[: -len(suffix)]
            break
    for metric in _KNOWN_METRICS:
        for k in KNOWLEDGE:
            if head == f"{metric}_{k}":
                return policy, k, metric
    if head == "gamma_mean" and policy == REFERENCE:
        return policy, "", "gamma"
    return policy, "", head


def to_long(drop: int, row: Mapping[str, float]) -> list[Record]:
    """One drop's wide row as records, in the row's order."""
    return [Record(drop, *parse_column(name), float(value)) for name, value in row.items()]


def to_wide(records: Iterable[Record]) -> dict[int, dict[str, float]]:
    """Records pivoted to one wide row per drop (the CSVs' columns), in the records' order."""
    rows: dict[int, dict[str, float]] = {}
    for r in records:
        rows.setdefault(r.drop, {})[column(r.metric, r.policy, r.knowledge)] = r.value
    return rows
