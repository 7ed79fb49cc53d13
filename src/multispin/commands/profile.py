"""`multispin profile`: time draft and batched verification on this host, fit T_ver^0/1/tok."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from multispin.cli import app


@app.command()
def profile(
    pair: str = typer.Option("smollm2-135m", help="model pair"),
    draft: Optional[list[str]] = typer.Option(None, help="drafts to time (repeat; default: all)"),
    max_batch: int = typer.Option(8, help="largest batch of devices timed"),
    max_draft_len: int = typer.Option(8, help="largest γ timed"),
    repeats: int = typer.Option(3, help="timed repeats per point (median)"),
    out: Optional[Path] = typer.Option(None, help="write the compute profile JSON here"),
    as_json: bool = typer.Option(False, "--json", help="print the profile as JSON"),
) -> None:
    """Fit T_ver(b, γ) = T_ver^0 + b·T_ver^1 + b·(γ+1)·T_ver^tok and time each draft per token."""
    from multispin.errors import ConfigError
    from multispin.experiments.compute_profile import profile_pair
    from multispin.models.registry import resolve_pair

    if max_batch < 1 or max_draft_len < 1 or repeats < 1:
        raise ConfigError("max_batch, max_draft_len, repeats: must each be >= 1")
    powers = lambda top: sorted({min(2 ** i, top) for i in range(top.bit_length() + 1)})  # noqa: E731
    err = Console(stderr=True)
    with err.status("loading models…") as status:
        loaded = resolve_pair(pair, drafts=draft or None)
        result = profile_pair(loaded, powers(max_batch), powers(max_draft_len), repeats,
                              progress=lambda msg: status.update(msg))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2))
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
