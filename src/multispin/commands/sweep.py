"""`multispin sweep`: a user's own study, goodput of several policies over a grid of scenario
values with 95% intervals ([`multispin.api.sweep`][multispin.api.sweep], the machinery of `multispin reproduce`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from multispin.commands._app import app
from multispin.commands._flag_groups import OBJECTIVE, RADIO, takes
from multispin.commands._interrupt import reported_interrupt
from multispin.commands._options import (
    LogLevel,
    json_option,
    log_level_option,
    pick_scenario,
    scenario_option,
    setup_logging,
    table_console,
)
from multispin.commands._scenario_fields import check_scenario_fields
from multispin.errors import ConfigError
from multispin.vocabulary import policies_in

# the keys of multispin.experiments.sweep.SWEEP_POLICIES (test_sweep checks), without importing it
POLICY_NAMES = ", ".join(p.name for p in policies_in())


def _value(text: str) -> Any:
    """A number where the text is one (``10`` → 10, ``5e6`` → 5000000.0), the text otherwise."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_assignment(text: str, flag: str) -> tuple[str, list[Any]]:
    """``radio.p_dl_dbm=10,20,30`` → ("radio.p_dl_dbm", [10, 20, 30])."""
    name, sep, values = text.partition("=")
    if not sep or not name.strip() or not values.strip():
        raise ConfigError(f"{flag}: expected FIELD=VALUE[,VALUE…], e.g. radio.p_dl_dbm=10,20,30 (got {text!r})")
    return name.strip(), [_value(v.strip()) for v in values.split(",") if v.strip()]


def _fmt(v: float | None, lo: float | None, hi: float | None, unit: str = "") -> str:
    if v is None:
        return "—"
    if lo is None or hi is None:
        return f"{v:+.1f}{unit}" if unit else f"{v:.1f}"
    if unit:
        return f"{v:+.1f}{unit} [{lo:+.1f}, {hi:+.1f}]"
    return f"{v:.1f} [{lo:.1f}, {hi:.1f}]"


def _fmt_small(v: float | None, lo: float | None, hi: float | None, scale: float = 1.0) -> str:
    """A figure below ~10 (Jain's index, mJ per token) with three digits and its interval."""
    if v is None:
        return "—"
    if lo is None or hi is None:
        return f"{v * scale:.3g}"
    return f"{v * scale:.3g} [{lo * scale:.3g}, {hi * scale:.3g}]"


def print_table(doc: dict) -> None:
    """The sweep as one rich table: a row per point and policy."""
    from rich.table import Table

    fields = list(doc["over"])
    objective = doc.get("objective", "sum")
    if objective == "energy":
        objective += f", w = {doc['energy_weight_tokens_per_j']:g} tokens/J"
    t = Table(
        title=f"multispin sweep: {doc['scenario']}, objective {objective}, {doc['drops']} drops per point, "
        f"seed {doc['seed']}",
        caption="the same drops for every point and policy; G: mean sum goodput over the drops, tokens/s, "
        "with its 95% interval; adaptive vs: "
        "100·(mean G_adaptive / mean G_policy − 1), paired on the same drops, 95% interval; "
        "γ̄: mean draft length; worst G: the worst device's goodput min_k G_k (tokens/s), Jain: "
        "Jain's index of the G_k, mJ/tok: device energy per generated token, each of the plan on the "
        "drop's samples, mean and 95% interval (adaptive's paired change against each policy: --json)",
    )
    coupled = any(r.get("coupled_alpha") for r in doc["rows"])
    cols = ("policy", "G [95%]", "adaptive vs [95%]", "γ̄", "worst G [95%]", "Jain [95%]", "mJ/tok [95%]")
    for col in (*fields, *cols, *(("coupled share [95%]",) if coupled else ())):
        t.add_column(col, justify="right")
    if coupled:  # the coupled α is an assumption: say so under the table
        t.caption = f"{t.caption}; {next(r['coupled_alpha'] for r in doc['rows'] if r.get('coupled_alpha'))}"
    for r in doc["rows"]:
        share = (_fmt_small(r.get("coupled_share"), r.get("coupled_share_low"), r.get("coupled_share_high")),)
        t.add_row(
            *(f"{r[f]:g}" if isinstance(r[f], (int, float)) else str(r[f]) for f in fields),
            r["policy"],
            _fmt(r["goodput_tokens_per_s"], r["goodput_low"], r["goodput_high"]),
            _fmt(r["adaptive_gain_pct"], r["adaptive_gain_low"], r["adaptive_gain_high"], "%"),
            "—" if r["mean_draft_len"] is None else f"{r['mean_draft_len']:.1f}",
            _fmt(
                r.get("worst_device_goodput_tokens_per_s"),
                r.get("worst_device_goodput_tokens_per_s_low"),
                r.get("worst_device_goodput_tokens_per_s_high"),
            ),
            _fmt_small(r.get("jain_index"), r.get("jain_index_low"), r.get("jain_index_high")),
            _fmt_small(
                r.get("energy_per_token_j"), r.get("energy_per_token_j_low"), r.get("energy_per_token_j_high"), 1e3
            ),
            *(share if coupled else ()),
        )
    table_console().print(t)
    for note in doc.get("notes", []):
        table_console().print(f"[yellow]note: {note}[/yellow]")


