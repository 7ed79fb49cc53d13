"""The `multispin` command: one verb per user job.

Each verb parses its flags, calls into the library and prints. Every user mistake, whether the
flag parser finds it (a bad choice, a number out of range, an unknown flag) or the library does
(any MultispinError), becomes one line on stderr naming the flag or field, and exit code 2;
never a traceback.
"""

from __future__ import annotations

import signal
import sys
import warnings
from collections.abc import Sequence

import typer

# `app` (created in commands/_app.py, so that a verb module need not import this one) is
# re-exported here; verbs live in their own modules and register themselves on it when imported.
from multispin.commands import (  # noqa: F401  # noqa: F401
    device,
    generate,
    keys,  # noqa: F401
    measure,
    optimize,  # noqa: F401
    profile,
    profiles,  # noqa: F401
    reproduce,  # noqa: F401
    scenario,  # noqa: F401
    serve,
    sweep,  # noqa: F401
    testbed,
)
from multispin.commands._app import app
from multispin.commands._errors import library_error_line, usage_error_line
from multispin.commands._interrupt import catch_signals, exit_code
from multispin.errors import MultispinError


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command line; exit 2 with one line on stderr for every user mistake."""
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError

    args = list(sys.argv[1:] if argv is None else argv)
    # numpy's RuntimeWarnings (an empty slice, an all-NaN column) are for the code, not the user:
    # an undefined estimate is reported by the verb in one line instead
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"numpy(\.|$)")
    # a file-size limit (ulimit -f) then fails a write with EFBIG, which side output handles as a
    # full disk (multispin.side_output), instead of killing the process mid-run
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        # as a program (no argv given), a Ctrl-C ends the process within seconds, whatever runs
        with catch_signals(bounded=argv is None):
            code = exit_code(app(args=args, prog_name="multispin", standalone_mode=False))
    except NoArgsIsHelpError as exc:
        exc.show()
        sys.exit(2)
    except UsageError as exc:
        typer.echo(f"error: {usage_error_line(exc, args)}", err=True)
        sys.exit(2)
    except ClickException as exc:
        typer.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code if exc.exit_code else 1)
    except MultispinError as exc:
        typer.echo(f"error: {library_error_line(exc, args)}", err=True)
        sys.exit(2)
    except OSError as exc:
        # a path the user named cannot be read or written (--out /readonly/x, a missing folder);
        # an OSError without a file name is not a user mistake and keeps its traceback
        if exc.filename is None:
            raise
        typer.echo(f"error: {exc.filename}: {exc.strerror or exc}", err=True)
        sys.exit(2)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
