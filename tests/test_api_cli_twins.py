"""`ms.testbed` and `multispin testbed` are one behaviour: the same scenario file gives the same
run configuration (the file's device count and seed over the verb's defaults), and an out folder
holding a previous run is refused by both unless forced. The run itself is intercepted: what is
compared is the configuration each front door hands to `run_testbed`."""

from __future__ import annotations

from pathlib import Path

import pytest

import multispin as ms
from multispin.errors import ConfigError

K3 = "preset: paper-qwen\ndevices:\n  count: 3\nseed: 7\n"


@pytest.fixture
def captured(monkeypatch):
    """run_testbed replaced by a recorder of the configuration it would run."""
    import multispin.experiments.testbed as tb
    import multispin.models.placement as placement

    seen: list = []

    class Stop(Exception):
        pass

    def fake_run(config, pair=None, *args, **kwargs):
        seen.append(config)
        raise Stop

    monkeypatch.setattr(tb, "run_testbed", fake_run)
    monkeypatch.setattr(placement, "place_pair", lambda pair, *a, **k: pair)
    return seen, Stop


def test_the_api_takes_the_files_device_count_and_seed_as_the_cli_does(multispin, captured, tmp_path):
    seen, stop = captured
    Path("k3.yaml").write_text(K3)  # the fixture's fresh folder
    with pytest.raises(stop):
        multispin("testbed", "--scenario", "k3.yaml", "--pair", "tiny", "--out", "cli-out")
    with pytest.raises(stop):
        ms.testbed("k3.yaml", pair="tiny", out="api-out")
    cli, api = seen
    assert cli.devices == api.devices == 3 and cli.seed == api.seed == 7
    assert cli.model_dump(exclude={"out"}) == api.model_dump(exclude={"out"})
    # negative control: a flag still beats the file, in both
    with pytest.raises(stop):
        ms.testbed("k3.yaml", pair="tiny", devices=2)
    assert seen[-1].devices == 2


def test_an_out_folder_holding_a_run_is_refused_by_both_unless_forced(multispin, captured):
    seen, stop = captured
    Path("prev").mkdir()
    Path("prev/summary.json").write_text("{}")
    res = multispin("testbed", "--pair", "tiny", "--out", "prev")
    assert res.code == 2 and "--out: prev holds a previous `multispin testbed` run" in res.err
    with pytest.raises(ConfigError, match="holds a previous `multispin testbed` run"):
        ms.testbed(pair="tiny", out="prev")
    assert not seen
    with pytest.raises(stop):
        ms.testbed(pair="tiny", out="prev", force=True)
    assert len(seen) == 1
