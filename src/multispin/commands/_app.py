"""The ``multispin`` typer app: created here, filled by the verb modules of this package (each
registers itself on ``app`` when imported) and run by `multispin.cli`, which imports them all."""

from __future__ import annotations

import typer

from multispin._version import __version__

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Multi-access speculative inference at the wireless edge.",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"multispin {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_show_version, help="print the version and exit"
    ),
) -> None:
    """Multi-access speculative inference at the wireless edge."""


def _patch_help_metavars() -> None:
    """typer 0.29 labels every option `<type>`: `<bool>` even for flags, which take no value,
    and `<str>`/`<int>` where a name would teach more. Flags get no label; other options without
    an explicit metavar get the conventional upper-case one (INT, FLOAT, TEXT, PATH); choices
    stay listed (`<ul|dl|random>`)."""
    try:
        from typer.core import TyperOption
    except ImportError:  # another typer: its own labels are fine
        return
    original = TyperOption.display_type_rich
    if getattr(original, "_multispin", False):
        return
    names = {
        "<int>": "INT",
        "<float>": "FLOAT",
        "<str>": "TEXT",
        "<path>": "PATH",
        "<list[str]>": "TEXT",
        "<list[int]>": "INT",
        "<list[path]>": "PATH",
    }

    def display_type_rich(self, ctx):
        if self.metavar is not None:
            return self.metavar
        if getattr(self, "is_flag", False) or getattr(self, "is_bool_flag", False):
            return ""
        label = original(self, ctx)
        return names.get(label, label)

    display_type_rich._multispin = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_patch_help_metavars()
