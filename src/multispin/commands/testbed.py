"""`multispin testbed` and `multispin demo`: the networked edge system with the optimiser in the loop."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import typer
from rich.console import Console
from rich.table import Table

from multispin.acceptance.kinds import planned_alpha_source
from multispin.commands._app import app
from multispin.commands._checks import FORCE_HELP, check_out_free
from multispin.commands._flag_groups import CSI, LINK, MACHINE, OBJECTIVE, RADIO, takes
from multispin.commands._interrupt import reported_interrupt
from multispin.commands._options import (
    Split,
    json_option,
    pair_option,
    pick_scenario,
    scenario_option,
    table_console,
)
from multispin.commands._scenario_fields import check_scenario_fields, running_values
from multispin.commands._service_tables import print_objectives, right_aligned, service_table
from multispin.experiments.demo_defaults import DEMO_DEVICES, DEMO_ROUNDS, STUDY_POLICIES, STUDY_ROUNDS, STUDY_SEEDS
from multispin.jsonout import versioned
from multispin.progress import step_progress
from multispin.vocabulary import RUN_POLICIES, STANDARD, policy_verify

if TYPE_CHECKING:
    from multispin.experiments.demo import PolicyRow, SweepPoint
    from multispin.experiments.run_summary import RunSummary
    from multispin.experiments.testbed import TestbedSetup

DEVICES_SHOWN = "the scenario file's devices.count; 8 with a preset"


ACCEPTANCE_PROFILE_OPTION = typer.Option(
    None,
    "--acceptance-profile",
    metavar="FILE",
    help="α measured on this pair (`multispin measure --out`; repeat per task): the planner and the "
    "forecast use it instead of an assumed α",
)
COMPUTE_PROFILE_OPTION = typer.Option(
    None,
    "--compute-profile",
    metavar="FILE",
    help="compute times measured on this host (`multispin profile --out`): the virtual clock, the "
    "planner and the forecast use them",
)


def _table(summaries: list[RunSummary], title: str) -> Table:
    t = right_aligned(
        title,
        "G: tokens/s on the scenario clock; forecast: the model's prediction on "
        "fresh channels, independent of the run, with the 95% range of one run of this length "
        "(steady state); †: not a check of the model (why: below); model / MC: what the analytic "
        "model and the Monte Carlo simulator give at the realised rounds' γ and channels; "
        "DL: share of corrections in DL mode; γ̄: mean draft length; "
        "up / down: kbit moved per token on each link (drafts with their "
        "q scalars, ids, rejection positions, distributions); chg: kbit per "
        "token the clock charged airtime for; rec: every device's text "
        "equals the server's record",
        ("policy", "G", "forecast", "model", "MC", "DL", "γ̄", "up", "down", "chg", "rec"),
    )
    for s in summaries:
        model = s.conditioned
        t.add_row(
            s.policy,
            f"{s.goodput_tokens_per_s:.1f}",
            forecast_cell(s),
            f"{model.analytic_tokens_per_s:.1f}" if model else "—",
            f"{model.montecarlo_tokens_per_s:.1f}" if model else "—",
            f"{s.dl_share:.2f}",
            f"{s.figures.mean_gamma:.1f}",
            f"{s.bits.up / 1e3:.1f}",
            f"{s.bits.down / 1e3:.1f}",
            f"{s.bits.charged / 1e3:.1f}",
            "ok" if s.integrity.records_match else "MISMATCH",
        )
    return t


def _policy_choice(value: str) -> str:
    """A built-in policy name, or a user policy's module:attr (loaded when the run starts)."""
    if value in RUN_POLICIES or ":" in value:
        return value
    raise typer.BadParameter(f"{value!r} is not one of {', '.join(map(repr, RUN_POLICIES))} nor MODULE:ATTR")


def forecast_cell(s: RunSummary) -> str:
    """The forecast with its 95% range for one run of this length (where the model gives one), and
    † where it cannot be trusted (the lines under the table say why)."""
    f = s.forecast
    if f is None:
        return "—"
    lo, hi = f.one_run_low, f.one_run_high
    text = f"{f.tokens_per_s:.1f}" + (f" [{lo:.1f}, {hi:.1f}]" if lo is not None and hi is not None else "")
    return text + ("†" if s.caveats else "")


