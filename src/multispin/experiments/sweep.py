"""A user's own study: goodput of several policies over a grid of scenario values, with 95%
intervals, on the machinery of ``multispin reproduce`` (its drops, per-chunk cache, process pool
and statistics), not a copy of it.

Each grid point is the scenario with one value of every swept field (the Cartesian product of
``over``). Every point and every policy sees the same drops (device positions, tasks, draft
latencies, fading and SAA samples, from one seed per drop index): the comparison between
policies, and between points, is paired on common random numbers. A drop is what
`multispin.experiments.reproduce.drop.run_drop` computes: round 0 of the drop, the shipped
search with optimal modes, and each baseline with its own optimised draft lengths, all on the drop's
samples. Per point and policy the table gives the mean goodput with its 95% interval (bootstrap,
`multispin.experiments.reproduce.stats`) and adaptive's gain over the policy as a ratio of
means with the paired delta-method interval.

Objective (``optimizer.objective``; ``objective=``, ``--objective``): the sum by default, as in the
paper; another objective plans adaptive and the mode baselines for it on the same drops
(`multispin.experiments.reproduce.drop.objective_drop`), and the goodput stays the sum goodput
of those plans. Beside it each row has what each device gets from the policy's plan on the drop's
samples (the worst device's goodput, Jain's index, energy per generated token, p95 TPOT:
`multispin.experiments.reproduce.drop.service_columns`), with the same intervals and adaptive's
paired change against the policy (docs/service.md).

Channel knowledge (``channel.speed_kmh``, ``channel.pilot_snr_db``, ``channel.planning``): a point
whose scenario moves its devices or estimates its channel from pilots runs the channel-knowledge
drop of ``multispin reproduce`` (`multispin.experiments.reproduce.csi`): each policy plans on the
aged, noisy estimate (naively or robustly, as ``channel.planning`` says) and is scored on the true
channel. That drop compares adaptive, all-UL and all-DL modes only; other policies are refused.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multispin.errors import ConfigError, Interrupted
from multispin.experiments.own_policy import drop_goodput, sweep_row
from multispin.experiments.reproduce._figure import STYLE, band, by, legend, pyplot, save, value_ticks
from multispin.experiments.reproduce.config import Point, RunConfig
from multispin.experiments.reproduce.csi import CSI_POLICIES, CSI_REPLICATES
from multispin.experiments.reproduce.long_form import column, gain_column
from multispin.experiments.reproduce.runner import run_points
from multispin.experiments.reproduce.stats import summarise_drops
from multispin.jsonout import json_safe, versioned
from multispin.optimize.objectives import check_objective
from multispin.runtime.round.user_policy import UserPolicy
from multispin.system import World, scenario_from_dict
from multispin.system.channel_process import uses_channel_process
from multispin.system.coupled_alpha import ASSUMPTION, MEASURED_COUPLED
from multispin.vocabulary import REFERENCE, STANDARD, policies_in

# policy -> (the per-drop goodput column, its γ column, which baselines the drop must run): every
# policy a drop computes (vocabulary.POLICY_TABLE); the drop's option is the policy's group, none
# for the plan itself. The coupled policies' coupled α is assumed (experiments.reproduce.coupled).
SWEEP_POLICIES = {
    p.name: (column("goodput", p.name), column("gamma", p.name), None if p.group == "plan" else p.group)
    for p in policies_in()
}
# the share of coupled devices in a policy's plan: a drop column where the plan chooses per device,
# 1 where every device is coupled (none in the others)
COUPLED_SHARE: dict[str, str | float] = {
    p.name: column("frac_coupled", p.name) if p.verify == "choose" else 1.0
    for p in policies_in()
    if p.verify != STANDARD
}
# the leads beside the paper's plan (the three-way plan): each row carries its paired gain over it
_LEADS = tuple(p.name for p in policies_in() if p.lead and p.name != REFERENCE)
DEFAULT_POLICIES = ("adaptive", "all_ul", "all_dl")
# what a non-sum objective plans: adaptive and the mode baselines, each searching its γ for the
# objective (experiments.reproduce.drop.objective_drop); the draft-length baselines are sum heuristics
OBJECTIVE_POLICIES = tuple(p.name for p in policies_in(kind="objective"))
# service column of a drop (experiments.reproduce.drop.service_columns) -> the table's key; adaptive's
# column has no suffix, a baseline's ends in _<policy>, as goodput's
SERVICE_COLUMNS = {
    "goodput_worst": ("worst_device_goodput_tokens_per_s", "worst"),
    "jain": ("jain_index", "jain"),
    "energy_per_token_j": ("energy_per_token_j", "energy_per_token"),
    "tpot_p95_s": ("tpot_p95_s", "tpot_p95"),
}
STUDY = "sweep"
USER_STYLE = {"color": "tab:gray", "marker": "D", "linestyle": "-."}  # a user policy's line


@dataclass(frozen=True)
class _ScenarioPoint(Point):
    """A point of a user's scenario (any file or object, not only a preset)."""

    base: dict = field(default_factory=dict)

    def scenario_dict(self) -> dict[str, Any]:

        return scenario_from_dict(self.base).override(self.overrides).to_dict()


