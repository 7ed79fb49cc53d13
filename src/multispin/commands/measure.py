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
from multispin.commands._progress import step_progress
from multispin.jsonout import json_safe, versioned


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
    with step_progress() as progress:
        progress.loading(f"loading {pair}…")
        loaded = place_pair(resolve_pair(pair, drafts=[draft] if draft else None), placement)
        profile = versioned(json_safe(run_measure(config, pair=loaded, progress=progress)), "acceptance-profile")
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
    rows = [("α = E[Σ min(p, q)]", profile["alpha"], profile["alpha_ci95"], 3),
            (f"mean accepted length (γ={profile['draft_len']})", profile["mean_accepted_length"],
             profile["mean_accepted_length_ci95"], 2),
            ("i.i.d. prediction (1−α^{γ+1})/(1−α)", profile["iid_prediction"], None, 2)]
    rows += [(f"acceptance at position {i + 1} | reached", r, ci, 3)
             for i, (r, ci) in enumerate(zip(profile["per_position_rate"], profile["per_position_ci95"]))]
    for label, value, ci, digits in rows:
        if value is None:  # undefined: profile["notes"] says why, under the table
            continue
        interval = "" if ci is None or None in ci else f"{ci[0]:.{digits}f} – {ci[1]:.{digits}f}"
        t.add_row(label, f"{value:.{digits}f}", interval)
    con.print(t)
    for note in profile.get("notes", []):
        con.print(f"note: {note}", highlight=False)
    if out is not None:
        con.print(f"profile written to {out}")
