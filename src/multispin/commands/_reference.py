"""The CLI reference as Markdown, generated from the typer app itself, so the docs site's page
lists exactly the verbs, flags, types, choices and defaults that `multispin VERB -h` shows."""

from __future__ import annotations


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _options_table(cmd, ctx) -> list[str]:
    rows = ["| option | value | meaning |", "|---|---|---|"]
    for p in cmd.get_params(ctx):
        if getattr(p, "hidden", False) or p.param_type_name != "option":
            continue
        record = p.get_help_record(ctx)
        if record is None:
            continue
        names = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
        shown = p.display_type_rich(ctx) if hasattr(p, "display_type_rich") else ""
        value = f"`{shown}`" if shown else ""
        rows.append(f"| {names} | {_escape(value)} | {_escape(record[1])} |")
    return rows


def _arguments(cmd, ctx) -> list[str]:
    args = [p for p in cmd.get_params(ctx) if p.param_type_name == "argument"]
    return [f"- `{(p.metavar or p.name).upper()}`: {_escape(getattr(p, 'help', '') or '')}" for p in args]


def _section(cmd, ctx, level: int) -> list[str]:
    import inspect

    path = ctx.command_path
    out = [f"{'#' * level} `{path}`", ""]
    if cmd.help:
        out += [inspect.cleandoc(cmd.help), ""]
    out += ["```text", cmd.get_usage(ctx).strip(), "```", ""]
    args = _arguments(cmd, ctx)
    if args:
        out += ["Arguments:", "", *args, ""]
    out += [*_options_table(cmd, ctx), ""]
    for name, sub in getattr(cmd, "commands", {}).items():
        out += _section(sub, type(ctx)(sub, info_name=name, parent=ctx), level + 1)
    return out


def cli_reference_markdown() -> str:
    """Every verb (and sub-verb) of ``multispin`` with its usage, help and options table."""
    from typer._click import Context
    from typer.main import get_command

    from multispin import cli

    root = get_command(cli.app)
    ctx = Context(root, info_name="multispin")
    out = [
        "Generated from the command itself (`multispin VERB -h` shows the same).",
        "",
        *_options_table(root, ctx),
        "",
    ]
    for name, cmd in root.commands.items():
        out += _section(cmd, Context(cmd, info_name=name, parent=ctx), 2)
    return "\n".join(out)