@dataclass(frozen=True)
class SweepTable:
    """Goodput per grid point and policy, with 95% intervals (``rows``, one per point × policy).

    A row holds the point's swept values (by dotted field name), ``policy``,
    ``goodput_tokens_per_s`` with ``goodput_low``/``goodput_high``, ``adaptive_gain_pct`` with
    ``adaptive_gain_low``/``adaptive_gain_high`` (100·(mean G_adaptive / mean G_policy − 1),
    paired; ``None`` on adaptive's own row), ``mean_draft_len``, ``n_drops``, and the service
    figures ``worst_device_goodput_tokens_per_s``, ``jain_index``, ``energy_per_token_j`` and
    ``tpot_p95_s``, each with ``_low``/``_high`` and adaptive's paired change ``adaptive_<f>_pct``
    with ``adaptive_<f>_low``/``adaptive_<f>_high`` for f in worst, jain, energy_per_token, tpot_p95 (None on
    adaptive's row and where the drop computes none). ``summaries`` keeps every per-point
    statistic of the drops (the reproduce CSV row of each point). ``objective``: what the plans
    maximise (``energy_weight_tokens_per_j``: the energy objective's w, None for the others)."""

    scenario: str
    over: dict[str, list]
    policies: list[str]
    drops: int
    seed: int
    rows: list[dict[str, Any]]
    summaries: list[dict[str, Any]] = field(repr=False, default_factory=list)
    objective: str = "sum"
    energy_weight_tokens_per_j: float | None = None  # the energy objective's w (None for the others)
    notes: list[str] = field(default_factory=list)  # swept fields that changed nothing (`unchanged_axes`)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready table (what ``multispin sweep --json`` prints, less the version fields)."""

        return json_safe(
            {
                "scenario": self.scenario,
                "over": self.over,
                "policies": self.policies,
                "drops": self.drops,
                "seed": self.seed,
                "objective": self.objective,
                "energy_weight_tokens_per_j": self.energy_weight_tokens_per_j,
                "rows": self.rows,
                "notes": self.notes,
            }
        )

    def to_json(self) -> str:
        """The document ``multispin sweep --json`` prints for the same sweep."""

        return json.dumps(versioned(self.to_dict(), "sweep"))


def check_policies(policies: Sequence[str]) -> list[str]:
    """The policies in the one vocabulary, or a ConfigError naming the allowed ones."""
    out = []
    for p in policies:
        if p not in SWEEP_POLICIES:
            raise ConfigError(f"policies: unknown policy {p!r} (allowed: {', '.join(SWEEP_POLICIES)})")
        if p not in out:
            out.append(p)
    if not out:
        raise ConfigError(f"policies: give at least one (allowed: {', '.join(SWEEP_POLICIES)})")
    return out


# grid points of one sweep at most; counted from the value lists before the grid is built
MAX_GRID_POINTS = 10_000


