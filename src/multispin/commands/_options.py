"""Flags shared by several verbs, defined once so that a flag means the same everywhere.

``--scenario PRESET|FILE`` wherever a scenario is built (optimize, testbed, demo), with
``--pdl-dbm``, ``--pul-dbm`` and ``--noise-figure-db``; ``--pair`` always names a model pair;
``--log-level`` on every long-running verb; ``--device`` places the models (CPU by default).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Literal

import typer

DEFAULT_SCENARIO = "paper-qwen"
LogLevel = Literal["debug", "info", "warning", "error"]
TorchDevice = Literal["auto", "cpu", "cuda"]
Split = Literal["equal", "optimized"]  # --split: how the band is shared among the corrections
CODECS = "dense-fp32, dense-fp16, dense-bf16, sparse:v_eff=N,q=B, lattice:l=L"

SCENARIO_HELP = (
    "scenario: a preset (paper-qwen, paper-r1, smollm2-cpu) or a YAML/TOML/JSON file "
    "(`multispin scenario show PRESET` prints one to start from)"
)


def scenario_option(default_shown: str = DEFAULT_SCENARIO):
    return typer.Option(None, "--scenario", metavar="PRESET|FILE", show_default=default_shown, help=SCENARIO_HELP)


def pick_scenario(scenario: str | None, default: str = DEFAULT_SCENARIO) -> str:
    """The scenario ``--scenario`` names, or the verb's default."""
    return default if scenario is None else scenario


def choice_option(
    default: str | None,
    choices: Sequence[str],
    *decls: str,
    help: str,
    **kw,
):
    """An option whose value is one of ``choices``, all listed in the help."""

    def check(value: str | None) -> str | None:
        if value is not None and value not in choices:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(map(repr, choices))}")
        return value

    return typer.Option(default, *decls, metavar=f"<{'|'.join(choices)}>", callback=check, help=help, **kw)


def pdl_option():
    return typer.Option(
        None,
        "--pdl-dbm",
        metavar="DBM",
        show_default="the scenario's",
        help="server DL power budget P^dl (dBm, -60..70)",
    )


def pul_option():
    return typer.Option(
        None, "--pul-dbm", metavar="DBM", show_default="the scenario's", help="device max UL power P^ul (dBm, -60..60)"
    )


def noise_figure_option(default_shown: str = "the scenario's"):
    return typer.Option(
        None,
        "--noise-figure-db",
        metavar="DB",
        show_default=default_shown,
        help="receiver noise figure (dB, 0..40), added to N0",
    )


def speed_option():
    return typer.Option(
        None,
        "--speed-kmh",
        metavar="KMH",
        show_default="the scenario's: independent blocks",
        help="device speed (km/h, 0..500): the channel ages between rounds (Jakes, ρ = J0(2π f_D Δt)) "
        "and rounds are planned on the previous round's pilots",
    )


def pilot_snr_option():
    return typer.Option(
        None,
        "--pilot-snr-db",
        metavar="DB",
        show_default="the scenario's: exact",
        help="pilot SNR (dB, -30..80): the channel estimate's error variance is 10^(-SNR/10)",
    )


def csi_planning_option():
    return choice_option(
        None,
        ("naive", "robust"),
        "--csi-planning",
        show_default="the scenario's: naive",
        help="naive: plan on the channel estimate as if exact; robust: over posterior channel draws",
    )


def pair_option(
    default: str = "smollm2-135m",
    help: str = "model pair: smollm2-135m, "
    "qwen2.5-coder-0.5b, smollm2-135m:qwen2.5-coder-0.5b, gemma3-270m:qwen2.5-coder-0.5b "
    "(Gemma Terms of Use), tiny, tiny-cross, "
    "DRAFT:TARGET (tokenizers may differ) or a local model directory",
):
    return typer.Option(default, "--pair", metavar="PAIR", help=help)


def json_option(help: str = "print one JSON object instead of tables"):
    return typer.Option(False, "--json", help=help)


def emit_json(doc, file, as_json: bool, what: str = "--result") -> bool:
    """Write ``doc`` to ``file`` (``--summary``, ``--result``: None for none) and, with ``--json``,
    print it; True when printed, so the verb prints its human-readable lines only otherwise."""
    import json
    from pathlib import Path

    from multispin.side_output import write_side_json

    if file is not None:  # side output: on a full disk, one line, and the outcome still printed below
        lost = write_side_json(doc, Path(file), what)
        if lost is not None:
            typer.echo(f"warning: {lost}", err=True)
    if as_json:
        typer.echo(json.dumps(doc))
    return as_json


def log_level_option():
    return typer.Option("warning", "--log-level", help="log messages at this level and above go to stderr")


def torch_device_option():
    return typer.Option(
        "cpu", "--device", help="where the models run: cpu, cuda (target in bfloat16), or auto (cuda when available)"
    )


def threads_option():
    return typer.Option(None, "--threads", min=1, metavar="INT", show_default="torch's", help="torch intra-op threads")


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record comes (Rich and pytest swap it)."""

    @property  # type: ignore[override]
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


class OneLineFormatter(logging.Formatter):
    """Each record as one console line: control characters of the message, its arguments and any
    exception text (a peer's words among them) are written as escapes (`multispin.safe_text`)."""

    def format(self, record: logging.LogRecord) -> str:
        from multispin.safe_text import escape_controls

        return escape_controls(super().format(record))


def setup_logging(level: str) -> None:
    """Records of the ``multispin`` loggers at ``level`` and above go to stderr, one line each.

    Only the package's logger is configured (not the root logger), so calling this from a test
    or a notebook leaves the host's logging alone."""
    logger = logging.getLogger("multispin")
    for h in [h for h in logger.handlers if isinstance(h, _StderrHandler)]:
        logger.removeHandler(h)
    handler = _StderrHandler()
    handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(getattr(logging, level.upper()))


def set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


PIPE_WIDTH = 160  # rich's default width off a terminal is 80 columns, which cuts a wide table's cells to "…"


def table_console():
    """A rich Console on stdout for wide tables: the terminal's width, or PIPE_WIDTH columns when
    stdout is a file or a pipe (`multispin demo > out.txt` stays readable)."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=PIPE_WIDTH)
