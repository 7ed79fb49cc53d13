"""A sweep axis that changes nothing says so: channel.planning without estimated channels is
refused before any drop runs, and any field whose values gave identical rows gets a note."""

from __future__ import annotations

import pytest

import multispin as ms
from multispin.errors import ConfigError
from multispin.experiments.sweep import unchanged_axes


def _row(policy, g, gamma, **values):
    return {"policy": policy, "goodput_tokens_per_s": g, "mean_draft_len": gamma, **values}


def test_a_field_whose_values_gave_identical_rows_gets_a_note():
    over = {"a": [1, 2], "b": [10, 20]}
    rows = [_row(p, 5.0 + b, 2.0, a=a, b=b) for p in ("adaptive", "all_dl") for a in (1, 2) for b in (10, 20)]
    assert unchanged_axes(rows, over) == [
        "a: every value gave the same goodput and γ̄ (the field changed nothing in these drops)"
    ]
    # negative control: one differing row at one value of b and a is no longer unchanged
    rows[0] = _row("adaptive", 99.0, 2.0, a=1, b=10)
    assert unchanged_axes(rows, over) == []


def test_planning_without_estimated_channels_is_refused_and_with_pilots_runs():
    sc = ms.scenario("paper-r1", devices=3, n_saa=20)
    with pytest.raises(ConfigError, match="channel.planning: changes nothing here"):
        ms.sweep(sc, over={"channel.planning": ["robust", "naive"]}, drops=2)
    # negative control: with pilot noise the same axis is accepted (points built, not run)
    from multispin.experiments.sweep import grid_points

    noisy = sc.override({"channel.pilot_snr_db": 10})
    assert len(grid_points(noisy, {"channel.planning": ["robust", "naive"]}, ["adaptive"])) == 2
