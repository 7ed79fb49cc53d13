"""`multispin measure`: acceptance of one or more drafts on one prompt set, with confidence intervals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import typer
from rich.console import Console
from rich.table import Table

from multispin.commands._app import app
from multispin.commands._flag_groups import MACHINE, takes
from multispin.commands._options import json_option, pair_option, table_console
from multispin.jsonout import json_safe, versioned, write_json
from multispin.progress import step_progress


@app.command()
@takes(MACHINE)
def measure(
    pair: str = pair_option(),
    draft: list[str] | None = typer.Option(
        None,
        metavar="NAME",
        show_default="the pair's first",
        help="draft model to measure (repeat for several: all are scored on the same target texts)",
    ),
    task: Literal["chat", "code"] = typer.Option("chat", help="prompt set"),
    prompts: int = typer.Option(50, min=2, max=2000, metavar="INT", help="number of prompts (each is one device)"),
    verdict_prompts: int | None = typer.Option(
        None,
        min=0,
        max=2000,
        metavar="INT",
        show_default="every prompt",
        help="prompts that also run real rounds at γ for per-position acceptance (α uses every prompt)",
    ),
    draft_len: int = typer.Option(8, min=1, max=20, metavar="INT", help="draft length γ"),
    max_new_tokens: int = typer.Option(64, min=2, max=4096, metavar="INT", help="tokens generated per prompt"),
    temperature: float = typer.Option(1.0, min=0.0, metavar="FLOAT", help="sampling temperature (0 = greedy)"),
    top_k: int | None = typer.Option(
        None,
        min=0,
        metavar="INT",
        show_default="min(1024, V): what testbed and demo sample with",
        help="top-k cut (0 = off)",
    ),
    seed: int = typer.Option(0, metavar="INT", help="seed of prompt choice and sampling"),
    source: Literal["auto", "builtin", "sharegpt", "humaneval", "mtbench"] = typer.Option(
        "auto",
        help="prompt source (auto: the task's dataset, built-in prompts when offline; "
        "mtbench: MT-Bench's 80 first turns, α per category too)",
    ),
    batch: int = typer.Option(
        32, min=1, max=512, metavar="INT", help="prompts run together, drafting and verifying in one batched pass"
    ),
    out: Path | None = typer.Option(
        None,
        metavar="PATH",
        help="write the acceptance profile JSON here (for `optimize --acceptance-profile`); with several "
        "--draft, a folder that gets acceptance-<draft>-<task>-<policy>.json per draft",
    ),
    machine: dict = MACHINE.slot,
    as_json: bool = json_option(help="print the profile as JSON (a list with several --draft)"),
) -> None:
    """Measure α = E[Σ min(p, q)], per-position acceptance and mean accepted length."""
    from multispin.experiments.acceptance import MeasureConfig, profile_file_name
    from multispin.experiments.acceptance import measure as run_measure
    from multispin.experiments.testbed import compact_exact_defaults
    from multispin.models.placement import place_pair
    from multispin.models.registry import resolve_pair

    config = MeasureConfig.make(
        pair=pair,
        drafts=draft or None,
        task=task,
        prompts=prompts,
        verdict_prompts=verdict_prompts,
        draft_len=draft_len,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=top_k or 0,
        seed=seed,
        source=source,
        batch=batch,
    )
    with step_progress() as progress:
        progress.loading(f"loading {pair}…")
        loaded = place_pair(resolve_pair(pair, drafts=draft or None), machine["placement"])
        if top_k is None:  # the runs' own cut (the same function picks it), so α describes them
            config = config.model_copy(update={"top_k": compact_exact_defaults(loaded.vocab_size)[0]})
        profiles = [
            versioned(json_safe(p), "acceptance-profile")
            for p in run_measure(config, pair=loaded, progress=progress).values()
        ]
    written = []
    if out is not None:
        if len(profiles) == 1 and out.suffix == ".json":
            written.append(out)
        else:
            written += [out / profile_file_name(p) for p in profiles]
        for path, profile in zip(written, profiles):
            write_json(profile, path, indent=2)
    if as_json:
        typer.echo(json.dumps(profiles[0] if len(profiles) == 1 else profiles))
        return
    con = table_console()
    for profile in profiles:
        _print_profile(con, profile)
    for path in written:
        con.print(f"profile written to {path}")


def _ci_text(ci, digits: int) -> str:
    return "" if ci is None or None in ci else f"{ci[0]:.{digits}f} – {ci[1]:.{digits}f}"


def _print_profile(con: Console, profile: dict) -> None:
    t = Table(
        title=f"{profile['pair']} / {profile['draft']} / {profile['task']} ({profile['source']}): "
        f"{profile['num_prompts']} prompts, {profile['num_tokens']} tokens, "
        f"{profile['num_rounds']} rounds at γ={profile['draft_len']}"
    )
    t.add_column("quantity")
    t.add_column("estimate", justify="right")
    t.add_column("95% CI", justify="right")
    rows = [
        ("α = E[Σ min(p, q)]", profile["alpha"], profile["alpha_ci95"], 3),
        (
            f"mean accepted length (γ={profile['draft_len']})",
            profile["mean_accepted_length"],
            profile["mean_accepted_length_ci95"],
            2,
        ),
        ("i.i.d. prediction (1−α^{γ+1})/(1−α)", profile["iid_prediction"], None, 2),
    ]
    rows += [
        (f"acceptance at position {i + 1} | reached", r, ci, 3)
        for i, (r, ci) in enumerate(zip(profile["per_position_rate"], profile["per_position_ci95"]))
    ]
    rows += [
        (f"α, category {name} ({g['num_prompts']} prompts)", g["alpha"], g["alpha_ci95"], 3)
        for name, g in profile.get("groups", {}).items()
    ]
    for label, value, ci, digits in rows:
        if value is None:  # undefined: profile["notes"] says why, under the table
            continue
        t.add_row(label, f"{value:.{digits}f}", _ci_text(ci, digits))
    con.print(t)
    check = profile["iid_check"]
    if check["holds"] is not None:
        verdict = "holds" if check["holds"] else "is rejected"
        lo, hi = check["difference_ci95"][-1]
        con.print(
            f"i.i.d. acceptance {verdict} at γ={profile['draft_len']}: measured − predicted mean "
            f"accepted length {check['difference'][-1]:+.2f} (95% CI {lo:+.2f} – {hi:+.2f})",
            highlight=False,
        )
    for note in profile.get("notes", []):
        con.print(f"note: {note}", highlight=False)
