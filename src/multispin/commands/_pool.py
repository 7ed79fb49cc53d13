"""`multispin device --devices IDS`: a device pool (`multispin.runtime.net.pool`) from the command
line, with the lone device's flags; and the checks that tell a lone device's flags from a pool's."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import typer

from multispin.errors import ConfigError


def check_one_device(device_id: int | None, prompts: Sequence[str] | None) -> None:
    """A lone device needs its id and exactly one prompt."""
    if device_id is None:
        raise ConfigError("--device-id: required (INT: this device's id; or --devices IDS for a pool)")
    if not prompts:
        raise ConfigError("--prompt: required (TEXT: this device's prompt)")
    if len(prompts) > 1:
        raise ConfigError(f"--prompt: one device takes one prompt (got {len(prompts)}; a pool takes several)")


def run_pool_command(
    *,
    server: str,
    device_id: int | None,
    devices: str,
    keys: Path | None,
    insecure: bool,
    secret: str | None,
    pair: str,
    draft: str | None,
    prompts: Sequence[str] | None,
    resume: bool,
    reconnects: int,
    server_timeout: float,
    connect_timeout: float,
    result: Path | None,
    as_json: bool,
) -> None:
    from multispin.commands._checks import check_credentials
    from multispin.runtime.net.pool import parse_device_ids, run_pool
    from multispin.runtime.security.auth import resolve_secret

    if device_id is not None:
        raise ConfigError("--device-id: give --device-id for one device or --devices for a pool, not both")
    ids = parse_device_ids(devices)
    check_credentials(
        insecure, keys, secret, "the folder of the pool's device keys (DIR/device-N for each, or every pair in DIR)"
    )
    if not prompts:
        from multispin.models.prompts import default_prompts

        prompts = default_prompts(len(ids), 0)
    from multispin.commands._interrupt import reported_interrupt

    def report(outcomes: list, interrupted: bool = False) -> list[str]:
        return _report(outcomes, ids, result, as_json, interrupted)

    # SIGTERM or SIGINT to this process: the texts so far, printed and in --result (finished: false)
    with reported_interrupt(lambda partial: report(partial, interrupted=True)):
        outcomes = run_pool(
            server,
            ids,
            pair,
            list(prompts),
            drafts=[draft] if draft else None,
            secret=resolve_secret(secret) if insecure else None,
            keys=keys,
            resume=resume,
            reconnects=reconnects,
            server_timeout_s=server_timeout,
            connect_timeout_s=connect_timeout or None,
        )
    failures = report(outcomes)
    if failures:
        for f in failures:
            typer.echo(f"error: {f}", err=True)
        raise typer.Exit(1)


def _report(outcomes: list, ids: Sequence[int], result: Path | None, as_json: bool, interrupted: bool) -> list[str]:
    """Write ``--result`` (or the JSON on stdout), print each text; the failures, one line each."""
    from multispin.commands._options import emit_json
    from multispin.commands._outcome import device_failure
    from multispin.jsonout import versioned
    from multispin.runtime.net.device import DeviceOutcome

    body: dict = {"devices": [o.to_dict() for o in outcomes]}
    if interrupted:
        body["interrupted"] = True
    doc = versioned(body, "device-pool")
    failures = [
        device_failure(o) if isinstance(o, DeviceOutcome) else f"device {o.device_id}: {o.error}" for o in outcomes
    ]
    missing = sorted(set(ids) - {o.device_id for o in outcomes})
    if not emit_json(doc, result, as_json):
        for o in outcomes:
            if isinstance(o, DeviceOutcome):
                typer.echo(
                    f"device {o.device_id}: {len(o.generated)} tokens, {o.sessions} session(s), {o.reason}", err=True
                )
                typer.echo(f"--- device {o.device_id} ---\n{o.text}")
    return [f for f in failures if f is not None] + [f"device {d}: never ran" for d in missing]
