"""`multispin keys`: CurveZMQ key pairs for the server and for each device.

    multispin keys server SERVER_DIR
    multispin keys device KEYS/device-N --device-id N --allow SERVER_DIR
    multispin keys device KEYS --devices 0-9 --allow SERVER_DIR    (KEYS/device-N for each)

The layout every command reads is KEYS/server and KEYS/device-N (`device --keys KEYS` finds
device N's folder itself). The device command writes device N's key pair, allows its public
key on the server (as
``SERVER_DIR/allowed/device-N.key``: the file name binds the key to id N) and copies the
server's public key next to the device's keys. Secret keys are written 0600.
"""

from __future__ import annotations

from pathlib import Path

import typer

from multispin.commands._app import app

keys_app = typer.Typer(
    no_args_is_help=True, help="Key pairs for encrypted, per-device authenticated connections (CurveZMQ)."
)
app.add_typer(keys_app, name="keys")


@keys_app.command("server")
def server(
    directory: Path = typer.Argument(..., metavar="SERVER_DIR", help="folder for the server's keys"),
    force: bool = typer.Option(False, "--force", help="replace existing keys (every device must be re-keyed)"),
) -> None:
    """Make the server's key pair and its allowed-keys folder (SERVER_DIR/allowed)."""
    from multispin.runtime.security.keys import create_server_keys, load_server_keys

    public = create_server_keys(directory, force=force)
    typer.echo(f"server public key {load_server_keys(directory).public.decode()}")
    typer.echo(f"wrote {public} and {public}_secret (0600); allowed keys go in {directory / 'allowed'}")


@keys_app.command("device")
def device(
    directory: Path = typer.Argument(
        ..., metavar="DIR", help="with --device-id: the device's folder (name it KEYS/device-N); with --devices: KEYS"
    ),
    device_id: int | None = typer.Option(
        None, "--device-id", min=0, metavar="INT", help="the device id the key is bound to"
    ),
    devices: str | None = typer.Option(
        None, "--devices", metavar="IDS", help="several devices at once (0-19 or 0-3,8): DIR/device-N for each"
    ),
    allow: Path | None = typer.Option(
        None,
        "--allow",
        metavar="SERVER_DIR",
        help="allow the key on this server (copies it to SERVER_DIR/allowed, and server.key here)",
    ),
    force: bool = typer.Option(False, "--force", help="replace existing keys for this device id"),
) -> None:
    """Make device N's key pair; with --allow, let it in on the server as device N only.

    The layout every command reads: KEYS/server for the server, KEYS/device-N for device N;
    `device --keys KEYS` (lone or pool) finds KEYS/device-N itself."""
    from multispin.errors import ConfigError
    from multispin.runtime.net.pool import parse_device_ids
    from multispin.runtime.security.keys import create_device_keys, device_name, load_device_keys
    from multispin.runtime.wire.messages import MAX_DEVICE_ID

    if (device_id is None) == (devices is None):
        raise ConfigError(
            "--device-id: required (INT: the device id the key is bound to; or --devices IDS for several, DIR/device-N each)"
        )
    folders = (
        {device_id: directory}
        if device_id is not None
        else {d: directory / device_name(d) for d in parse_device_ids(devices or "")}
    )
    bad = [d for d in folders if d > MAX_DEVICE_ID]
    if bad:  # before any file is written: HELLO could never carry it
        raise ConfigError(f"--device-id: must be an integer in [0, {MAX_DEVICE_ID}] (got {bad[0]})")
    for d, folder in folders.items():
        public = create_device_keys(folder, d, allow=allow, force=force)
        typer.echo(f"device {d} public key {load_device_keys(folder, d).public.decode()}")
        typer.echo(f"wrote {public} and {public}_secret (0600)")
        if allow is not None:
            typer.echo(f"allowed as {allow / 'allowed' / public.name}; server key copied to {folder / 'server.key'}")
        else:
            typer.echo(
                f"not yet allowed: copy {public} to SERVER_DIR/allowed/{public.name} and the server's server.key here"
            )
