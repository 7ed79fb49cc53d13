"""`multispin measure`: acceptance of one draft on one task, with confidence intervals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from multispin.cli import app


@app.command()
def measure(
    pair: str = typer.Option("smollm2-135m", help="model pair (registered name or DRAFT:TARGET)"),
    draft: Optional[str] = typer.Option(None, help="draft model (default: the pair's first)"),
    task: str = typer.Option("chat", help="prompt set: chat or code"),
    prompts: int = typer.Option(50, help="number of prompts (each is one device)"),
    draft_len: int = typer.Option(8, help="draft length γ"),
    max_new_tokens: int = typer.Option(64, help="tokens generated per prompt"),
    temperature: float = typer.Option(1.0, help="sampling temperature"),
    seed: int = typer.Option(0, help="seed of prompt choice and sampling"),
    source: str = typer.Option("auto", help="prompt source: auto, builtin, sharegpt, humaneval"),
    out: Optional[Path] = typer.Option(None, help="write the acceptance profile JSON here"),
    as_json: bool = typer.Option(False, "--json", help="print the profile as JSON"),
) -> None:
    """Measure α = E[Σ min(p, q)], per-position acceptance and mean accepted length."""
    from multispin.experiments.acceptance import MeasureConfig, measure as run_measure

    config = MeasureConfig.make(pair=pair, draft=draft, task=task, prompts=prompts,
                                draft_len=draft_len, max_new_tokens=max_new_tokens,
                                temperature=temperature, seed=seed, source=source)
    with Console(stderr=True).status(f"measuring {pair} / {draft or 'default draft'} on {task}…"):
        profile = run_measure(config)
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