@app.command()
@takes(RADIO, CSI, OBJECTIVE, LINK, MACHINE)
def testbed(
    pair: str = pair_option(),
    devices: int | None = typer.Option(
        None, min=1, max=256, metavar="INT", show_default=DEVICES_SHOWN, help="number of device processes K (1..256)"
    ),
    rounds: int | None = typer.Option(
        None,
        min=1,
        max=4096,
        metavar="INT",
        show_default="until every device is done",
        help="run this many rounds in steady state (each device works through a queue of prompts, max-new-tokens each)",
    ),
    max_new_tokens: int = typer.Option(64, min=1, max=8192, metavar="INT", help="tokens per device (per prompt)"),
    draft: list[str] | None = typer.Option(
        None,
        "--draft",
        metavar="NAME",
        help="draft model, repeatable (cycled over devices); default: the pair's default draft on every device",
    ),
    clock: Literal["virtual", "wall"] = typer.Option(
        "virtual", help="virtual: the scenario's compute profile and airtime; wall: this host, airtime emulated"
    ),
    scenario: str | None = scenario_option(),
    policy: str = typer.Option(
        "adaptive",
        "--policy",
        metavar=f"<{'|'.join(RUN_POLICIES)}|MODULE:ATTR>",
        callback=_policy_choice,
        help="correction modes: the optimiser's, all UL, all DL, a fair coin; or target_only (γ = 0); "
        "or your own policy, module:attr (docs/own-policy.md)",
    ),
    split: Split | None = typer.Option(
        None,
        show_default="the scenario file's radio.bandwidth_split; equal",
        help="bandwidth split among rejected devices",
    ),
    radio: dict = RADIO.slot,
    csi: dict = CSI.slot,
    objective: dict = OBJECTIVE.slot,
    tasks: Literal["chat", "code", "mixed"] = typer.Option("mixed", help="prompt tasks"),
    seed: int | None = typer.Option(
        None,
        min=0,
        metavar="INT",
        show_default="the scenario file's seed; 0",
        help="seed of prompts, channel and sampling",
    ),
    runner: Literal["fork", "subprocess", "thread", "pool"] = typer.Option(
        "fork",
        help="how devices run: a process (fork, subprocess) or thread each, or one pool process "
        "drafting them in batched forwards",
    ),
    link: dict = LINK.slot,
    out: Path = typer.Option(
        Path("out/testbed"), metavar="DIR", help="folder for rounds.jsonl, server.jsonl, summary.json"
    ),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    machine: dict = MACHINE.slot,
    acceptance_profile: list[str] | None = ACCEPTANCE_PROFILE_OPTION,
    compute_profile: str | None = COMPUTE_PROFILE_OPTION,
    forecast: bool = typer.Option(
        True,
        "--forecast/--no-forecast",
        help="the model's forecast and predictions beside the run; they plan 8 model replicas of it, "
        "most of a long run's time on the tiny pair: --no-forecast leaves them out",
    ),
    as_json: bool = json_option(help="print the summary as JSON"),
) -> None:
    """Run the edge server and K devices over real sockets, re-planning every round."""
    from multispin.experiments.testbed import TestbedConfig, build_scenario, run_testbed, testbed_setup
    from multispin.models.placement import place_pair
    from multispin.models.registry import resolve_pair

    scenario = pick_scenario(scenario)
    check_out_free(out, force, "testbed", ("summary.json", "rounds.jsonl"))
    given = check_scenario_fields("testbed", scenario)
    picked = running_values(scenario, given, devices=devices, seed=seed, n_saa=None, split=split)
    devices = picked["devices"]
    user_policy = policy if ":" in policy else None
    if user_policy is not None:
        from multispin.runtime.round.user_policy import load_policy

        load_policy(user_policy)  # a bad module:attr stops here, before any model loads
    config = TestbedConfig.make(
        pair=pair,
        rounds=rounds,
        max_new_tokens=max_new_tokens,
        drafts=draft or None,
        clock=clock,
        scenario=scenario,
        policy="adaptive" if user_policy else policy,
        user_policy=user_policy,
        **picked,
        **radio,
        **csi,
        **objective,
        **link,
        tasks=tasks,
        runner=runner,
        out=out,
        acceptance_profile=acceptance_profile or None,
        compute_profile=compute_profile,
        forecast=forecast,
    )
    build_scenario(config)  # a bad scenario stops here, before any model loads
    # the devices draft in their own processes: only the target moves to the GPU
    loaded = place_pair(resolve_pair(pair), machine["placement"], drafts=False)
    setup = testbed_setup(config, loaded, "--draft")
    typer.echo(setup.choice.headline, err=as_json)  # the first line: exact, or APPROXIMATE and why
    with reported_interrupt(), step_progress() as progress:
        result = run_testbed(config, loaded, progress, f"{policy} ({clock} clock)", setup)
    if as_json:
        typer.echo(json.dumps(result.summary.to_json(texts=False)))
        return
    _print_run(result.summary, f"multispin testbed: {pair}, K={devices}, {scenario}", out)


