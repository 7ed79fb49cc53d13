"""`multispin generate`: K devices, one server, real Multi-SPIN rounds in one process."""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from multispin.cli import app


@app.command()
def generate(
    pair: str = typer.Option("smollm2-135m", help="model pair: a registered name or DRAFT:TARGET"),
    devices: int = typer.Option(4, help="number of devices K"),
    draft_len: int = typer.Option(4, help="draft length γ for every device (0 = target only)"),
    mode: str = typer.Option("mixed", help="correction mode of rejected devices: ul, dl or mixed"),
    temperature: float = typer.Option(1.0, help="sampling temperature (0 = greedy)"),
    top_k: int = typer.Option(0, help="top-k cut (0 = off)"),
    top_p: float = typer.Option(1.0, help="nucleus mass in (0, 1]"),
    seed: int = typer.Option(0, help="seed of every random draw"),
    max_new_tokens: int = typer.Option(32, help="tokens to generate per device"),
    ul_codec: str = typer.Option("dense-fp32", help="codec of q_j in UL mode"),
    dl_codec: str = typer.Option("dense-fp32", help="codec of p_j in DL mode"),
    draft: Optional[list[str]] = typer.Option(None, help="draft model per device (repeat; cycled)"),
    prompt: Optional[list[str]] = typer.Option(None, help="prompt per device (repeat; cycled)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of tables"),
) -> None:
    """Generate text on K devices with split speculative decoding, exact in UL and DL mode."""
    from multispin.runtime.session import GenerateConfig, generate as run_generate

    config = GenerateConfig.make(
        pair=pair, devices=devices, draft_len=draft_len, mode=mode, temperature=temperature,
        top_k=top_k, top_p=top_p, seed=seed, max_new_tokens=max_new_tokens, ul_codec=ul_codec,
        dl_codec=dl_codec, drafts=draft or None, prompts=prompt or None,
    )
    err = Console(stderr=True)
    if as_json:
        result = run_generate(config)
        typer.echo(json.dumps(result.to_dict()))
        return
    with err.status("loading models and generating…") as status:
        def on_round(round_idx, records):
            done = sum(r.tokens_gained for r in records.values())
            status.update(f"round {round_idx + 1}: {len(records)} active devices, +{done} tokens")

        result = run_generate(config, on_round=on_round)
    _print_tables(result)


def _print_tables(result) -> None:
    out = Console()
    table = Table(title=f"multispin generate: {result.config.pair}, γ={result.config.draft_len}, "
                        f"mode={result.config.mode}, {result.num_rounds} rounds, {result.wall_s:.2f} s")
    for col in ("device", "draft", "tokens", "rounds", "accept rate", "mean accepted len",
                "UL / DL corrections", "payload kbit"):
        table.add_column(col, justify="right")
    for d in result.devices:
        modes = [r.mode for r in d.rounds]
        table.add_row(
            str(d.device_id), d.draft_name, str(len(d.tokens)), str(len(d.rounds)),
            f"{d.stats.token_acceptance_rate:.2f}", f"{d.stats.mean_acceptance_length:.2f}",
            f"{modes.count('ul')} / {modes.count('dl')}",
            f"{sum(r.payload_bits for r in d.rounds) / 1000:.1f}",
        )
    out.print(table)
    for d in result.devices:
        out.print(f"[bold]device {d.device_id}[/bold] [dim]{d.prompt[:60]!r}[/dim]")
        out.print(d.text, markup=False, highlight=False)
    for note in result.notes:
        out.print(f"[yellow]note:[/yellow] {note}")
