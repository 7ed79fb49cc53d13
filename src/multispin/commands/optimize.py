"""`multispin optimize`: plan draft lengths and modes for one round of a scenario, with baselines."""

from __future__ import annotations

import json
import math

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from multispin.commands._app import app
from multispin.commands._flag_groups import OBJECTIVE, RADIO, takes
from multispin.commands._options import (
    LogLevel,
    Split,
    choice_option,
    json_option,
    log_level_option,
    pick_scenario,
    scenario_option,
    setup_logging,
)
from multispin.commands._scenario_fields import check_scenario_fields
from multispin.jsonout import versioned
from multispin.progress import step_progress
from multispin.vocabulary import DRAFT_POLICIES, VERIFY_CHOICES

# Measured on a 2-core host (peak RSS of `multispin optimize`, baselines on): memory grows like
# N_SAA·K² (per-outcome mode decisions over the rejected devices), about 50 bytes per cell:
# K=200, N_SAA=200: 0.5 GB; K=200, N_SAA=1000 and K=400, N_SAA=250: 1.9 GB. `--devices 100000`
# grew past 6.5 GB and was killed without a word. 5·10^7 cells stay near 2.5 GB.
MAX_SAA_CELLS = 50_000_000
# Time grows like K³ and hardly with N_SAA: K=200 took about 2 minutes, K=400 about 16.
SLOW_K, SLOW_K_SECONDS = 200, 120.0


def check_practical_size(scenario) -> None:
    """Refuse, in one line, a round whose SAA arrays would not fit in memory."""
    from multispin.errors import ConfigError

    k, n = scenario.devices.count, scenario.optimizer.n_saa
    if n * k * k > MAX_SAA_CELLS:
        n_fits = MAX_SAA_CELLS // (k * k)
        fix = (
            f"lower --n-saa to {n_fits} or --devices"
            if n_fits >= 1
            else f"--devices at most {math.isqrt(MAX_SAA_CELLS)}"
        )
        raise ConfigError(
            f"devices.count² × optimizer.n_saa: {k}² × {n} = {n * k * k:,} exceeds the practical "
            f"limit {MAX_SAA_CELLS:,} (memory, about 50 bytes each); {fix}"
        )


def expected_seconds(k: int) -> float:
    """A rough wall time of one round's search at K devices on a 2-core host (see SLOW_K)."""
    return SLOW_K_SECONDS * (k / SLOW_K) ** 3


def build_report(
    scenario: str = "paper-qwen",
    devices: int | None = None,
    p_dl_dbm: float | None = None,
    p_ul_dbm: float | None = None,
    seed: int | None = None,
    round_index: int = 0,
    n_saa: int | None = None,
    draft_policy: str = "greedy",
    split: str | None = None,
    acceptance_profile=None,
    compute_profile: str | None = None,
    baselines: bool = True,
    noise_figure_db: float | None = None,
    draft: str | None = None,
    force: bool = False,
    objective: str | None = None,
    energy_weight: float | None = None,
    verify: str = "standard",
    policy: str | None = None,
) -> dict:
    """The report of ``multispin optimize`` as one JSON-ready dict (also used by the table view):
    [`multispin.api.RoundPlan.to_dict`][multispin.api.RoundPlan.to_dict] of the plan the flags describe.

    ``scenario``: a preset name or a scenario file (or a Scenario); ``draft``: which draft's
    T^dft to take from a compute profile that times several."""
    from multispin import api
    from multispin.errors import ConfigError

    if round_index < 0:
        raise ConfigError(f"round: must be in [0, inf) (got {round_index})")
    if draft is not None and not compute_profile:
        raise ConfigError("draft: names a draft of --compute-profile; give --compute-profile too")
    sc = api.scenario(
        scenario,
        devices=devices,
        p_dl_dbm=p_dl_dbm,
        p_ul_dbm=p_ul_dbm,
        noise_figure_db=noise_figure_db,
        seed=seed,
        n_saa=n_saa,
        split=split,
    )
    check_practical_size(sc)
    if objective is not None or energy_weight is not None:
        sc = sc.override(
            {
                k: v
                for k, v in {
                    "optimizer.objective": objective,
                    "optimizer.energy_weight_tokens_per_j": energy_weight,
                }.items()
                if v is not None
            }
        )
    if acceptance_profile:
        sc = sc.with_acceptance_profile(acceptance_profile, force=force)
    if compute_profile:
        sc = sc.with_compute_profile(compute_profile, draft=draft, force=force)
    # the numbers come from the public API, so a script reproduces them (multispin.plan)
    p = api.plan(sc, round_index, draft_policy=draft_policy, baselines=baselines, verify=verify, policy=policy)
    return p.to_dict() | ({"user_policy": p.user} if p.user is not None else {})