@app.command()
@takes(RADIO, OBJECTIVE)
def sweep(
    over: list[str] = typer.Option(
        ...,
        "--over",
        metavar="FIELD=V1,V2,…",
        help="a scenario field and its values, e.g. radio.p_dl_dbm=10,16,22 (repeat: the grid is every combination)",
    ),
    scenario: str | None = scenario_option(),
    set_fields: list[str] | None = typer.Option(
        None,
        "--set",
        metavar="FIELD=VALUE",
        help="a scenario field held fixed, e.g. radio.bandwidth_hz=5e6 (repeatable)",
    ),
    devices: int | None = typer.Option(
        None, min=1, metavar="INT", show_default="the scenario's", help="number of devices K"
    ),
    radio: dict = RADIO.slot,
    objective: dict = OBJECTIVE.slot,
    n_saa: int | None = typer.Option(
        None, "--n-saa", min=1, metavar="INT", show_default="the scenario's", help="SAA samples per drop"
    ),
    policies: str = typer.Option(
        "adaptive,all_ul,all_dl",
        "--policies",
        metavar="P1,P2,…",
        help=f"policies to compare, comma-separated: {POLICY_NAMES}, or your own as module:attr (docs/own-policy.md)",
    ),
    drops: int = typer.Option(10, "--drops", min=2, metavar="INT", help="drops per point (at least 2)"),
    seed: int | None = typer.Option(
        None, "--seed", min=0, metavar="INT", show_default="the scenario's", help="base seed of the drops"
    ),
    workers: int = typer.Option(1, "--workers", min=1, metavar="INT", help="worker processes"),
    out: Path | None = typer.Option(
        None,
        "--out",
        metavar="DIR",
        show_default="no cache",
        help="folder for the cache of finished drops (a rerun resumes)",
    ),
    plot: Path | None = typer.Option(
        None, "--plot", metavar="PNG", help="draw goodput against the first --over field with 95% bands"
    ),
    as_json: bool = json_option(help="print the table as JSON (what multispin.sweep(...).to_json() gives)"),
    no_progress: bool = typer.Option(False, "--no-progress", help="no progress bar on stderr"),
    log_level: LogLevel = log_level_option(),
) -> None:
    """Goodput of several policies over a grid of scenario values, paired, with 95% intervals."""
    setup_logging(log_level)
    from multispin import api

    grid = dict(parse_assignment(o, "--over") for o in over)
    fixed = {}
    for s in set_fields or []:
        name, values = parse_assignment(s, "--set")
        if len(values) != 1:
            raise ConfigError(f"--set: {name}: one value (sweep several with --over; got {len(values)})")
        fixed[name] = values[0]
    spec = pick_scenario(scenario)
    check_scenario_fields("sweep", spec, extra=[*fixed, *grid])
    sc = api.scenario(spec, devices=devices, **radio, n_saa=n_saa, fields=fixed or None)
    names = [p.strip() for p in policies.split(",") if p.strip()]
    with reported_interrupt():
        table = api.sweep(
            sc,
            over=grid,
            drops=drops,
            policies=names,
            seed=seed,
            workers=workers,
            out=out,
            progress=not no_progress,
            **objective,
        )
    if plot is not None:
        api.plot(table, plot, field=next(iter(grid)))
    if as_json:
        typer.echo(table.to_json())
    else:
        print_table(json.loads(table.to_json()))
    if plot is not None:
        typer.echo(f"figure: {plot}", err=True)
