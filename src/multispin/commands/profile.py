"""`multispin profile`: time draft and batched verification on this host, fit T_ver^0/1/tok."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from multispin.commands._app import app
from multispin.commands._flag_groups import MACHINE, takes
from multispin.commands._options import json_option, pair_option
from multispin.jsonout import versioned, write_json
from multispin.progress import step_progress


@app.command()
@takes(MACHINE)
def profile(
    pair: str = pair_option(),
    draft: list[str] | None = typer.Option(
        None, metavar="NAME", show_default="all of the pair's", help="drafts to time (repeat)"
    ),
    max_batch: int = typer.Option(8, min=1, max=256, metavar="INT", help="largest batch of devices timed"),
    max_draft_len: int = typer.Option(8, min=1, max=20, metavar="INT", help="largest γ timed"),
    repeats: int = typer.Option(3, min=1, max=100, metavar="INT", help="timed repeats per point (median)"),
    out: Path | None = typer.Option(
        None, metavar="FILE", help="write the compute profile JSON here (for `optimize --compute-profile`)"
    ),
    machine: dict = MACHINE.slot,
    as_json: bool = json_option(help="print the profile as JSON"),
) -> None:
    """Fit T_ver(b, γ) = T_ver^0 + b·T_ver^1 + b·(γ+1)·T_ver^tok and time each draft per token."""
    from multispin.experiments.compute_profile import profile_pair
    from multispin.models.placement import place_pair
    from multispin.models.registry import resolve_pair
    from multispin.system.profile_fit import warn_poor_fit

    powers = lambda top: sorted({min(2**i, top) for i in range(top.bit_length() + 1)})  # noqa: E731
    with step_progress() as progress:
        progress.loading(f"loading {pair}…")
        loaded = place_pair(resolve_pair(pair, drafts=draft or None), machine["placement"])
        result = versioned(
            profile_pair(loaded, powers(max_batch), powers(max_draft_len), repeats, progress=progress),
            "compute-profile",
        )
    warn_poor_fit(result, f"profile of {pair}")
    if out is not None:
        write_json(result, out, indent=2)
    if as_json:
        typer.echo(json.dumps(result))
        return
    con = Console()
    t = Table(title=f"compute profile of {result['pair']} on this host (R² = {result['r2']:.3f})")
    t.add_column("quantity")
    t.add_column("ms", justify="right")
    t.add_row("T_ver^0 (per pass)", f"{1000 * result['t_ver0_s']:.2f}")
    t.add_row("T_ver^1 (per device)", f"{1000 * result['t_ver1_s']:.2f}")
    t.add_row("T_ver^tok (per batch token)", f"{1000 * result['t_ver_tok_s']:.2f}")
    for name, sec in result["draft_latency_s_per_token"].items():
        t.add_row(f"T^dft of {name} (per token)", f"{1000 * sec:.2f}")
    con.print(t)
