"""`multispin testbed` and `multispin demo`: the networked edge system with the optimiser in the loop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from multispin.cli import app


def _run_with_progress(config, pair, progress: Progress, label: str):
    from multispin.runtime.testbed import run_testbed

    total = config.rounds or None
    task = progress.add_task(label, total=total, tokens=0)

    def on_progress(round_idx: int, tokens: int) -> None:
        progress.update(task, completed=round_idx + 1, tokens=tokens)

    result = run_testbed(config, pair=pair, on_progress=on_progress)
    progress.update(task, total=result.summary["rounds"], completed=result.summary["rounds"])
    return result


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("round {task.completed}"),
                    TextColumn("{task.fields[tokens]} tokens"), TimeElapsedColumn(),
                    console=Console(stderr=True))


def _table(results, title: str) -> Table:
    t = Table(title=title, caption="G: tokens/s on the scenario clock; model / MC: what the analytic "
                                   "model and the Monte Carlo simulator predict for the same rounds; "
                                   "DL: share of corrections in DL mode; γ̄: mean draft length; "
                                   "up / down: kbit moved per token on each link (drafts with their "
                                   "q scalars, ids, rejection positions, distributions); chg: kbit per "
                                   "token the clock charged airtime for; rec: every device's text "
                                   "equals the server's record")
    for col in ("policy", "G", "model", "MC", "DL", "γ̄", "up", "down", "chg", "rec"):
        t.add_column(col, justify="right")
    for r in results:
        s = r.summary
        mean_g = sum(s["mean_draft_len"].values()) / max(len(s["mean_draft_len"]), 1)
        t.add_row(s["policy"], f"{s['goodput_tokens_per_s']:.1f}",
                  f"{s.get('analytic_tokens_per_s', float('nan')):.1f}",
                  f"{s.get('montecarlo_tokens_per_s', float('nan')):.1f}", str(s["tokens"]),
                  f"{s['dl_share']:.2f}", f"{mean_g:.1f}", f"{s['bits_up_per_token']:,.0f}",
                  f"{s['bits_down_per_token']:,.0f}", f"{s['bits_charged_per_token']:,.0f}",
                  "ok" if s["consistent"] and s["digests_match"] else "MISMATCH")
    return t


def _headline(config, pair) -> str:
    """The run's sampling policy, codecs, bits and exactness (APPROXIMATE first when it is)."""
    from multispin.runtime.testbed import payload_choice

    return payload_choice(config, pair.vocab_size).headline


_CODEC_HELP = ("codec of {what} (dense-fp32, dense-fp16, dense-bf16, sparse:v_eff=N,q=16|32, lattice:l=N); "
               "default: sparse:v_eff=1024,q=32, exact with the default top-k")
_TOP_K_HELP = "top-k sampling cut (0 = off); default: 1024 (= V_eff, so both modes are exact)"


