"""`multispin profiles`: produce the shipped acceptance files from runs, and check them against their inputs.

    multispin profiles spread --pair PAIR VERDICTS...        # the between-prompt spread file
    multispin profiles run-alpha --pair PAIR RUNS...         # the run-verdicts file (verdict-rate α)
    multispin profiles tokens-alpha --pair PAIR RUN_DIR...   # + the tokens-matched run α
    multispin profiles coupled-alpha --pair PAIR RUN_DIR...  # the coupled runs' α
    multispin profiles spread --check [--file FILE]          # recompute, exit 1 naming a stale field

docs/acceptance.md ("Producing the shipped files") says what each reads and writes.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from multispin.commands._app import app
from multispin.vocabulary import RUN_POLICIES, STANDARD, policy_verify

profiles_app = typer.Typer(
    no_args_is_help=True,
    help="Produce the shipped acceptance files (spread, run α) from runs, with provenance; --check recomputes them.",
)
app.add_typer(profiles_app, name="profiles")

_PAIR_HELP = "the model pair the runs are of (the file goes to its shipped profile folder)"
_OUT_HELP = "write into this folder instead of the package's profile folder"
_CHECK_HELP = "recompute the shipped file(s) from their inputs; exit 1 naming the first stale field"
_FILE_HELP = "with --check: the file to check (default: every shipped file of this kind)"


# the run policies whose runs a coupled-runs file is fitted on
_COUPLED_POLICIES = [p for p in RUN_POLICIES if policy_verify(p) != STANDARD]
_COUPLED_RUNS_HELP = f"testbed run folders of a policy that verifies coupled ({', '.join(_COUPLED_POLICIES)})"

# one option object per flag, shared by the three producers (typer reads them, never mutates them)
_PAIR = typer.Option(None, "--pair", metavar="PAIR", help=_PAIR_HELP)
_OUT = typer.Option(None, "--out", metavar="DIR", help=_OUT_HELP)
_CHECK = typer.Option(False, "--check", help=_CHECK_HELP)
_FILE = typer.Option(None, "--file", metavar="FILE", help=_FILE_HELP)


def _run_check(kind: str, files: list[Path] | None) -> None:
    """Print one line per checked file; exit 1 when any is stale."""
    from multispin.acceptance.recompute import stale_kind_label
    from multispin.experiments.profiles import check

    stale = 0
    for result in check(kind, files):
        if result.stale is None:
            how = (
                "legacy file (its runs not kept): each task's pooled verdict-rate α, jobs and trials recomputed "
                "from its parts; its tokens-matched run α checked against its re-run sample where it ships one"
                if result.legacy
                else "recomputed from its shipped inputs, every field"
            )
            typer.echo(f"current: {result.path} ({how})")
            continue
        stale += 1
        typer.echo(f"stale: {result.path}: {result.stale}{stale_kind_label(result.stale, kind)}", err=True)
    if stale:
        raise typer.Exit(1)


def _check_or_produce(
    verb: str, *, check: bool, files: list[Path] | None, pair: str | None, inputs: list[Path] | None, out: Path | None
) -> None:
    """What each producer verb does: with --check, check the shipped files of the kind it writes;
    otherwise produce its file from ``inputs``."""
    if check:
        _run_check(_CHECKED_KIND[verb], files)
    else:
        _produce(verb, pair, inputs, out)


# the kind of shipped file each producer verb writes (and its --check recomputes)
_CHECKED_KIND = {
    "spread": "spread",
    "run-alpha": "run-verdicts",
    "tokens-alpha": "run-verdicts",
    "coupled-alpha": "coupled-runs",
}


def _produce(kind: str, pair: str | None, inputs: list[Path] | None, out: Path | None) -> None:
    """Run the producer of ``kind`` and say what it wrote."""
    from multispin.errors import ConfigError
    from multispin.experiments import profiles

    if pair is None:
        raise ConfigError("--pair: required to produce a file (or give --check)")
    if not inputs:
        raise ConfigError(f"INPUTS: give the runs to produce the {kind} file from (or give --check)")
    producer = {
        "spread": profiles.produce_spread,
        "run-alpha": profiles.produce_run_alpha,
        "tokens-alpha": profiles.produce_tokens_alpha,
        "coupled-alpha": profiles.produce_coupled_alpha,
    }[kind]
    command = shlex.join(["multispin", "profiles", kind, "--pair", pair, *map(str, inputs)])
    written = producer(pair, inputs, command, out)
    for line in written.lines:
        typer.echo(line)
    typer.echo(f"wrote {written.path} (inputs: {written.path.parent / 'inputs' / written.path.name})")


@profiles_app.command("spread")
def spread(
    verdicts: list[Path] | None = typer.Argument(
        None, metavar="VERDICTS", help="verdicts files, one per task (tools/forecast_gap.py verdicts)"
    ),
    pair: str | None = _PAIR,
    out: Path | None = _OUT,
    check: bool = _CHECK,
    file: list[Path] | None = _FILE,
) -> None:
    """Fit each task's between-prompt spread of α and write spread-<draft>-<policy>.json."""
    _check_or_produce("spread", check=check, files=file, pair=pair, inputs=verdicts, out=out)


@profiles_app.command("run-alpha")
def run_alpha(
    runs: list[Path] | None = typer.Argument(
        None,
        metavar="RUNS",
        help="testbed run folders (summary.json + rounds.jsonl) or calibration files (tools/forecast_gap.py calibrate)",
    ),
    pair: str | None = _PAIR,
    out: Path | None = _OUT,
    check: bool = _CHECK,
    file: list[Path] | None = _FILE,
) -> None:
    """Pool testbed runs' verdicts per task and write run-verdicts-<draft>-<policy>.json (run folders:
    with the tokens-matched run α the planner uses)."""
    _check_or_produce("run-alpha", check=check, files=file, pair=pair, inputs=runs, out=out)


@profiles_app.command("tokens-alpha")
def tokens_alpha(
    runs: list[Path] | None = typer.Argument(None, metavar="RUN_DIR", help="testbed run folders"),
    pair: str | None = _PAIR,
    out: Path | None = _OUT,
    check: bool = _CHECK,
    file: list[Path] | None = _FILE,
) -> None:
    """Add the tokens-matched run α of the runs to the pair's run-verdicts file (written by run-alpha)."""
    _check_or_produce("tokens-alpha", check=check, files=file, pair=pair, inputs=runs, out=out)


@profiles_app.command("coupled-alpha")
def coupled_alpha(
    runs: list[Path] | None = typer.Argument(None, metavar="RUN_DIR", help=_COUPLED_RUNS_HELP),
    pair: str | None = _PAIR,
    out: Path | None = _OUT,
    check: bool = _CHECK,
    file: list[Path] | None = _FILE,
) -> None:
    """Fit the coupled tokens-matched α of the runs' coupled rounds and write coupled-runs-<draft>-<policy>.json
    (what the testbed's coupled devices plan on)."""
    _check_or_produce("coupled-alpha", check=check, files=file, pair=pair, inputs=runs, out=out)
