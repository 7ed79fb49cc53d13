"""The `multispin` command: one verb per user job.

Each verb parses its flags, calls into the library and prints. Every user mistake, whether the
flag parser finds it (a bad choice, a number out of range, an unknown flag) or the library does
(any MultispinError), becomes one line on stderr naming the flag or field, and exit code 2;
never a traceback.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

import typer

# `app` (created in commands/_app.py, so that a verb module need not import this one) is
# re-exported here; verbs live in their own modules and register themselves on it when imported.
from multispin.commands import generate, measure, profile, testbed  # noqa: F401
from multispin.commands import optimize  # noqa: F401
from multispin.commands import serve, device  # noqa: F401
from multispin.commands import reproduce  # noqa: F401
from multispin.commands import scenario  # noqa: F401
from multispin.commands import keys  # noqa: F401
from multispin.commands._app import app
from multispin.errors import MultispinError


def _value_given(args: Sequence[str], opts: Sequence[str]) -> Optional[str]:
    """The text the user gave for an option (the parser's messages do not repeat it)."""
    for i, a in enumerate(args):
        for o in opts:
            if a == o and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(o + "="):
                return a[len(o) + 1:]
    return None


def usage_error_line(exc, args: Sequence[str]) -> str:
    """One line for a flag-parser error: the flag, what is wrong, what was given."""
    from typer._click.exceptions import NoSuchOption

    if isinstance(exc, NoSuchOption):
        line = f"{exc.option_name}: no such option"
        if exc.possibilities:
            line += f" (did you mean {', '.join(sorted(exc.possibilities))}?)"
        cmd = exc.ctx.command_path if exc.ctx is not None else "multispin"
        return f"{line}; see `{cmd} --help`"
    msg = str(getattr(exc, "message", exc)).strip().removeprefix("Value error, ")
    msg = " ".join(msg.split()).rstrip(".")
    param = getattr(exc, "param", None)
    opts = list(getattr(param, "opts", None) or [])
    if not opts:
        return exc.format_message().replace("\n", " ")
    name = max(opts, key=len)
    got = _value_given(args, opts)
    if got is not None and repr(got) not in msg and type(exc).__name__ != "MissingParameter":
        msg += f" (got {got!r})"
    return f"{name}: {msg}"


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Run the command line; exit 2 with one line on stderr for every user mistake."""
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        code = app(args=args, prog_name="multispin", standalone_mode=False)
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
        typer.echo(f"error: {' '.join(str(exc).split())}", err=True)
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
