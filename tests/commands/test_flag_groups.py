"""`commands._flag_groups`: a group's flags appear in a verb's signature (and --help) where its
parameter stood, reach the verb as one dict, and its `before` hook runs first."""

from __future__ import annotations

from typing import Optional

import pytest
import typer
from typer.testing import CliRunner

from multispin.commands._flag_groups import RADIO, group, takes

SEEN: list = []
PAIR = group(
    "pair",
    before=lambda v: SEEN.append(("before", dict(v))),
    alpha=(int, typer.Option(1, "--alpha")),
    beta=(Optional[str], typer.Option(None, "--beta")),
)


def _app(verb) -> typer.Typer:
    app = typer.Typer()
    app.command()(verb)
    app.command("other")(lambda: None)  # two commands: the verb is a subcommand, as in multispin
    return app


def test_group_values_arrive_as_one_dict_after_the_hook():
    SEEN.clear()

    @takes(PAIR)
    def verb(first: int = typer.Option(0, "--first"), pair: dict = PAIR.slot, last: str = typer.Option("z")):
        SEEN.append(("verb", first, pair, last))

    r = CliRunner().invoke(_app(verb), ["verb", "--first", "3", "--alpha", "7", "--beta", "b", "--last", "y"])
    assert r.exit_code == 0, r.output
    assert SEEN == [("before", {"alpha": 7, "beta": "b"}), ("verb", 3, {"alpha": 7, "beta": "b"}, "y")]


def test_group_flags_are_listed_where_the_group_stands():
    @takes(PAIR)
    def verb(first: int = typer.Option(0, "--first"), pair: dict = PAIR.slot, last: str = typer.Option("z")):
        pass

    names = list(__import__("inspect").signature(verb).parameters)
    assert names == ["first", "alpha", "beta", "last"]
    help_text = CliRunner().invoke(_app(verb), ["verb", "--help"], terminal_width=200).output
    assert (
        help_text.index("--first") < help_text.index("--alpha") < help_text.index("--beta") < help_text.index("--last")
    )


def test_a_verb_without_the_group_parameter_is_refused():
    with pytest.raises(TypeError, match="no parameter for flag group"):

        @takes(PAIR)
        def verb(first: int = typer.Option(0)):
            pass


def test_every_verb_with_a_radio_flag_takes_the_whole_radio_group():
    """Negative control of the point of groups: a verb that declares --pdl-dbm by hand (outside
    RADIO) would drift from the others; every verb's --pdl-dbm comes from the one group.
    (`reproduce` takes --noise-figure-db alone, with its own default: the paper's figures fix the powers.)"""
    from multispin.cli import app

    flags = {f.name for f in RADIO.flags}
    for cmd in typer.main.get_command(app).commands.values():
        params = {p.name for p in cmd.params}
        if "p_dl_dbm" in params:
            assert flags <= params, f"{cmd.name}: part of the radio group only: {sorted(params & flags)}"
            help_of = {p.name: p.help for p in cmd.params}
            assert help_of["p_dl_dbm"] == RADIO.flags[0].default.help, cmd.name
