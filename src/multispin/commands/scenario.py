"""`multispin scenario`: the presets as files to start from, and the schema of a scenario file."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from multispin.commands._app import app

scenario_app = typer.Typer(no_args_is_help=True, help="Scenario presets and the scenario file format.")
app.add_typer(scenario_app, name="scenario")


@scenario_app.command("list")
def list_presets() -> None:
    """List the presets, one per line with its model pair and device count."""
    from multispin.system.scenario import preset_names
    from multispin.system.scenario_io import resolve_scenario

    for name in preset_names():
        sc = resolve_scenario(name)
        typer.echo(
            f"{name}\tK={sc.devices.count}\tP^dl={sc.radio.p_dl_dbm_value:.2f} dBm\t"
            f"acceptance {'assumed' if sc.tasks.assumed else 'measured'}"
        )


@scenario_app.command("show")
def show(
    name: str = typer.Argument(..., metavar="PRESET|FILE", help="a preset name or a scenario file"),
    plot: Path | None = typer.Option(
        None,
        "--plot",
        metavar="PNG",
        help="draw the drop on the path-loss curve and each device's UL/DL airtime of one correction",
    ),
) -> None:
    """Print a scenario as a YAML file to start from: `multispin scenario show paper-qwen > s.yaml`."""
    from multispin.system.scenario_io import resolve_scenario, scenario_yaml

    typer.echo(scenario_yaml(name), nl=False)
    if plot is not None:
        from multispin.experiments.scenario_plot import plot_scenario

        typer.echo(f"figure: {plot_scenario(resolve_scenario(name), name, plot)}", err=True)


@scenario_app.command("schema")
def schema() -> None:
    """Print the JSON Schema of a scenario file (every field, its unit and range)."""
    from multispin.system.scenario_io import scenario_schema

    typer.echo(json.dumps(scenario_schema(), indent=2))