@app.command()
def testbed(
    pair: str = typer.Option("smollm2-135m", help="model pair"),
    devices: int = typer.Option(8, help="number of device processes K"),
    rounds: Optional[int] = typer.Option(None, help="stop after this many rounds (default: until done)"),
    max_new_tokens: int = typer.Option(64, help="tokens per device"),
    clock: str = typer.Option("virtual", help="virtual (scenario compute profile) or wall (this host)"),
    preset: str = typer.Option("paper-qwen", help="scenario preset or scenario file"),
    policy: str = typer.Option("adaptive", help="adaptive, all-ul, all-dl or random"),
    split: str = typer.Option("equal", help="bandwidth split among rejected devices: equal or optimized"),
    pdl_dbm: Optional[float] = typer.Option(None, help="downlink power budget P^dl (dBm)"),
    tasks: str = typer.Option("mixed", help="prompt tasks: chat, code or mixed"),
    seed: int = typer.Option(0, help="seed of prompts, channel and sampling"),
    runner: str = typer.Option("fork", help="device processes: fork, subprocess, or thread"),
    top_k: Optional[int] = typer.Option(None, "--top-k", help=_TOP_K_HELP),
    ul_codec: Optional[str] = typer.Option(None, "--ul-codec", help=_CODEC_HELP.format(what="q_j in UL mode")),
    dl_codec: Optional[str] = typer.Option(None, "--dl-codec", help=_CODEC_HELP.format(what="p_j in DL mode")),
    out: Path = typer.Option(Path("out/testbed"), help="folder for rounds.jsonl, server.jsonl, summary.json"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
) -> None:
    """Run the edge server and K devices over real sockets, re-planning every round."""
    from multispin.models.registry import resolve_pair
    from multispin.runtime.testbed import TestbedConfig

    config = TestbedConfig.make(pair=pair, devices=devices, rounds=rounds, max_new_tokens=max_new_tokens,
                                clock=clock, preset=preset, policy=policy, split=split, p_dl_dbm=pdl_dbm,
                                tasks=tasks, seed=seed, runner=runner, top_k=top_k, ul_codec=ul_codec,
                                dl_codec=dl_codec, out=out)
    loaded = resolve_pair(pair)
    typer.echo(_headline(config, loaded), err=as_json)  # the first line: exact, or APPROXIMATE and why
    with _progress() as progress:
        result = _run_with_progress(config, loaded, progress, f"{policy} ({clock} clock)")
    if as_json:
        typer.echo(json.dumps(result.summary))
        return
    Console().print(_table([result], f"multispin testbed: {pair}, K={devices}, {preset}"))
    typer.echo(result.summary["payload_headline"])
    Console().print(f"logs and summary in {out}/")


@app.command()
def demo(
    pair: str = typer.Option("smollm2-135m", help="model pair (the embedded default)"),
    devices: int = typer.Option(8, help="number of devices K"),
    max_new_tokens: int = typer.Option(32, help="tokens per device"),
    preset: str = typer.Option("paper-qwen", help="compute/radio profile of the virtual clock"),
    pdl_dbm: Optional[float] = typer.Option(None, help="downlink power budget P^dl (dBm)"),
    seed: int = typer.Option(0, help="seed (same prompts and channel for every policy)"),
    top_k: Optional[int] = typer.Option(None, "--top-k", help=_TOP_K_HELP),
    ul_codec: Optional[str] = typer.Option(None, "--ul-codec", help=_CODEC_HELP.format(what="q_j in UL mode")),
    dl_codec: Optional[str] = typer.Option(None, "--dl-codec", help=_CODEC_HELP.format(what="p_j in DL mode")),
    out: Path = typer.Option(Path("out/demo"), help="output folder (per-policy logs, demo.png)"),
) -> None:
    """Adaptive versus all-UL versus all-DL on the same prompts, channel and seed."""
    from multispin.models.registry import resolve_pair
    from multispin.runtime.testbed import TestbedConfig, plot_comparison

    con = Console()
    configs = [TestbedConfig.make(pair=pair, devices=devices, max_new_tokens=max_new_tokens, preset=preset,
                                  policy=policy, p_dl_dbm=pdl_dbm, seed=seed, top_k=top_k, ul_codec=ul_codec,
                                  dl_codec=dl_codec, out=out / policy)
               for policy in ("adaptive", "all-ul", "all-dl")]
    with Console(stderr=True).status(f"loading {pair}…"):
        loaded = resolve_pair(pair)
    headline = _headline(configs[0], loaded)  # adaptive uses both modes: the strictest verdict
    typer.echo(headline)
    results = []
    with _progress() as progress:
        for config in configs:
            results.append(_run_with_progress(config, loaded, progress, f"{config.policy:>8}"))
    con.print(_table(results, f"multispin demo: {pair}, K={devices}, {preset} profile, virtual clock"))
    con.print(headline, highlight=False)
    png = plot_comparison(results, out / "demo.png")
    best = results[0].summary["goodput_tokens_per_s"]
    for r in results[1:]:
        other = r.summary["goodput_tokens_per_s"]
        con.print(f"adaptive vs {r.config.policy}: {100 * (best / other - 1):+.1f}% goodput" if other else "")
    d0 = results[0].texts.get(0, "")
    con.print(f"[bold]device 0 wrote:[/bold] {d0[:300]!r}")
    con.print(f"figure: {png}; per-round logs: {out}/<policy>/rounds.jsonl")