def scenario_for_profiles(acceptance_profile, compute_profile):
    """Without ``--scenario``: the default scenario with the vocabulary of the profiles given, when
    they were measured on another pair (None otherwise), and the line that says so.

    "measure (or profile), then optimize" means "plan for the pair I measured": the paper's radio,
    devices and compute, with that pair's payload (``payload.vocab_size``; the profiles replace
    α and the compute). A scenario the user names keeps its own vocabulary (refused unless --force)."""
    from multispin.commands._options import DEFAULT_SCENARIO
    from multispin.system.profile_fit import profile_vocab_size, read_profile
    from multispin.system.scenario_io import resolve_scenario

    sources = [("acceptance_profile", p) for p in acceptance_profile or []]
    sources += [("compute_profile", compute_profile)] if compute_profile else []
    vocab = {profile_vocab_size(read_profile(p, what)) for what, p in sources} - {None}
    base = resolve_scenario(DEFAULT_SCENARIO)
    if len(vocab) != 1 or base.payload.vocab_size in vocab:
        return None, ""  # none named, or profiles of different pairs: the vocabulary check says which
    v = vocab.pop()
    from multispin.speculative.codecs import make_codec

    codec = make_codec(base.payload.codec)  # a sparse codec keeps at most V entries
    over: dict = {"payload.vocab_size": v}
    if getattr(codec, "v_eff", 0) > v:
        over["payload.codec"] = f"sparse:v_eff={v},q={codec.q}"
    sc = base.override(over)
    return sc, (
        f"scenario: {DEFAULT_SCENARIO} with payload.vocab_size = {v:,}, the profiles' pair's (--scenario names another)"
    )


def _waiting_label(devices: int | None) -> str:
    """What the spinner says while one round is optimised; for large K, the expected time up front."""
    label = "optimising one round"
    if devices and expected_seconds(devices) >= 60:
        label += f" (K={devices}: about {expected_seconds(devices) / 60:.0f} min on 2 cores)"
    return label


def _fmt_ms(v) -> str:
    return "-" if v is None else f"{1e3 * v:.1f}"


def _print_tables(r: dict) -> None:
    out = Console()
    if not out.is_terminal:
        out = Console(width=160)
    out.print(_device_table(r))
    out.print(_summary_table(r))
    _print_notes(out, r)


def _device_table(r: dict) -> Table:
    """One row per device: where it is, its task and draft model, its plan and how it is served."""
    coupled = r.get("verify", "standard") != "standard"
    t = Table(
        title=f"multispin optimize: {r['scenario']}, K={r['num_devices']}, P^dl={r['p_dl_dbm']:.2f} dBm, "
        f"seed {r['seed']}, round {r['round']}, draft policy {r['draft_policy']}, {r['bandwidth_split']} split"
    )
    for col in (
        "dev",
        "task",
        "dist m",
        "gain dB",
        "α",
        "T^dft ms",
        "γ",
        "P(rej)",
        "E[N]",
        "UL ms | rej",
        "UL share",
        "DL share",
        *(("coupled",) if coupled else ()),
    ):
        t.add_column(escape(col), justify="right")
    for d in r["devices"]:
        t.add_row(
            str(d["device"]),
            d["task"],
            f"{d['distance_m']:.0f}",
            f"{d['channel_gain_db']:.1f}",
            f"{d['alpha']:.3f}",
            f"{1e3 * d['draft_latency_s']:.1f}",
            str(d["draft_len"]),
            f"{d['rejection_prob']:.3f}",
            f"{d['expected_tokens']:.2f}",
            _fmt_ms(d["ul_latency_s"]),
            f"{d['ul_share']:.2f}",
            f"{d['dl_share']:.2f}",
            *(("yes" if d["coupled"] else "no",) if coupled else ()),
        )
    return t