def _print_run(s: RunSummary, title: str, out: Path) -> None:
    """A testbed run's table, what each device got, why its forecast is no check (if it is not)."""
    from multispin.experiments.run_summary import forecast_note

    con = table_console()
    con.print(_table([s], title))
    label = s.policy + ("" if s.objective == "sum" else f" ({s.objective})")
    con.print(service_table([(label, s.service)], "what each device gets"))
    if forecast_note(s):
        con.print(forecast_note(s), highlight=False)
    con.print(f"logs and summary in {out}/")


@app.command()
@takes(RADIO, CSI, OBJECTIVE, LINK, MACHINE)
def demo(
    pair: str = pair_option(help="model pair (smollm2-135m is embedded; tiny needs no download)"),
    devices: int | None = typer.Option(
        None,
        min=1,
        max=256,
        metavar="INT",
        show_default=f"the scenario file's devices.count; {DEMO_DEVICES} with a preset",
        help="number of devices K (1..256)",
    ),
    rounds: int | None = typer.Option(
        None,
        min=2,
        max=4096,
        metavar="INT",
        show_default=f"{DEMO_ROUNDS}; {STUDY_ROUNDS} with --study",
        help="measured rounds per policy and seed (every device has work in every one)",
    ),
    seeds: int | None = typer.Option(
        None,
        min=1,
        max=100,
        metavar="INT",
        show_default=f"1; {STUDY_SEEDS} with --study",
        help="drops (seeds SEED, SEED+1, …) per policy",
    ),
    study: bool = typer.Option(
        False,
        "--study",
        help="the paper's subtle comparison: adaptive vs all_dl only, "
        f"{STUDY_SEEDS} seeds × {STUDY_ROUNDS} rounds by default",
    ),
    runner: Literal["pool", "fork", "thread", "subprocess"] = typer.Option(
        "pool", help="pool: every device in one process, drafting in batched forwards; fork: one process per device"
    ),
    executor: Literal["serial", "local", "ray"] = typer.Option(
        "serial", help="where a policy's seeds run: one after another here, in a local process pool, or on Ray"
    ),
    workers: int = typer.Option(1, min=1, max=256, metavar="INT", help="seeds at a time (--executor local or ray)"),
    max_new_tokens: int = typer.Option(
        64, min=1, max=8192, metavar="INT", help="budget of each prompt; a device then starts its next prompt"
    ),
    scenario: str | None = scenario_option(),
    radio: dict = RADIO.slot,
    csi: dict = CSI.slot,
    objective: dict = OBJECTIVE.slot,
    draft: list[str] | None = typer.Option(
        None,
        "--draft",
        metavar="NAME",
        help="draft model, repeatable (cycled over devices); default: "
        "the pair's default draft on every device, as in the paper",
    ),
    sweep: Literal["none", "pdl"] = typer.Option("none", help="pdl: repeat at P^dl/P^ul = 0, 6, 12, 18 dB and plot"),
    seed: int | None = typer.Option(
        None,
        min=0,
        metavar="INT",
        show_default="the scenario file's seed; 0",
        help="first seed (same prompts and channel for every policy)",
    ),
    objectives: bool = typer.Option(
        False,
        "--objectives",
        help="also run adaptive under every objective on the same seeds and compare each with the sum "
        "(goodput, worst device, Jain, p95 TPOT, energy per token, paired 95% intervals); "
        "with --sweep pdl at every point",
    ),
    link: dict = LINK.slot,
    own: list[str] | None = typer.Option(
        None,
        "--policy",
        metavar="MODULE:ATTR",
        help="your own policy, added to the compared set on the same seeds (repeatable; docs/own-policy.md)",
    ),
    out: Path = typer.Option(Path("out/demo"), metavar="DIR", help="output folder (summary.json, demo.png, logs)"),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    machine: dict = MACHINE.slot,
    acceptance_profile: list[str] | None = ACCEPTANCE_PROFILE_OPTION,
    compute_profile: str | None = COMPUTE_PROFILE_OPTION,
    as_json: bool = json_option(help="print the summary as JSON"),
) -> None:
    """Adaptive vs all_ul vs all_dl vs target_only in steady state, paired, with 95% intervals."""
    from multispin.experiments.demo import DemoConfig, demo_setup, run_demo
    from multispin.experiments.testbed import build_scenario
    from multispin.models.placement import place_pair
    from multispin.models.registry import resolve_pair
    from multispin.vocabulary import DEMO_POLICIES

    scenario = pick_scenario(scenario)
    check_out_free(out, force, "demo", ("summary.json", "demo.png"))
    given = check_scenario_fields("demo", scenario)
    picked = running_values(
        scenario, given, {"devices": DEMO_DEVICES}, devices=devices, seed=seed, n_saa=None, split=None
    )
    _check_own_policies(own or [])  # a bad module:attr stops here, before any model loads
    if executor != "serial":
        from multispin.experiments.reproduce.executor import check_executor

        check_executor("local" if executor == "local" else "ray", None)
    config = DemoConfig.make(
        pair=pair,
        rounds=rounds or (STUDY_ROUNDS if study else DEMO_ROUNDS),
        seeds=seeds or (STUDY_SEEDS if study else 1),
        **picked,
        runner=runner,
        executor=executor,
        workers=workers,
        policies=(STUDY_POLICIES if study else DEMO_POLICIES) + tuple(own or ()),
        max_new_tokens=max_new_tokens,
        scenario=scenario,
        **radio,
        **csi,
        **objective,
        **link,
        drafts=draft or None,
        sweep=sweep,
        out=out,
        acceptance_profile=acceptance_profile or None,
        compute_profile=compute_profile,
    )
    # a bad scenario stops here, before any model loads
    build_scenario(config.testbed(config.lead, config.seed, radio["p_dl_dbm"], out))
    with step_progress() as loading:
        loading.loading(f"loading {pair}…")
        loaded = place_pair(resolve_pair(pair), machine["placement"], drafts=False)
    setup = demo_setup(config, loaded)
    if not as_json:  # the first lines: who drafts what, at which α, and the payload
        typer.echo(_setup_lines(setup, config))
    with reported_interrupt(), step_progress() as progress:
        result = run_demo(config, loaded, progress, setup)
        by_objective = None
        if objectives:  # at every sweep point (the demo's own P^dl alone without --sweep)
            from multispin.experiments.objective_comparison import compare_objectives_at_points

            by_objective = compare_objectives_at_points(config, loaded, progress)
    _report_demo(result, by_objective, as_json)