def check_grid_size(over: Mapping[str, Sequence[Any]]) -> None:
    """A one-line ConfigError when the Cartesian product of ``over`` exceeds MAX_GRID_POINTS."""
    size = math.prod(len(v) for v in over.values())
    if size > MAX_GRID_POINTS:
        raise ConfigError(f"over: the grid has {size} points, at most {MAX_GRID_POINTS} (sweep fewer values)")


def grid_points(sc, over: Mapping[str, Sequence[Any]], policies: Sequence[str]) -> list[_ScenarioPoint]:
    """One point per combination of the swept values, each checked now (a bad value stops here)."""
    objective = sc.optimizer.objective
    if objective != "sum":
        other = [p for p in policies if p not in OBJECTIVE_POLICIES]
        if other:
            raise ConfigError(
                f"policies: {', '.join(other)}: plan the sum goodput only (allowed with objective "
                f"{objective!r}: {', '.join(OBJECTIVE_POLICIES)})"
            )
    if not over:
        raise ConfigError("over: name at least one field and its values, e.g. {'radio.p_dl_dbm': [10, 20, 30]}")
    for name, values in over.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ConfigError(f"over: {name}: needs a non-empty list of values (got {values!r})")
        if name in ("seed", "radio.bandwidth_split"):
            raise ConfigError(
                f"over: {name}: cannot be swept (the drops set the seed; a drop plans with the equal split)"
            )
    if sc.radio.bandwidth_split != "equal":
        raise ConfigError(
            "radio.bandwidth_split: the sweep plans with the equal split, as the reproduction "
            f"does (the scenario has {sc.radio.bandwidth_split!r})"
        )

    needs = {n for p in policies if (n := SWEEP_POLICIES[p][2]) is not None}
    # service: the drop also reports what each device gets under each policy's plan
    options: dict[str, Any] = {**{k: True for k in sorted(needs)}, "service": True}
    base = sc.to_dict()
    names = list(over)
    check_grid_size(over)
    points = []
    for values in itertools.product(*(over[n] for n in names)):
        overrides = dict(zip(names, values))
        point_sc = sc.override(overrides)  # ConfigError naming the field for a bad value, before any drop runs
        point_options = options
        if uses_channel_process(point_sc):  # mobility or pilots: the channel-knowledge drop (module doc)
            other = [p for p in policies if p not in CSI_POLICIES]
            if other:
                raise ConfigError(
                    f"policies: {', '.join(other)}: not compared under channel.speed_kmh / "
                    f"channel.pilot_snr_db (allowed there: {', '.join(CSI_POLICIES)})"
                )
            if objective != "sum":  # the channel-knowledge drop plans the sum (the planner's rule too)
                raise ConfigError(
                    f"objective: {objective!r} plans on the known channel; channel.speed_kmh and "
                    "channel.pilot_snr_db allow the objective 'sum' only"
                )
            point_options = {"csi": True, "replicates": CSI_REPLICATES, "planning": point_sc.channel.planning}
        # seed_params=(): every point draws the same drops (common random numbers across the grid)
        points.append(_ScenarioPoint(STUDY, overrides, sc.name, overrides, point_options, seed_params=(), base=base))
    if "channel.planning" in over and not any(p.options.get("csi") for p in points):
        raise ConfigError(
            "over: channel.planning: changes nothing here: planning acts on channel estimates, and no point "
            "sets channel.speed_kmh or channel.pilot_snr_db (e.g. --set channel.pilot_snr_db=10)"
        )
    return points


def unchanged_axes(rows: Sequence[dict], over: Mapping[str, Sequence[Any]]) -> list[str]:
    """A note for each swept field whose values gave identical rows (goodput and γ̄ of every
    policy, at every value of the other fields): a field that changed nothing in these drops."""
    notes = []
    for name, values in over.items():
        if len(set(map(repr, values))) < 2:
            continue
        groups: dict[tuple, set] = {}
        for r in rows:
            key = (r["policy"], *(repr(r[n]) for n in over if n != name))
            groups.setdefault(key, set()).add((r["goodput_tokens_per_s"], r["mean_draft_len"]))
        if groups and all(len(g) == 1 for g in groups.values()):
            notes.append(f"{name}: every value gave the same goodput and γ̄ (the field changed nothing in these drops)")
    return notes


