"""`multispin serve`: the edge server of the networked testbed (target model, K devices)."""

from __future__ import annotations

import json
from typing import Optional

import typer

from multispin.cli import app


@app.command()
def serve(
    pair: str = typer.Option("smollm2-135m", help="model pair: a registered name or DRAFT:TARGET"),
    host: str = typer.Option("127.0.0.1", help="address to bind (loopback by default)"),
    port: int = typer.Option(5555, help="TCP port (0 = any free port)"),
    secret: Optional[str] = typer.Option(
        None, help="shared secret devices authenticate with (default: $MULTISPIN_SECRET)"),
    devices: int = typer.Option(1, help="devices K to wait for before round 0"),
    rounds: Optional[int] = typer.Option(None, help="stop after this many rounds (default: when all are done)"),
    max_new_tokens: int = typer.Option(32, help="tokens to generate per device"),
    draft_len: int = typer.Option(4, help="draft length γ for every device (0 = target only)"),
    mode: str = typer.Option("mixed", help="correction mode of rejected devices: ul, dl or mixed"),
    temperature: float = typer.Option(1.0, help="sampling temperature (0 = greedy)"),
    top_k: int = typer.Option(0, help="top-k cut (0 = off)"),
    top_p: float = typer.Option(1.0, help="nucleus mass in (0, 1]"),
    seed: int = typer.Option(0, help="seed of every random draw"),
    ul_codec: str = typer.Option("dense-fp32", help="codec of q_j in UL mode"),
    dl_codec: str = typer.Option("dense-fp32", help="codec of p_j in DL mode"),
    round_timeout: float = typer.Option(30.0, help="seconds to wait for a device's reply in a round phase"),
    join_timeout: float = typer.Option(120.0, help="seconds to wait for K devices before round 0"),
    idle_timeout: float = typer.Option(60.0, help="seconds to wait for detached, unfinished devices"),
    max_devices: int = typer.Option(256, help="distinct device ids served"),
    log: Optional[str] = typer.Option(None, "--log", help="JSON-lines log file (one line per round and event)"),
    summary: Optional[str] = typer.Option(None, help="write the final summary (records, digests) as JSON here"),
    threads: Optional[int] = typer.Option(None, help="torch intra-op threads"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as one JSON object"),
) -> None:
    """Run the edge server: authenticate devices, verify their drafts in one batch per round.

    SIGTERM (or Ctrl-C) finishes the current round, says BYE to every device, flushes the log
    and exits 0."""
    from multispin.runtime.auth import resolve_secret
    from multispin.runtime.server import EdgeServer, ServerConfig, install_signal_handlers
    from multispin.runtime.session import resolve_pair

    key = resolve_secret(secret)  # fail fast, before loading any model

    config = ServerConfig.make(
        host=host, port=port, expected_devices=devices, max_devices=max(max_devices, devices),
        rounds=rounds, max_new_tokens=max_new_tokens, draft_len=draft_len, mode=mode,
        temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, ul_codec=ul_codec,
        dl_codec=dl_codec, round_timeout_s=round_timeout, join_timeout_s=join_timeout,
        idle_timeout_s=idle_timeout,
    )
    if threads:
        import torch

        torch.set_num_threads(threads)
    server = EdgeServer(config, resolve_pair(pair), key, log_path=log)
    install_signal_handlers(server)
    typer.echo(f"multispin serve: {pair} on {config.bind_endpoint}, waiting for {devices} device(s)",
               err=True)
    result = server.run()
    if summary:
        with open(summary, "w", encoding="utf-8") as fh:
            json.dump(result.to_dict(), fh)
    if as_json:
        typer.echo(json.dumps(result.to_dict()))
        return
    typer.echo(f"stopped ({result.stop_reason}) after {result.rounds} rounds, {result.wall_s:.2f} s; "
               f"{result.refused} connection(s) refused")
    for d, rec in sorted(result.devices.items()):
        match = {True: "digest match", False: "DIGEST MISMATCH", None: "no final digest"}[rec.digest_match]
        typer.echo(f"device {d}: {len(rec.generated)} tokens, {rec.sessions} session(s), "
                   f"{'finished' if rec.finished else 'unfinished'}, {match}")
