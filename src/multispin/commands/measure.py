"""`multispin measure`: acceptance of one draft on one task, with confidence intervals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, Optional

import typer
from rich.console import Console
from rich.table import Table

from multispin.commands._app import app
from multispin.commands._options import (
    LogLevel, TorchDevice, json_option, log_level_option, pair_option, set_threads, setup_logging,
    threads_option, torch_device_option,
)
from multispin.jsonout import versioned


@app.command()
def measure(
    pair: str = pair_option(),
    draft: Optional[str] = typer.Option(None, metavar="NAME", show_default="the pair's first",
                                        help="draft model to measure"),
    task: Literal["chat", "code"] = typer.Option("chat", help="prompt set"),
    prompts: int = typer.Option(50, min=2, max=2000, metavar="INT", help="number of prompts (each is one device)"),
    draft_len: int = typer.Option(8, min=1, max=20, metavar="INT", help="draft length γ"),
    max_new_tokens: int = typer.Option(64, min=2, max=4096, metavar="INT", help="tokens generated per prompt"),
    temperature: float = typer.Option(1.0, min=0.0, metavar="FLOAT", help="sampling temperature (0 = greedy)"),
    seed: int = typer.Option(0, metavar="INT", help="seed of prompt choice and sampling"),
    source: Literal["auto", "builtin", "sharegpt", "humaneval"] = typer.Option(
        "auto", help="prompt source (auto: the task's dataset, built-in prompts when offline)"),
    out: Optional[Path] = typer.Option(None, metavar="FILE",
                                       help="write the acceptance profile JSON here (for `optimize --acceptance-profile`)"),
    threads: Optional[int] = threads_option(),
    placement: TorchDevice = torch_device_option(),
    log_level: LogLevel = log_level_option(),
    as_json: bool = json_option(help="print the profile as JSON"),
) -> None:
    """Measure α = E[Σ min(p, q)], per-position acceptance and mean accepted length."""
    setup_logging(log_level)
    set_threads(threads)
    from multispin.experiments.acceptance import MeasureConfig, measure as run_measure
    from multispin.models.placement import place_pair
    from multispin.models.registry import resolve_pair

    config = MeasureConfig.make(pair=pair, draft=draft, task=task, prompts=prompts,
                                draft_len=draft_len, max_new_tokens=max_new_tokens,
                                temperature=temperature, seed=seed, source=source)
    with Console(stderr=True).status(f"loading {pair}…") as status:
        loaded = place_pair(resolve_pair(pair, drafts=[draft] if draft else None), placement)
        status.update(f"measuring {pair} / {draft or loaded.default_draft} on {task}: "
                      f"{prompts} prompts × {max_new_tokens} tokens…")
        profile = versioned(run_measure(config, pair=loaded, progress=status.update), "acceptance-profile")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(profile, indent=2))
    if as_json:
        typer.echo(json.dumps(profile))
        return
    con = Console()
    t = Table(title=f"{profile['pair']} / {profile['draft']} / {profile['task']}: "
                    f"{profile['num_prompts']} prompts, {profile['num_tokens']} tokens")
    t.add_column("quantity")
    t.add_column("estimate", justify="right")
    t.add_column("95% CI", justify="right")
    lo, hi = profile["alpha_ci95"]
    t.add_row("α = E[Σ min(p, q)]", f"{profile['alpha']:.3f}", f"{lo:.3f} – {hi:.3f}")
    lo, hi = profile["mean_accepted_length_ci95"]
    t.add_row(f"mean accepted length (γ={profile['draft_len']})",
              f"{profile['mean_accepted_length']:.2f}", f"{lo:.2f} – {hi:.2f}")
    t.add_row("i.i.d. prediction (1−α^{γ+1})/(1−α)", f"{profile['iid_prediction']:.2f}", "")
    for i, (r, (lo, hi)) in enumerate(zip(profile["per_position_rate"], profile["per_position_ci95"])):
        t.add_row(f"acceptance at position {i + 1} | reached", f"{r:.3f}", f"{lo:.3f} – {hi:.3f}")
    con.print(t)
    if out is not None:
        con.print(f"profile written to {out}")