def _summary_table(r: dict) -> Table:
    """The round's goodput and timing, the baselines' goodput against it, and the bounds."""
    s = Table(title="summary (per round; SAA over the same samples)")
    s.add_column("quantity")
    s.add_column("value", justify="right")
    s.add_row("G (tokens/s)", f"{r['goodput_tokens_per_s']:.2f}")
    s.add_row("G_max, free communication (tokens/s)", f"{r['g_max_tokens_per_s']:.2f}")
    s.add_row(escape("E[T_comm] (ms)"), _fmt_ms(r["e_t_comm_s"]))
    s.add_row("T_comp (ms)", _fmt_ms(r["t_comp_s"]))
    s.add_row(escape("E[tokens] per round"), f"{r['expected_tokens_per_round']:.2f}")
    for name, g in r["baselines"].items():
        gain = 100 * (r["goodput_tokens_per_s"] / g - 1) if g else float("nan")
        s.add_row(f"baseline {name} (tokens/s)", f"{g:.2f}  (ours {gain:+.1f}%)")
    c = r["certificate"]
    s.add_row(
        "free-communication bound max_γ G_max (tokens/s)",
        f"{c['upper_bound_tokens_per_s']:.2f}  (ours {c['gap_to_upper_bound_pct']:.1f}% below)",
    )
    if c.get("communication_bound_tokens_per_s") is not None:
        proven = "  proven optimal" if c.get("proven_optimal") else ""
        s.add_row(
            escape("communication-aware bound on max_γ G (tokens/s)"),
            f"{c['communication_bound_tokens_per_s']:.2f}  (ours {c['gap_to_communication_bound_pct']:.1f}% "
            f"below){proven}",
        )
    return s


def _print_notes(out: Console, r: dict) -> None:
    """The lines under the tables: the objective's plan, the radio and compute settings, and notes."""
    if r.get("objective"):
        o = r["objective"]
        out.print(
            f"objective {o['name']} ({o['search']} search): γ = {o['draft_len']}, value {o['value']:.4g}; "
            f"sum goodput {o['goodput_tokens_per_s']:.2f} tokens/s (sum plan {r['goodput_tokens_per_s']:.2f}); "
            f"worst device {o['worst_device_goodput_tokens_per_s']:.2f} tokens/s "
            f"(sum plan {o['sum_plan_worst_device_goodput_tokens_per_s']:.2f})",
            highlight=False,
        )
    out.print(
        f"radio: B={r['bandwidth_hz'] / 1e6:g} MHz, P^ul={r['p_ul_dbm']:g} dBm, P^dl={r['p_dl_dbm']:.2f} dBm, "
        f"N0={r['noise_psd_dbm_per_hz']:g} dBm/Hz + NF {r['noise_figure_db']:g} dB, "
        f"S={r['payload_bits']} bits ({r['codec']})"
    )
    # a line of its own: wrapped into the radio line, the break fell after a dangling "; "
    out.print(
        f"compute: T_ver0={1e3 * r['t_ver0_s']:g} ms, T_ver1={1e3 * r['t_ver1_s']:g} ms, "
        f"T_ver_tok={1e3 * r['t_ver_tok_s']:g} ms; N_SAA={r['n_saa']}"
    )
    if r.get("user_policy"):  # your own policy on the plan's samples (docs/own-policy.md)
        u = r["user_policy"]
        gain = "—" if u["adaptive_gain_pct"] is None else f"{u['adaptive_gain_pct']:+.1f}%"
        out.print(
            f"your policy {u['policy']}: {u['goodput_tokens_per_s']:.2f} tokens/s on these samples, mean γ "
            f"{u['mean_draft_len']:.2f}; adaptive vs it {gain} (one round's samples, no interval: ms.evaluate "
            "or sweep --policies give one)",
            highlight=False,
        )
    if r.get("coupled_alpha"):
        out.print(f"verify {r['verify']}: coupled share {r['coupled_share']:.2f}", highlight=False)
        out.print(f"[yellow]note:[/yellow] {escape(r['coupled_alpha'])}")
    if r["acceptance_assumed"]:
        out.print(
            "[yellow]note:[/yellow] per-task acceptance rates are assumed (the paper gives only a range); "
            "pass --acceptance-profile with measured rates."
        )


