"""`multispin serve`: the edge server of the networked testbed (target model, K devices)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

import typer

from multispin.commands._app import app
from multispin.commands._flag_groups import MACHINE, ROUND, takes
from multispin.commands._interrupt import drain_on_signal
from multispin.commands._options import emit_json, json_option, pair_option
from multispin.jsonout import versioned

DEFAULT_JOURNAL = Path("runs/serve/journal.sqlite")


def check_port_free(host: str, port: int) -> None:
    """A port that another process holds (a second `serve`) is refused in one line before the model
    loads (the server binds only once it is built). A free port can still be taken in between:
    the server's own bind error then says so."""
    import errno
    import socket

    from multispin.errors import ConfigError

    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(
            None if host in ("*", "") else host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror:
        return  # an unknown host: the server's bind names it
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds (TIME_WAIT is free)
        try:
            probe.bind(addr)
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                why = "in use (another `multispin serve`?)" if exc.errno == errno.EADDRINUSE else "not allowed"
                raise ConfigError(f"--port: {port} on {host} is {why}; pick another (--port 0: any free one)") from None


@app.command()
@takes(ROUND, MACHINE)
def serve(
    pair: str = pair_option(),
    host: str = typer.Option("127.0.0.1", metavar="ADDRESS", help="address to bind (loopback by default)"),
    port: int = typer.Option(5555, min=0, max=65535, metavar="INT", help="TCP port (0 = any free port)"),
    keys: Path | None = typer.Option(
        None,
        "--keys",
        metavar="SERVER_DIR",
        show_default="required unless --insecure",
        help="the server's key folder (`multispin keys server`): encrypted, per-device authenticated",
    ),
    insecure: bool = typer.Option(
        False, "--insecure", help="plaintext and one shared secret (debugging only; no per-device identity)"
    ),
    secret: str | None = typer.Option(
        None,
        metavar="TEXT",
        show_default="$MULTISPIN_SECRET",
        help="with --insecure: the shared secret (prefer $MULTISPIN_SECRET, out of `ps`)",
    ),
    journal: Path | None = typer.Option(
        DEFAULT_JOURNAL,
        "--journal",
        metavar="FILE",
        help="crash-safe journal of sessions and committed rounds; a restart on it resumes every device "
        "(a damaged one is refused)",
    ),
    no_journal: bool = typer.Option(False, "--no-journal", help="keep nothing on disk (a crash loses the texts)"),
    journal_check: Literal["quick", "full"] = typer.Option(
        "quick",
        "--journal-check",
        help="SQLite's check of the journal on open: quick (quick_check) or full (integrity_check, slower)",
    ),
    journal_repair: bool = typer.Option(
        False,
        "--journal-repair",
        help="resume a damaged journal from its last good round (later rounds are regenerated, with the "
        "same texts); the damaged files are kept aside",
    ),
    devices: int = typer.Option(1, min=1, max=256, metavar="INT", help="devices K to wait for before round 0"),
    rounds: int | None = typer.Option(
        None, min=1, metavar="INT", show_default="until every device is done", help="stop after this many rounds"
    ),
    max_new_tokens: int = typer.Option(32, min=1, max=8192, metavar="INT", help="tokens to generate per device"),
    round_settings: dict = ROUND.slot,
    round_timeout: float = typer.Option(
        30.0, min=0.1, metavar="SECONDS", help="seconds to wait for a device's reply in a round phase"
    ),
    join_timeout: float = typer.Option(
        120.0, min=0.1, metavar="SECONDS", help="seconds to wait for K devices before round 0"
    ),
    idle_timeout: float = typer.Option(
        60.0, min=0.1, metavar="SECONDS", help="seconds to wait for detached, unfinished devices"
    ),
    max_devices: int = typer.Option(256, min=1, metavar="INT", help="distinct device ids served"),
    max_connections: int | None = typer.Option(
        None,
        min=1,
        max=65536,
        metavar="INT",
        show_default="max devices + max pending",
        help="sessions and handshakes at once; more are told to retry",
    ),
    max_pending: int | None = typer.Option(
        None,
        min=1,
        max=65536,
        metavar="INT",
        show_default="64, at most --max-connections",
        help="handshakes in flight at once",
    ),
    handshake_timeout: float = typer.Option(
        10.0, min=0.1, metavar="SECONDS", help="a connection that has not finished its handshake by then is closed"
    ),
    max_silent_per_key: int = typer.Option(
        4,
        min=0,
        max=4096,
        metavar="INT",
        help="connections of one key that authenticated and sent nothing within --handshake-timeout; "
        "more are refused at the handshake (0: no limit)",
    ),
    log: str | None = typer.Option(
        None, "--log", metavar="FILE", help="JSON-lines log file (one line per round and event)"
    ),
    summary: Path | None = typer.Option(
        None, metavar="FILE", help="write the final summary (records, digests) as JSON here"
    ),
    machine: dict = MACHINE.slot,
    as_json: bool = json_option(help="print the summary as one JSON object"),
) -> None:
    """Run the edge server: authenticate devices, verify their drafts in one batch per round.

    SIGTERM (or Ctrl-C) finishes the current round, says BYE to every device, flushes the log
    and exits 0. Exit 1: the run ended with a device unfinished (idle or join timeout) or with a
    device whose digest differs from the server's; exit 2: a bad flag, a refused (damaged)
    journal, a port that cannot be bound.

    Stragglers: a device with no DRAFT within --round-timeout is skipped for that round (the
    others commit) and resumes at its next HELLO; at its 2nd miss in a row it is told busy and
    kept out for 20 × --round-timeout, at most half of --idle-timeout and of --join-timeout (30 s
    at the defaults), so it is back before the server stops waiting. A device told busy waits
    that long and rejoins without spending its --reconnects; its text continues exactly as if
    it had never stalled (docs/reliability.md)."""
    from multispin.commands._checks import check_parent_exists
    from multispin.commands._outcome import serve_failure
    from multispin.runtime.net.server import install_signal_handlers
    from multispin.runtime.net.server_config import ServerConfig
    from multispin.runtime.round.local import fixed_policy

    # fail fast, before loading any model
    security = server_security(keys, insecure, secret)
    check_connection_flags(max_connections, max_pending)
    check_port_free(host, port)
    if log is not None:
        check_parent_exists(Path(log), "--log")

    settings = dict(round_settings)
    policy = fixed_policy(settings.pop("draft_len"), settings.pop("mode"), settings["seed"])
    config = ServerConfig.make(
        host=host,
        port=port,
        expected_devices=devices,
        max_devices=max(max_devices, devices),
        rounds=rounds,
        max_new_tokens=max_new_tokens,
        **settings,
        round_timeout_s=round_timeout,
        join_timeout_s=join_timeout,
        idle_timeout_s=idle_timeout,
        max_connections=max_connections,
        max_pending=max_pending,
        handshake_timeout_s=handshake_timeout,
        max_silent_per_key=max_silent_per_key,
    )
    opened = open_journal(None if no_journal else journal, journal_check, journal_repair)
    server = _load_server(pair, machine, config, security, opened, policy, log)
    drain_on_signal()  # the first Ctrl-C drains the round (no grace timer); a second one ends at once
    install_signal_handlers(server)
    result = server.run(on_ready=_banner(pair, insecure, devices, server.recovered, journal))
    doc = versioned(result.to_dict(), "serve")
    if not emit_json(doc, summary, as_json, "--summary"):
        _print_result(result)
    failure = serve_failure(result)
    if failure is not None:
        typer.echo(f"error: {failure}", err=True)
        raise typer.Exit(1)


def _banner(
    pair: str, insecure: bool, devices: int, recovered: list[int], journal: Path | None
) -> Callable[[str], None]:
    """The line that says the server is up, printed only once bound (a failed bind is one error
    line, no banner)."""
    resumed = f", resuming {len(recovered)} device(s) from {journal}" if recovered else ""

    def banner(endpoint: str) -> None:
        typer.echo(
            f"multispin serve: {pair} on {endpoint} ({'PLAINTEXT' if insecure else 'encrypted'}), "
            f"waiting for {devices} device(s){resumed}",
            err=True,
        )

    return banner


def _load_server(pair: str, machine: dict, config, security: dict, opened, policy, log: str | None):
    """The edge server on the loaded target model; the journal is closed if the model or the
    server fails to come up."""
    from multispin.commands._checks import check_codecs_fit
    from multispin.models.placement import place_pair
    from multispin.models.registry import resolve_pair
    from multispin.runtime.net.server import EdgeServer

    try:
        # the devices draft in their own processes: only the target moves to the GPU
        loaded = place_pair(resolve_pair(pair), machine["placement"], drafts=False)
        check_codecs_fit(config.ul_codec, config.dl_codec, loaded.vocab_size)  # before waiting for anyone
        return EdgeServer(
            config,
            loaded,
            security.get("secret"),
            keys=security.get("keys"),
            journal=opened,
            policy=policy,
            log_path=log,
        )
    except BaseException:
        if opened is not None:
            opened.close()
        raise


def _print_result(result) -> None:
    """The run's end in words: why it stopped, and per device its tokens, sessions and digest check."""
    typer.echo(
        f"stopped ({result.stop_reason}) after {result.rounds} rounds, {result.wall_s:.2f} s; "
        f"{result.refused} connection(s) refused"
    )
    for d, rec in sorted(result.devices.items()):
        match = {True: "digest match", False: "DIGEST MISMATCH", None: "no final digest"}[rec.digest_match]
        typer.echo(
            f"device {d}: {len(rec.generated)} tokens, {rec.sessions} session(s), "
            f"{'finished' if rec.finished else 'unfinished'}, {match}"
        )


def open_journal(path: Path | None, check: str, repair: bool):
    """The journal, checked (and repaired if asked) before any model is loaded: a damaged one is
    one line and exit 2 within a second, not after minutes of loading."""
    from multispin.commands._checks import check_parent_exists
    from multispin.errors import ConfigError
    from multispin.runtime.store.journal import Journal

    if path is None:
        if repair:
            raise ConfigError("--journal-repair: there is no journal to repair with --no-journal")
        return None
    if path == DEFAULT_JOURNAL:
        path.parent.mkdir(parents=True, exist_ok=True)  # our own default folder
    else:
        check_parent_exists(path, "--journal")
    return Journal(path, check=check, repair=repair)


def check_connection_flags(max_connections: int | None, max_pending: int | None) -> None:
    """A handshake holds a connection: more pending handshakes than connections is a mistake to
    name, not a limit to lower silently."""
    from multispin.errors import ConfigError

    if max_connections is not None and max_pending is not None and max_pending > max_connections:
        raise ConfigError(
            f"--max-pending: {max_pending} is more than --max-connections {max_connections} "
            "(each pending handshake holds a connection); lower it or raise --max-connections"
        )


def server_security(keys: Path | None, insecure: bool, secret: str | None) -> dict:
    """The server's keys (the default) or, with --insecure only, the shared secret."""
    from multispin.errors import ConfigError
    from multispin.runtime.security.auth import resolve_secret
    from multispin.runtime.security.keys import load_server_keys

    if insecure:
        if keys is not None:
            raise ConfigError("--insecure: plaintext has no keys; drop --keys or --insecure")
        return {"secret": resolve_secret(secret)}
    if secret:
        raise ConfigError("--secret: only with --insecure (encrypted runs authenticate devices by key)")
    if keys is None:
        raise ConfigError(
            "--keys: give the server's key folder (make it with `multispin keys server DIR`), "
            "or --insecure for a plaintext debugging run"
        )
    return {"keys": load_server_keys(keys)}