def _check_own_policies(specs: list[str]) -> None:
    """Each ``--policy`` of demo is your own policy, module:attr, that loads (the built-ins run anyway)."""
    from multispin.errors import ConfigError
    from multispin.runtime.round.user_policy import load_policy

    for spec in specs:
        if ":" not in spec:
            raise ConfigError(
                f"--policy: {spec!r}: demo compares the built-in policies anyway; --policy adds your own, "
                "module:attr (e.g. own_policies:Threshold)"
            )
        load_policy(spec)


def _report_demo(result, by_objective: list | None, as_json: bool) -> None:
    """The demo's figures, then its summary as JSON or its tables, verdicts and where it all is."""
    from multispin.experiments.demo import plot_demo, plot_demo_sweep

    out = result.config.out
    png = plot_demo(result, out / "demo.png")
    sweep_png = plot_demo_sweep(result, out / "demo-sweep.png") if result.config.sweep == "pdl" else None
    if as_json:
        typer.echo(json.dumps(_demo_document(result, by_objective)))
        return
    _print_demo(result, by_objective)
    Console(stderr=True).print(
        f"figure: {png}"
        + (f", sweep: {sweep_png}" if sweep_png else "")
        + f"; summary: {out}/summary.json; per-round logs: {out}/…/<policy>/rounds.jsonl"
    )