def csi_rows(rows: Sequence[dict], planning: str) -> list[dict]:
    """A channel-knowledge drop's rows in the sweep's columns: each policy's goodput and γ as planned
    under ``planning`` (naive or robust) and scored on the true channel."""
    out = []
    for r in rows:
        row = {k: r[k] for k in ("drop", "drop_seed") if k in r}
        for policy in CSI_POLICIES:
            g, gamma, _ = SWEEP_POLICIES[policy]
            row[g] = r[column("goodput", policy, planning)]
            row[gamma] = r[column("gamma", policy, planning)]
        row["goodput_perfect_knowledge"] = r[column("goodput", knowledge="perfect")]
        out.append(row)
    return out


def table_rows(points: Sequence[Point], summaries: Sequence[dict], policies: Sequence[str]) -> list[dict]:
    """The rows of a SweepTable from each point's summary (the statistics of its drops)."""
    rows = []
    for point, s in zip(points, summaries):
        for p in policies:
            g, gamma, _ = SWEEP_POLICIES[p]
            gain = None if p == REFERENCE else gain_column(p)
            rows.append(
                {
                    **point.params,
                    "policy": p,
                    "goodput_tokens_per_s": s.get(g),
                    "goodput_low": s.get(g + "_lo"),
                    "goodput_high": s.get(g + "_hi"),
                    "adaptive_gain_pct": s.get(gain) if gain else None,
                    "adaptive_gain_low": s.get(gain + "_lo") if gain else None,
                    "adaptive_gain_high": s.get(gain + "_hi") if gain else None,
                    "mean_draft_len": s.get(gamma),
                    "n_drops": s["n_drops"],
                    **coupled_cells(s, p, _coupled_alpha_given(point)),
                    **service_cells(s, p),
                }
            )
    return rows


def _coupled_alpha_given(point: Point) -> bool:
    """Whether the point's scenario gives its devices' coupled α (its base or its overrides)."""
    base = getattr(point, "base", None) or {}
    return (
        "devices.acceptance_coupled" in point.overrides or base.get("devices", {}).get("acceptance_coupled") is not None
    )


def coupled_cells(s: dict, policy: str, measured: bool = False) -> dict[str, Any]:
    """The coupled share of the policy's plan with its interval (0 for the two-way policies) and,
    where the point ran the coupled policies, what their coupled α rests on: the assumption, or the
    point's own ``devices.acceptance_coupled`` (``measured``)."""

    share = COUPLED_SHARE.get(policy, 0.0)
    if isinstance(share, str):
        out = {"coupled_share": s.get(share), "coupled_share_low": s.get(share + "_lo")}
        out["coupled_share_high"] = s.get(share + "_hi")
    else:
        out = {"coupled_share": share, "coupled_share_low": share, "coupled_share_high": share}
    coupled = any(column("goodput", p) in s for p in COUPLED_SHARE)
    out["coupled_alpha"] = (MEASURED_COUPLED if measured else ASSUMPTION) if coupled else None
    # a lead's paired gain over the paper's adaptive plan, on its own row
    for lead in _LEADS:
        gain = gain_column(REFERENCE, lead) if policy == lead else None
        for end, at in (("pct", ""), ("low", "_lo"), ("high", "_hi")):
            out[f"{lead}_gain_{end}"] = s.get(gain + at) if gain else None
    return out


def service_cells(s: dict, policy: str) -> dict[str, Any]:
    """A row's service figures (SERVICE_COLUMNS) with their 95% intervals and adaptive's paired
    change against the policy (``adaptive_<name>_pct``, as adaptive_gain_pct; None on adaptive's
    row); None where the point's drop computes none (the channel-knowledge drop)."""
    out: dict[str, Any] = {}
    for metric, (key, short) in SERVICE_COLUMNS.items():
        c = column(metric, policy)
        out[key] = s.get(c)
        out[f"{key}_low"], out[f"{key}_high"] = s.get(c + "_lo"), s.get(c + "_hi")
        gain = None if policy == REFERENCE else gain_column(policy, metric=short)
        for end, at in (("pct", ""), ("low", "_lo"), ("high", "_hi")):
            out[f"adaptive_{short}_{end}"] = s.get(gain + at) if gain else None
    return out


