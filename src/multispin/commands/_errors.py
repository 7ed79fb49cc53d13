"""The one error formatter of the ``multispin`` command: every user mistake becomes one line.

A flag-parser error names the flag (or the argument's metavar) and what it expects; a library
error (a [`ConfigError`][multispin.errors.ConfigError]) about a field that a flag the user typed sets is
reported under that flag, with the field in brackets (``--pdl-dbm [radio.p_dl_dbm]: ...``), so
the user reads the name they wrote.
"""

from __future__ import annotations

from collections.abc import Sequence

# Scenario fields that a command-line flag sets, and the flags (new spelling first) that set them.
# A message about the field names the flag when the user typed one of them.
FLAGS_OF_FIELD: dict[str, tuple[str, ...]] = {
    "radio.p_dl_dbm": ("--pdl-dbm",),
    "radio.p_ul_dbm": ("--pul-dbm",),
    "radio.noise_figure_db": ("--noise-figure-db",),
    "radio.bandwidth_split": ("--split",),
    "devices.count": ("--devices",),
    "optimizer.n_saa": ("--n-saa",),
    "optimizer.objective": ("--objective",),
    "optimizer.energy_weight_tokens_per_j": ("--energy-weight",),
    "seed": ("--seed",),
    "scenario": ("--scenario",),
    "acceptance_profile": ("--acceptance-profile",),
    "compute_profile": ("--compute-profile",),
    "policies": ("--policies",),
}


def value_given(args: Sequence[str], opts: Sequence[str]) -> str | None:
    """The text the user gave for an option (the parser's messages do not repeat it)."""
    for i, a in enumerate(args):
        for o in opts:
            if a == o and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(o + "="):
                return a[len(o) + 1 :]
    return None


def flag_typed(args: Sequence[str], opts: Sequence[str]) -> str | None:
    """The first of ``opts`` that the user typed (``--pdl-dbm`` or ``--pdl-dbm=VALUE``), else None."""
    for a in args:
        for o in opts:
            if a == o or a.startswith(o + "="):
                return o
    return None


def _expects(param) -> str:
    """What a parameter takes, in words: its help text, else its metavar or type name."""
    help_text = " ".join(str(getattr(param, "help", "") or "").split()).rstrip(".")
    metavar = param.metavar or (param.type.name.upper() if getattr(param, "type", None) else "")
    if not getattr(param, "opts", None) or not str(param.opts[0]).startswith("-"):
        metavar = ""  # an argument: its name is the metavar already
    if help_text and metavar:
        return f"{metavar}: {help_text}"
    return help_text or metavar or "a value"


def missing_line(param) -> str:
    """``--prompt: required (TEXT: this device's prompt)`` for an option or argument not given."""
    opts = [o for o in (getattr(param, "opts", None) or []) if o.startswith("-")]
    name = max(opts, key=len) if opts else (param.metavar or str(param.name).upper())
    return f"{name}: required ({_expects(param)})"


def usage_error_line(exc, args: Sequence[str]) -> str:
    """One line for a flag-parser error: the flag, what is wrong, what was given."""
    from typer._click.exceptions import MissingParameter, NoSuchOption

    if isinstance(exc, NoSuchOption):
        line = f"{exc.option_name}: no such option"
        if exc.possibilities:
            line += f" (did you mean {', '.join(sorted(exc.possibilities))}?)"
        cmd = exc.ctx.command_path if exc.ctx is not None else "multispin"
        return f"{line}; see `{cmd} --help`"
    param = getattr(exc, "param", None)
    if isinstance(exc, MissingParameter) and param is not None:
        return missing_line(param)
    msg = str(getattr(exc, "message", exc)).strip().removeprefix("Value error, ")
    msg = " ".join(msg.split()).rstrip(".")
    opts = list(getattr(param, "opts", None) or [])
    if not opts:
        return " ".join(exc.format_message().split())
    name = max(opts, key=len)
    got = value_given(args, opts)
    if got is not None and repr(got) not in msg:
        msg += f" (got {got!r})"
    return f"{name}: {msg}"


def library_error_line(exc, args: Sequence[str]) -> str:
    """One line for a MultispinError; a message about a field that a typed flag sets is given
    under the flag: ``radio.p_dl_dbm: must be …`` → ``--pdl-dbm [radio.p_dl_dbm]: must be …``."""
    text = " ".join(str(exc).split())
    for field, flags in FLAGS_OF_FIELD.items():
        if not text.startswith(field + ": "):
            continue
        typed = {f for f in flags if flag_typed(args, [f])}
        if len(typed) != 1:  # none typed (the value came from elsewhere), or a conflict between them
            break
        flag = typed.pop()
        rest = text[len(field) + 2 :]
        label = flag if "." not in field else f"{flag} [{field}]"
        return f"{label}: {rest}"
    return text