@app.command()
@takes(RADIO, OBJECTIVE)
def optimize(
    scenario: str | None = scenario_option(),
    devices: int | None = typer.Option(
        None,
        min=1,
        metavar="INT",
        show_default="the scenario's",
        help="number of devices K (K² × N_SAA at most 50 million: memory; time grows like K³)",
    ),
    radio: dict = RADIO.slot,
    objective: dict = OBJECTIVE.slot,
    seed: int | None = typer.Option(
        None, min=0, metavar="INT", show_default="the scenario's", help="scenario seed (drop, tasks, fading, SAA)"
    ),
    round_index: int = typer.Option(
        0, "--round", min=0, metavar="INT", help="round index (block fading is redrawn per round)"
    ),
    n_saa: int | None = typer.Option(
        None, "--n-saa", min=1, metavar="INT", show_default="the scenario's", help="SAA outcome samples N_SAA"
    ),
    draft_policy: str | None = choice_option(
        None,
        DRAFT_POLICIES,
        "--draft-policy",
        show_default="greedy",
        help="how draft lengths are chosen; certified: branch and bound to the proven SAA optimum (K ≤ 12, "
        "20 s budget)",
    ),
    split: Split | None = typer.Option(
        None, show_default="the scenario's", help="bandwidth split among rejected devices: equal (paper) or optimized"
    ),
    acceptance_profile: list[str] | None = typer.Option(
        None,
        "--acceptance-profile",
        metavar="FILE",
        help="measured acceptance-profile JSON, from `multispin measure --out` (repeat for several tasks)",
    ),
    compute_profile: str | None = typer.Option(
        None, "--compute-profile", metavar="FILE", help="measured compute-profile JSON, from `multispin profile --out`"
    ),
    draft: str | None = typer.Option(
        None,
        "--draft",
        metavar="NAME",
        show_default="the profile's drafts in turn",
        help="draft whose T^dft every device takes from a compute profile that times several",
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="apply a profile measured on another vocabulary than the scenario's (warns instead of refusing)",
    ),
    no_baselines: bool = typer.Option(False, "--no-baselines", help="skip the baselines"),
    verify: str = choice_option(
        "standard",
        VERIFY_CHOICES,
        "--verify",
        help="verification rule: standard (the paper's: UL/DL corrections), coupled (every device, shared "
        "randomness, nothing corrected over the air) or choose (per device, with γ); the coupled α is an "
        "assumption (docs/system-model.md §5.7)",
    ),
    policy: str | None = typer.Option(
        None,
        "--policy",
        metavar="MODULE:ATTR",
        help="also play your own policy over the round's samples, beside the plan (docs/own-policy.md)",
    ),
    as_json: bool = json_option(),
    log_level: LogLevel = log_level_option(),
) -> None:
    """Optimise one round: draft lengths per device, UL/DL modes and powers, against the baselines."""
    setup_logging(log_level)
    spec = pick_scenario(scenario)
    if scenario is None:
        matched, line = scenario_for_profiles(acceptance_profile, compute_profile)
        if matched is not None:
            spec = matched
            typer.echo(line, err=True)
    check_scenario_fields("optimize", spec)
    # on a pipe or a log file a spinner only adds a blank line before the result: lines mode shows none
    with step_progress(transient=True) as progress:
        progress.loading(_waiting_label(devices))
        report = build_report(
            scenario=spec,
            devices=devices,
            **radio,
            **objective,
            seed=seed,
            round_index=round_index,
            n_saa=n_saa,
            draft_policy=draft_policy or "greedy",
            split=split,
            acceptance_profile=acceptance_profile,
            compute_profile=compute_profile,
            draft=draft,
            force=force,
            baselines=not no_baselines,
            verify=verify,
            policy=policy,
        )
    if as_json:
        typer.echo(json.dumps(versioned(report, "optimize")))
    else:
        _print_tables(report)