def run_sweep(
    sc,
    over: Mapping[str, Sequence[Any]],
    drops: int = 10,
    policies: Sequence[str] = DEFAULT_POLICIES,
    *,
    seed: int | None = None,
    workers: int = 1,
    out: Path | None = None,
    progress: bool = False,
    objective: str | None = None,
    energy_weight: float | None = None,
    user_policies: Mapping[str, UserPolicy] | None = None,
) -> SweepTable:
    """Every point of the grid on ``drops`` drops (see the module doc). ``seed``: the base seed of
    the drops (default: the scenario's); ``out``: a folder for the per-chunk cache (an interrupted
    or repeated sweep reuses it; ``None``: no cache); ``workers``: processes for the drops;
    ``objective``/``energy_weight``: what the plans maximise (default: the scenario's
    ``optimizer.objective`` and ``optimizer.energy_weight_tokens_per_j``); ``user_policies``: your
    own policies by label, each a row per point on the same drops (`experiments.own_policy`)."""

    sc = _with_objective(sc, objective, energy_weight)
    policies = check_policies(policies)
    points = grid_points(sc, over, policies)
    if user_policies:
        _check_user_points(points, sc.optimizer.objective)
    base_seed = int(sc.seed if seed is None else seed)
    cfg = RunConfig(
        out=Path(out) if out is not None else Path("."),
        seed=base_seed,
        workers=workers,
        drops=drops,
        use_cache=out is not None,
        progress=progress,
    )
    try:
        results = run_points([(p, drops) for p in points], cfg)
    except Interrupted as exc:  # the runner's words are reproduce's (--no-cache): say it for a sweep
        done = str(exc).split(";")[0]
        how = "rerun the same command to resume" if out is not None else "nothing was kept (give --out to resume)"
        raise Interrupted.after(exc, f"{done}; {how}") from None
    summaries = [_summary(p, results[(p.study, p.id)]) for p in points]
    rows = table_rows(points, summaries, policies)
    if user_policies:
        rows = _with_user_rows(points, results, rows, len(policies), user_policies)
    return SweepTable(
        sc.name,
        {k: list(v) for k, v in over.items()},
        policies + list(user_policies or ()),
        drops,
        base_seed,
        rows,
        summaries,
        sc.optimizer.objective,
        sc.optimizer.energy_weight_tokens_per_j if sc.optimizer.objective == "energy" else None,
        unchanged_axes(rows, over),
    )


def _check_user_points(points: Sequence[Point], objective: str) -> None:
    """A user policy is played on the known channel's drops for the sum goodput: refused elsewhere."""
    if objective != "sum":
        raise ConfigError(f"policies: a user policy is compared on the sum goodput only (objective {objective!r})")
    if any(p.options.get("csi") for p in points):
        raise ConfigError(
            "policies: a user policy is not compared under channel.speed_kmh / channel.pilot_snr_db "
            f"(allowed there: {', '.join(CSI_POLICIES)})"
        )


def _with_user_rows(
    points: Sequence[Point], results: Mapping, rows: list[dict], per_point: int, user_policies: Mapping[str, UserPolicy]
) -> list[dict]:
    """The table's rows with each user policy's row after the built-ins' of every point, on the
    point's drops (their seeds rebuild each drop's instance and SAA samples)."""
    out: list[dict] = []
    keys = list(rows[0])
    for i, point in enumerate(points):
        out += rows[i * per_point : (i + 1) * per_point]
        drops = results[(point.study, point.id)]
        base = point.scenario_dict()
        worlds = [World(scenario_from_dict({**base, "seed": int(d["drop_seed"])})) for d in drops]
        for label, policy in user_policies.items():
            per_drop = [drop_goodput(w.instance(0), w.saa_uniforms(0), policy) for w in worlds]
            out.append(sweep_row(point.params, keys, label, per_drop, [d["goodput"] for d in drops]))
    return out


