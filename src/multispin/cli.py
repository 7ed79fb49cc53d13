"""The `multispin` command: one verb per user job.

Each verb parses its flags, calls into the library and prints; user mistakes (any
MultispinError) become one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import sys

import typer

from multispin.errors import MultispinError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Multi-access speculative inference at the wireless edge.",
    pretty_exceptions_enable=False,
)

# Verbs live in their own modules and register themselves on `app` when imported.
from multispin.commands import generate, measure, profile, testbed  # noqa: E402,F401
from multispin.commands import optimize  # noqa: E402,F401
from multispin.commands import serve, device  # noqa: E402,F401
from multispin.commands import reproduce  # noqa: E402,F401


def main() -> None:
    try:
        app()
    except MultispinError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
