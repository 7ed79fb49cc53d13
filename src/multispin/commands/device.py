"""`multispin device`: one device of the networked testbed (draft model + prompt), or with
``--devices`` a pool of them in one process (`multispin.runtime.net.pool`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from multispin.commands._app import app
from multispin.commands._options import (
    LogLevel,
    emit_json,
    json_option,
    log_level_option,
    pair_option,
    set_threads,
    setup_logging,
    threads_option,
)
from multispin.jsonout import versioned


@app.command()
def device(
    server: str = typer.Option(
        "tcp://127.0.0.1:5555", metavar="HOST:PORT", help="the edge server's endpoint (tcp:// is optional)"
    ),
    device_id: int | None = typer.Option(
        None,
        min=0,
        metavar="INT",
        show_default="required without --devices",
        help="this device's id (unique per server)",
    ),
    devices: str | None = typer.Option(
        None,
        "--devices",
        metavar="IDS",
        help="host a pool of devices in this process instead of one "
        "(ids such as 0-19 or 0-3,8): each its own session and key, drafting in batched forwards",
    ),
    keys: Path | None = typer.Option(
        None,
        "--keys",
        metavar="KEYS",
        show_default="required unless --insecure",
        help="the key folder: KEYS/device-N for device N (as `multispin keys device KEYS/device-N` makes), "
        "or the device's own folder",
    ),
    insecure: bool = typer.Option(False, "--insecure", help="plaintext and one shared secret (debugging only)"),
    secret: str | None = typer.Option(
        None,
        metavar="TEXT",
        show_default="$MULTISPIN_SECRET",
        help="with --insecure: the shared secret (prefer $MULTISPIN_SECRET, which keeps it out of `ps`)",
    ),
    pair: str = pair_option(help="model pair (the server's)"),
    draft: str | None = typer.Option(
        None, metavar="NAME", show_default="the pair's first", help="draft model of this device"
    ),
    prompt: list[str] | None = typer.Option(
        None,
        metavar="TEXT",
        show_default="required; a pool: the built-in chat prompts",
        help="this device's prompt (a pool: repeat it, cycled over the devices)",
    ),
    resume: bool = typer.Option(True, help="continue the server's record of this device if it holds one"),
    reconnects: int = typer.Option(5, min=0, metavar="INT", help="reconnect attempts after a lost session"),
    server_timeout: float = typer.Option(
        120.0, min=0.1, metavar="SECONDS", help="seconds of server silence (handshake included) before reconnecting"
    ),
    connect_timeout: float = typer.Option(
        60.0,
        min=0.0,
        metavar="SECONDS",
        help="give up (exit 2) when no session started within this many seconds: nothing listening, "
        "a server bound to 127.0.0.1 on another host, a firewall (0 = keep trying)",
    ),
    threads: int | None = threads_option(),
    result: Path | None = typer.Option(
        None, metavar="FILE", help="write the outcome (text, tokens, digest) as JSON here"
    ),
    log_level: LogLevel = log_level_option(),
    as_json: bool = json_option(help="print the outcome as one JSON object"),
    fault: str | None = typer.Option(None, hidden=True, help="fault injection for tests"),
) -> None:
    """Run one device: draft, upload, correct in UL or DL mode as the server says, until done;
    then print the text it generated.

    Give-up bounds: --connect-timeout (default 60 s) for a server never reached, --reconnects
    attempts (each waiting up to --server-timeout) for one that went away mid-text.

    Exit 0: the text is finished and its digest is the server's. Exit 1 (one line says why): the
    session ended before the text was finished (the server stopped, or went away and did not come
    back within --reconnects), or the digests differ; the partial text is still printed and
    written to --result (finished: false). Exit 2: a bad flag, or the server refused this device
    or could never be reached.

    With --devices, one process hosts them all (a device pool): each device has its own session,
    key (KEYS/device-N, or KEYS itself holding every pair) and socket, as if alone,
    and the pool drafts devices sharing a draft model in one batched forward per step. Exit 0
    when every device finished with the server's digest, else 1 (the other texts are printed)."""
    setup_logging(log_level)
    set_threads(threads)
    from multispin.commands._pool import run_pool_command

    # what a lone device and a pool take alike
    shared = dict(
        server=server,
        device_id=device_id,
        keys=keys,
        insecure=insecure,
        secret=secret,
        pair=pair,
        draft=draft,
        prompts=prompt,
        resume=resume,
        reconnects=reconnects,
        server_timeout=server_timeout,
        connect_timeout=connect_timeout,
        result=result,
        as_json=as_json,
    )
    if devices is not None:
        run_pool_command(devices=devices, **shared)
    else:
        _run_one_device(fault=fault, **shared)


def _run_one_device(
    *,
    server: str,
    device_id: int | None,
    keys: Path | None,
    insecure: bool,
    secret: str | None,
    pair: str,
    draft: str | None,
    prompts: list[str] | None,
    resume: bool,
    reconnects: int,
    server_timeout: float,
    connect_timeout: float,
    result: Path | None,
    as_json: bool,
    fault: str | None,
) -> None:
    """`multispin device` without --devices: one device, one prompt, its own session."""
    from multispin.commands._checks import check_credentials
    from multispin.commands._interrupt import reported_interrupt
    from multispin.commands._outcome import device_failure
    from multispin.commands._pool import check_one_device
    from multispin.runtime.net.device import run_device
    from multispin.runtime.security.auth import resolve_secret

    check_one_device(device_id, prompts)
    prompt_text = prompts[0]  # type: ignore[index]
    check_credentials(
        insecure,
        keys,
        secret,
        "this device's key folder (make it with `multispin keys device DIR --device-id N --allow SERVER_DIR`)",
    )
    report = _reporter(device_id, result, as_json)
    # SIGTERM or SIGINT: the text so far, printed and in --result (finished: false)
    with reported_interrupt(report):
        outcome = run_device(
            server,
            device_id,
            resolve_secret(secret) if insecure else None,
            pair,
            draft,
            prompt_text,
            keys=keys,
            resume=resume,
            reconnects=reconnects,
            server_timeout_s=server_timeout,
            connect_timeout_s=connect_timeout or None,
            fault=fault,
        )
    report(outcome)
    failure = device_failure(outcome)
    if failure is not None:
        typer.echo(f"error: {failure}", err=True)
        raise typer.Exit(1)


def _reporter(device_id: int | None, result: Path | None, as_json: bool) -> Callable[[Any], None]:
    """What prints a device's outcome (as JSON, or a line and its text) and writes it to --result:
    at the end, or with the text so far when the run is interrupted."""

    def report(outcome) -> None:
        doc = versioned(outcome.to_dict(), "device")
        if not emit_json(doc, result, as_json):
            typer.echo(
                f"device {device_id}: {len(outcome.generated)} tokens, {outcome.sessions} session(s), {outcome.reason}",
                err=True,
            )
            typer.echo(outcome.text)

    return report
