"""`--plot PNG` on `generate` and `scenario show` (the pictures of the docs' example pages): the
command still prints what it printed, writes the PNG and names it on stderr, and the picture is
drawn from what the run or the scenario says (the same JSON redraws the same file; the drawn
numbers are the model's)."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest

from multispin.experiments.generate_plot import plot_generate, tokens_written
from multispin.experiments.scenario_plot import correction_airtime_s
from multispin.system.channel import World
from multispin.system.radio import latency_s
from multispin.system.scenario_io import resolve_scenario

GENERATE = ("generate", "--pair", "tiny", "--devices", "3", "--draft-len", "4", "--max-new-tokens", "12", "--seed", "0")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One tiny `generate --json --plot` run through the real entry point: (document, png)."""
    from multispin import cli

    png = tmp_path_factory.mktemp("gen") / "generate.png"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main([*GENERATE, "--json", "--plot", str(png)])
        except SystemExit as exc:
            assert not exc.code, err.getvalue()
    assert f"figure: {png}" in err.getvalue()
    return json.loads(out.getvalue()), png


def test_generate_plot_is_drawn_from_the_json_document(tiny_run, tmp_path):
    doc, png = tiny_run
    assert png.stat().st_size > 10_000
    # a saved run.json draws the same file (no timestamps in the PNG)...
    assert plot_generate(doc, tmp_path / "again.png").read_bytes() == png.read_bytes()
    # ...and a run that differs draws another (the negative control: the bytes do depend on the data)
    other = json.loads(json.dumps(doc))
    other["devices"][0]["accepted_counts"][0] += 1
    assert plot_generate(other, tmp_path / "other.png").read_bytes() != png.read_bytes()


def test_tokens_written_end_at_the_budget_and_add_accepted_plus_one(tiny_run):
    doc, _ = tiny_run
    for dev in doc["devices"]:
        written = tokens_written(dev)
        assert written[-1] == len(dev["tokens"]) == 12
        assert np.array_equal(np.diff(written[:-1]), np.asarray(dev["accepted_counts"][1:-1]) + 1)


def test_generate_tables_are_unchanged_by_plot(multispin, tmp_path):
    plain, drawn = multispin(*GENERATE), multispin(*GENERATE, "--plot", str(tmp_path / "g.png"))
    assert plain.code == drawn.code == 0 and "figure:" in drawn.err

    def strip(out):  # the title line has the wall time
        return [ln for ln in out.splitlines() if "multispin generate:" not in ln]

    assert strip(plain.out) == strip(drawn.out)


def test_scenario_show_plot_prints_the_same_yaml_and_draws(multispin, tmp_path):
    png = tmp_path / "s.png"
    plain, drawn = (
        multispin("scenario", "show", "paper-qwen"),
        multispin("scenario", "show", "paper-qwen", "--plot", str(png)),
    )
    assert plain.code == drawn.code == 0 and plain.out == drawn.out
    assert f"figure: {png}" in drawn.err and png.stat().st_size > 10_000
    bad = multispin("scenario", "show", "nothere", "--plot", str(tmp_path / "x.png"))
    assert bad.code == 2 and bad.err.count("\n") == 1 and not (tmp_path / "x.png").exists()


def test_scenario_airtimes_are_the_models_and_dl_is_faster_only_with_more_power():
    sc = resolve_scenario("paper-qwen")
    world = World(sc)
    t = correction_airtime_s(world, rounds=30)
    radio = world.radio_params()
    ch = world.channel.draw(7)
    assert t["UL"][7] == pytest.approx(
        latency_s(sc.payload.payload_bits, radio.bandwidth_hz, radio.p_ul_w, ch.gain_ul, radio.noise_psd_w_per_hz)
    )
    # the paper's P^dl (16 dBm) > P^ul (10 dBm) on reciprocal channels: DL is faster for every device
    # in every round; with P^dl below P^ul it is slower (the negative control)
    assert np.all(t["DL"] < t["UL"])
    low = correction_airtime_s(World(sc.override({"radio.p_dl_dbm": 4.0})), rounds=30)
    assert np.all(low["DL"] > low["UL"])
    # farther devices take longer (median over the rounds, against the drop's distances)
    from scipy.stats import spearmanr

    assert spearmanr(world.drop.distance_m, np.median(t["UL"], 0)).statistic > 0.8
