"""MkDocs hook: the CLI reference page is generated from the typer app at build time, so it
cannot drift from `multispin VERB -h`."""

MARKER = "<!-- multispin-cli-reference -->"


def on_page_markdown(markdown, page, config, files, **kwargs):
    if MARKER not in markdown:
        return markdown
    from multispin.commands._reference import cli_reference_markdown  # noqa: PLC0415  (the CLI's verbs: the lazy boundary)

    return markdown.replace(MARKER, cli_reference_markdown())