def _with_objective(sc, objective: str | None, energy_weight: float | None):
    """The scenario with the sweep's objective and energy weight, where given."""

    fields: dict[str, Any] = {}
    if objective is not None:
        fields["optimizer.objective"] = check_objective(objective)
    if energy_weight is not None:
        fields["optimizer.energy_weight_tokens_per_j"] = energy_weight
    # the objective lives in the scenario, so every point's cache key (which holds the scenario) tells
    # objectives and weights apart
    return sc.override(fields) if fields else sc


def _summary(point, drops: list[dict]) -> dict:
    """One point's summary over its drops (a channel-knowledge point's drops read at its planning)."""

    return summarise_drops(
        point.params, csi_rows(drops, point.options["planning"]) if point.options.get("csi") else drops
    )


# what `plot_sweep` can draw: metric -> (the row's key, its interval's keys, the y axis label)
PLOT_METRICS = {
    "goodput": ("goodput_tokens_per_s", "goodput_low", "goodput_high", "sum goodput G (tokens/s)"),
    **{
        metric: (key, f"{key}_low", f"{key}_high", label)
        for metric, key, label in (
            (
                "worst_device_goodput",
                "worst_device_goodput_tokens_per_s",
                "worst device's goodput min_k G_k (tokens/s)",
            ),
            ("jain_index", "jain_index", "Jain's index of the G_k"),
            ("tpot_p95", "tpot_p95_s", "p95 TPOT on the model (s)"),
            ("energy_per_token", "energy_per_token_j", "device energy per generated token (J)"),
        )
    },
}


def plot_sweep(table: SweepTable, path: Path | None = None, field_name: str | None = None, metric: str = "goodput"):
    """A metric of `PLOT_METRICS` (goodput by default) against the swept field, one line per policy
    with its 95% band; saved to ``path`` when given. A sweep over several fields needs
    ``field_name`` (the x axis) and draws one panel per combination of the others."""

    if metric not in PLOT_METRICS:
        raise ConfigError(f"metric: {metric!r} is not one of {', '.join(PLOT_METRICS)}")
    column, low, high, ylabel = PLOT_METRICS[metric]
    if all(r.get(column) is None for r in table.rows):
        raise ConfigError(f"metric: this sweep has no {metric!r} (the channel-knowledge drop computes goodput only)")
    x = field_name or next(iter(table.over))
    if x not in table.over:
        raise ConfigError(f"field: {x!r} is not swept (swept: {', '.join(table.over)})")
    if field_name is None and len(table.over) > 1:
        raise ConfigError(f"field: the sweep is over {', '.join(table.over)}; name the x axis")
    others = tuple(k for k in table.over if k != x)
    panels = by(table.rows, others) if others else {(): table.rows}
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels), 3.6), squeeze=False)
    for ax, (key, rows) in zip(axes[0], panels.items()):
        for p in table.policies:
            pts = sorted((r for r in rows if r["policy"] == p), key=lambda r: r[x])
            band(
                ax,
                [{x: r[x], "g": r[column], "g_lo": r[low], "g_hi": r[high]} for r in pts],
                x,
                "g",
                p,
                style=STYLE.get(p, USER_STYLE),
            )
        if all(isinstance(v, (int, float)) for v in table.over[x]):
            value_ticks(ax, table.over[x])
        ax.set_xlabel(x)
        ax.set_ylabel(ylabel)
        title = ", ".join(f"{k} = {v}" for k, v in zip(others, key))
        ax.set_title(f"{table.scenario}{': ' + title if title else ''} ({table.drops} drops, 95% bands)", fontsize=9)
        ax.grid(alpha=0.3)
        legend(ax)
    label = next((r["coupled_alpha"] for r in table.rows if r.get("coupled_alpha")), None)
    if label:  # the coupled policies rest on an assumed coupled α: the figure says so
        fig.text(0.01, 0.005, label, fontsize=6, wrap=True)
        fig.subplots_adjust(bottom=0.28)
    if path is not None:
        save(fig, Path(path))
    return fig