def _demo_document(result, by_objective: list | None) -> dict:
    """The demo's summary as `--json` prints it: with `--objectives` their comparison, one without a
    sweep (as before), one per point with it."""
    doc = result.to_dict()
    if by_objective is not None:
        compared = [c.to_dict() for c in by_objective]
        doc |= {"objectives": compared if result.config.sweep == "pdl" else compared[0]}
    return versioned(doc, "demo-summary")


def _print_demo(result, by_objective: list | None) -> None:
    """Every sweep point's tables and verdicts, the objectives' comparisons, device 0's text."""
    from multispin.experiments.demo import non_default_settings

    con, config = table_console(), result.config
    for point in result.points:
        title = (
            f"multispin demo: {config.pair}, K={config.devices}, {config.scenario} profile, virtual clock, steady state"
        )
        if non_default_settings(config):
            title += f", {non_default_settings(config)}"
        if point.offset_db is not None:
            title += f", P^dl = P^ul + {point.offset_db:g} dB"
        _print_point(con, point, title)
    for compared in by_objective or []:
        print_objectives(con, compared)
    first = result.points[0]
    d0 = first.runs[first.lead].results[0].texts.get(0, "")
    con.print(f"[bold]device 0 wrote:[/bold] {d0[:300]!r}")


def _print_point(con: Console, point: SweepPoint, title: str) -> None:
    """One sweep point: the goodput table, runs left out, the paired verdicts (conditioned, then
    realised), realised / forecast over seeds, why the forecast is no check, what each device gets."""
    from multispin.experiments.run_summary import forecast_note

    con.print(_demo_table(point, title))
    for x in point.left_out:  # a run that ended early: its seed is in no figure above or below
        con.print(
            f"[yellow]left out: seed {x['seed']} ({x['policy']} ended after {x['rounds']} of {x['of']} rounds; "
            f"{x['folder']}/server.jsonl says why)[/yellow]",
            highlight=False,
        )
    for c in point.comparisons:
        con.print(("[bold]" if c is point.comparisons[0] else "") + c.verdict, highlight=False)
    if any(c.estimator != "realised" for c in point.comparisons):  # the same, without the control variate
        for c in point.realised_comparisons:
            con.print(f"[dim]{c.verdict}[/dim]", highlight=False)
    for line in _forecast_ratio_lines(point.rows):
        con.print(line, highlight=False)
    note = forecast_note(point.runs["adaptive"].results[0].summary) if "adaptive" in point.runs else ""
    if note:
        con.print(note, highlight=False)
    own = [p for p in point.runs if ":" in p]
    if own:
        con.print(
            f"forecast: none for {', '.join(own)}: the model forecasts the built-in mode rules only "
            "(your policy's model figures: ms.evaluate(plan, policy=...), docs/own-policy.md)",
            highlight=False,
        )
    # after the verdicts: the goodput table, its caption and verdicts stay one block
    con.print(service_table([(r.policy, r.service) for r in point.rows], "what each device gets"))
    for c in point.service_comparisons:
        con.print(c.verdict, highlight=False)


