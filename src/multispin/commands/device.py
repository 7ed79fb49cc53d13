"""`multispin device`: one device of the networked testbed (draft model + prompt)."""

from __future__ import annotations

import json
from typing import Optional

import typer

from multispin.cli import app


@app.command()
def device(
    server: str = typer.Option("tcp://127.0.0.1:5555", help="the edge server's endpoint"),
    device_id: int = typer.Option(..., help="this device's id (unique per server)"),
    secret: Optional[str] = typer.Option(
        None, help="shared secret (default: $MULTISPIN_SECRET, which keeps it out of `ps`)"),
    pair: str = typer.Option("smollm2-135m", help="model pair (the server's)"),
    draft: Optional[str] = typer.Option(None, help="draft model of this device (default: the pair's first)"),
    prompt: str = typer.Option(..., help="this device's prompt"),
    resume: bool = typer.Option(True, help="continue the server's record of this device if it holds one"),
    reconnects: int = typer.Option(5, help="reconnect attempts after a lost session"),
    server_timeout: float = typer.Option(120.0, help="seconds of server silence before reconnecting"),
    threads: Optional[int] = typer.Option(None, help="torch intra-op threads"),
    result: Optional[str] = typer.Option(None, help="write the outcome (tokens, digest) as JSON here"),
    as_json: bool = typer.Option(False, "--json", help="print the outcome as one JSON object"),
    fault: Optional[str] = typer.Option(None, hidden=True, help="fault injection for tests"),
) -> None:
    """Run one device: draft, upload, correct in UL or DL mode as the server says, until done."""
    if threads:
        import torch

        torch.set_num_threads(threads)
    from multispin.runtime.device import run_device

    outcome = run_device(server, device_id, secret, pair, draft, prompt, resume=resume,
                         reconnects=reconnects, server_timeout_s=server_timeout, fault=fault)
    if result:
        with open(result, "w", encoding="utf-8") as fh:
            json.dump(outcome.to_dict(), fh)
    if as_json:
        typer.echo(json.dumps(outcome.to_dict()))
        return
    typer.echo(f"device {device_id}: {len(outcome.generated)} tokens, {outcome.sessions} session(s), "
               f"{outcome.reason}")
