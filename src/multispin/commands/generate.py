"""`multispin generate`: K devices, one server, real Multi-SPIN rounds in one process."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from multispin.commands._app import app
from multispin.commands._flag_groups import MACHINE, ROUND, takes
from multispin.commands._interrupt import reported_interrupt
from multispin.commands._options import json_option, pair_option
from multispin.jsonout import versioned
from multispin.progress import Step, step_progress


@app.command()
@takes(ROUND, MACHINE)
def generate(
    pair: str = pair_option(),
    devices: int = typer.Option(4, min=1, max=256, metavar="INT", help="number of devices K (1..256)"),
    max_new_tokens: int = typer.Option(32, min=1, max=8192, metavar="INT", help="tokens to generate per device"),
    round_settings: dict = ROUND.slot,
    draft: list[str] | None = typer.Option(
        None,
        metavar="NAME",
        show_default="all of the pair's",
        help="draft model per device (repeat; cycled over devices)",
    ),
    prompt: list[str] | None = typer.Option(
        None, metavar="TEXT", show_default="built-in prompts", help="prompt per device (repeat; cycled over devices)"
    ),
    machine: dict = MACHINE.slot,
    plot: Path | None = typer.Option(
        None, "--plot", metavar="PNG", help="draw accepted tokens per round and tokens written per device"
    ),
    as_json: bool = json_option(),
) -> None:
    """Generate text on K devices with split speculative decoding, exact in UL and DL mode."""
    from multispin.commands._checks import check_codecs_fit
    from multispin.models.placement import place_pair
    from multispin.models.registry import resolve_pair
    from multispin.runtime.round.session import GenerateConfig
    from multispin.runtime.round.session import generate as run_generate

    config = GenerateConfig.make(
        pair=pair,
        devices=devices,
        max_new_tokens=max_new_tokens,
        **round_settings,
        drafts=draft or None,
        prompts=prompt or None,
    )
    with step_progress() as loading:
        loading.loading(f"loading {pair}…")
        loaded = place_pair(resolve_pair(pair, drafts=draft or None), machine["placement"])
    check_codecs_fit(config.ul_codec, config.dl_codec, loaded.vocab_size)
    if as_json:

        def print_json(result, interrupted: bool = False) -> None:
            typer.echo(json.dumps(versioned({**result.to_dict(), "interrupted": interrupted}, "generate")))

        with reported_interrupt(lambda partial: print_json(partial, interrupted=True)):
            result = run_generate(config, pair=loaded)
        print_json(result)
    else:
        total, done = devices * max_new_tokens, [0]
        with reported_interrupt(_print_tables), step_progress() as progress:

            def on_round(round_idx, records):
                done[0] += sum(r.tokens_gained for r in records.values())
                progress(Step("generating", min(done[0], total), total, "tokens"))

            result = run_generate(config, pair=loaded, on_round=on_round)
        _print_tables(result)
    if plot is not None:  # a finished run only: an interrupted one has printed its partial texts
        from multispin.experiments.generate_plot import plot_generate

        # drawn from the same document --json prints (a saved run.json draws the same picture)
        typer.echo(f"figure: {plot_generate(result.to_dict(), plot)}", err=True)


def _print_tables(result) -> None:
    out = Console()
    table = Table(
        title=f"multispin generate: {result.config.pair}, γ={result.config.draft_len}, "
        f"mode={result.config.mode}, {result.num_rounds} rounds, {result.wall_s:.2f} s",
        caption="UL / DL: corrections sent in each mode",
    )
    for col in ("device", "draft", "tokens", "rounds", "accept rate", "mean accepted len", "UL / DL", "payload kbit"):
        table.add_column(col, justify="right")
    for d in result.devices:
        modes = [r.mode for r in d.rounds]
        table.add_row(
            str(d.device_id),
            d.draft_name,
            str(len(d.tokens)),
            str(len(d.rounds)),
            f"{d.stats.token_acceptance_rate:.2f}",
            f"{d.stats.mean_acceptance_length:.2f}",
            f"{modes.count('ul')} / {modes.count('dl')}",
            f"{sum(r.payload_bits for r in d.rounds) / 1000:.1f}",
        )
    out.print(table)
    for d in result.devices:
        out.print(f"[bold]device {d.device_id}[/bold] [dim]{d.prompt[:60]!r}[/dim]")
        out.print(d.text, markup=False, highlight=False)
    for note in result.notes:
        out.print(f"[yellow]note:[/yellow] {note}")