def _forecast_ratio_lines(rows: list[PolicyRow]) -> list[str]:
    """Realised (and acceptance-conditioned) / forecast over the seeds, where there is an interval."""
    lines = []
    for label, ratio_of in (
        ("realised", lambda r: r.realised_over_forecast),
        ("conditioned", lambda r: r.conditioned_over_forecast),
    ):
        ratios = [(r.policy, ratio_of(r)) for r in rows if r.policy != "target_only"]
        ratios = [(p, x) for p, x in ratios if x is not None and x.low is not None]
        if ratios:
            lines.append(
                f"{label} / forecast over {ratios[0][1].seeds} seeds (95% interval): "
                + "; ".join(f"{p} {x.estimate:.3f} ({x.low:.3f}–{x.high:.3f})" for p, x in ratios)
            )
    return lines


def _setup_lines(setup: TestbedSetup, cfg) -> str:
    """The run's set-up: drafts and tasks with their α, rounds, seeds, the payload line."""
    coupled = any(policy_verify(p) != STANDARD for p in getattr(cfg, "policies", ()))
    by: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for d, t, a, c in zip(setup.drafts, setup.tasks, setup.alpha_prior, setup.alpha_coupled_prior):
        by.setdefault((d, t), []).append((a, c))
    parts = ", ".join(
        f"{d} on {t} ×{len(a)} (α {a[0][0]:.2f}" + (f", coupled α {a[0][1]:.2f})" if coupled else ")")
        for (d, t), a in sorted(by.items())
    )
    source = f"α {planned_alpha_source(setup.alpha_kinds)}"
    if coupled:
        source += f"; coupled α {planned_alpha_source(setup.alpha_coupled_kinds)}"
    return (
        f"devices: {parts}; {source}\n"
        f"steady state: {cfg.rounds} rounds × {cfg.seeds} seed(s) per policy, each device working "
        f"through a queue of its task's prompts ({cfg.max_new_tokens} tokens each)\n{setup.choice.headline}"
    )


def _demo_table(point: SweepPoint, title: str) -> Table:
    first = next(iter(point.runs.values()), None)
    caveats = bool(first and first.results and first.results[0].summary.caveats)
    t = right_aligned(
        title,
        "G: steady-state sum goodput Σ tokens / Σ (T_comp + T_comm), tokens/s, with its "
        "95% interval; vs TO: paired difference to target_only; forecast: the model's "
        "prediction on fresh channels, independent of the run; free: G had the air been "
        "free; T_comp / T_comm: mean per round (ms); plan: the planner's CPU per round (ms; "
        "not charged on the virtual clock); tok/rd: tokens per round (all devices); "
        "draft: share of devices drafting; γ̄: mean draft length; cpl: share of drafting "
        "devices verified coupled; DL: share of corrections in DL mode; rec: every text equals "
        "the server's record",
        (
            "policy",
            "G [95%]",
            "vs TO",
            "forecast",
            "free",
            "T_comp",
            "T_comm",
            "plan",
            "tok/rd",
            "draft",
            "γ̄",
            "cpl",
            "DL",
            "rec",
        ),
    )
    for r in point.rows:
        g, vs, f = r.goodput, r.vs_target_only, r.figures
        vs_txt = "—" if vs is None else (f"{vs.pct.estimate:+.1f}%" + ("" if vs.significant else " (n.s.)"))
        one_run = f" [{r.forecast_one_run[0]:.1f}, {r.forecast_one_run[1]:.1f}]" if r.forecast_one_run else ""
        t.add_row(
            r.policy,
            f"{g.estimate:.1f} [{g.low:.1f}, {g.high:.1f}]",
            vs_txt,
            "—"
            if math.isnan(r.forecast_tokens_per_s)
            else f"{r.forecast_tokens_per_s:.1f}" + one_run + ("†" if caveats else ""),
            f"{f.free_comm_tokens_per_s:.1f}",
            f"{1e3 * f.mean_t_comp_s:.0f}",
            f"{1e3 * f.mean_t_comm_s:.0f}",
            f"{1e3 * f.mean_planning_cpu_s:.1f}",
            f"{f.tokens_per_round:.1f}",
            f"{f.drafting_share:.2f}",
            f"{f.mean_gamma:.1f}",
            f"{f.coupled_share:.2f}",
            f"{r.dl_share:.2f}",
            "ok" if r.records_match and f.steady_state else "MISMATCH",
        )
    return t
