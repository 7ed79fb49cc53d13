"""The typed run summary and the one set-up, without running anything: summary.json read back
(`RunSummary.from_json`) writes itself again key for key (the recorded files of
test_run_summary_golden.py), a file that lacks a key is refused naming it, and the set-up
resolves each device's α before it builds the scenario (no world), the one the planner sees, with
the server set to move the bits the planner charges."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest

from multispin import __version__
from multispin.experiments import testbed as tb
from multispin.experiments.run_summary import RunSummary
from multispin.experiments.testbed import TestbedConfig, server_config
from multispin.models.registry import resolve_pair
from multispin.speculative.codecs import make_codec
from multispin.system import channel
from multispin.system.payload import WirePayload
from multispin.system.scenario import Scenario

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "run_summary"
SUMMARIES = sorted(GOLDEN.glob("testbed_summary-*.json"))


@pytest.mark.parametrize("path", SUMMARIES, ids=[p.stem for p in SUMMARIES])
def test_a_summary_read_back_writes_the_same_file(path):
    doc = {**json.loads(path.read_text()), "multispin_version": __version__}  # recorded masked
    again = RunSummary.from_json(doc).to_json()
    assert list(again) == list(doc) and again == doc
    # without its texts: the same keys less "texts" (what `multispin testbed --json` prints)
    short = RunSummary.from_json(doc).to_json(texts=False)
    assert list(short) == [k for k in doc if k != "texts"]


def test_the_summary_parts_are_the_files_values():
    doc = json.loads((GOLDEN / "testbed_summary-adaptive.json").read_text())
    s = RunSummary.from_json(doc)
    assert s.goodput_tokens_per_s == doc["goodput_tokens_per_s"] and s.figures.rounds == doc["rounds"]
    assert s.forecast is not None and s.forecast.one_run_low == doc["forecast_one_run_low"]
    assert s.forecast.estimate_gap.sd == doc["forecast_estimate_minus_prior_sd"]
    assert s.conditioned is not None and s.conditioned.analytic_t_comm_s == doc["conditioned_analytic_t_comm_s"]
    assert s.bits.charged == doc["bits_charged_per_token"]
    assert s.acceptance.tasks_by_device() == doc["tasks"] and s.seed == doc["config"]["seed"]
    assert s.integrity.records_match and s.texts[0] == doc["texts"]["0"]
    user = RunSummary.from_json(json.loads((GOLDEN / "testbed_summary-user-policy.json").read_text()))
    assert user.forecast is None and user.conditioned is None and user.forecast_tokens_per_s is None


def test_a_changed_value_is_written_changed_and_a_missing_key_is_named():
    """Negative controls: the round trip carries what the file says (not a recorded copy), and a
    file without one of its keys is refused in one line naming the key."""
    doc = json.loads((GOLDEN / "testbed_summary-adaptive.json").read_text())
    doc["service"]["jain_index"], doc["forecast_t_comm_s"] = 0.5, 1.25
    again = RunSummary.from_json(doc).to_json()
    assert again["service"]["jain_index"] == 0.5 and again["forecast_t_comm_s"] == 1.25
    del doc["bits_up_per_token"]
    with pytest.raises(ValueError, match="lacks 'bits_up_per_token'"):
        RunSummary.from_json(doc)
    with pytest.raises(ValueError, match="schema"):
        RunSummary.from_json({**doc, "schema": "multispin.demo-summary"})


def _profile(tmp_path, task: str, alpha: float) -> str:
    path = tmp_path / f"acc-{task}.json"
    path.write_text(json.dumps({"pair": "tiny", "vocab_size": 256, "task": task, "tasks": {task: alpha}}))
    return str(path)


@pytest.mark.parametrize("profile", [False, True], ids=["scenario-alpha", "user-profile"])
def test_the_set_up_resolves_alpha_first_and_builds_one_world(tmp_path, profile, monkeypatch):
    """α is resolved from the drop alone (no world for a scenario about to change); then the one
    world of the run is built, from the scenario with that α, for the planners to share."""
    pair = resolve_pair("tiny")
    given = [_profile(tmp_path, "chat", 0.61)] if profile else None
    config = TestbedConfig.make(pair="tiny", devices=4, tasks="mixed", acceptance_profile=given)
    calls = {"alpha patched": 0}
    override = Scenario.override

    def counted(self, changes, *args, **kwargs):
        calls["alpha patched"] += "devices.acceptance" in changes
        return override(self, changes, *args, **kwargs)

    built_from = []
    init = channel.World.__init__

    def recorded(self, scenario):
        built_from.append(scenario)
        init(self, scenario)

    with monkeypatch.context() as mp:
        mp.setattr(Scenario, "override", counted)
        mp.setattr(channel.World, "__init__", recorded)
        setup = tb.testbed_setup(config, pair)
    # the scenario takes the resolved α once (the tiny pair ships no α: the scenario's own stand),
    # and its one world (the planners') is of that scenario and sees what the set-up says
    assert calls["alpha patched"] == (1 if profile else 0)
    assert len(built_from) == 1 and built_from[0] is setup.scenario is setup.world.scenario
    assert np.asarray(setup.world.drop.alpha).tolist() == setup.alpha_prior
    if profile:  # the chat devices plan with the profile's α, the code devices with the scenario's
        chat = [a for a, t in zip(setup.alpha_prior, setup.tasks) if t == "chat"]
        assert chat and set(chat) == {0.61} and not setup.measured
    assert setup.describe()["alpha_prior"] == setup.alpha_prior


def test_the_server_moves_the_bits_the_planner_charges():
    """The server builds its wire from the codecs and γ_max of `server_config` at the pair's
    vocabulary; that is the set-up's payload. Negative control: another codec is another wire."""
    pair = resolve_pair("tiny")
    config = TestbedConfig.make(pair="tiny", devices=2, dl_codec="sparse:v_eff=16,q=16", top_k=0)
    setup = tb.testbed_setup(config, pair)
    server = server_config(config, setup)

    def wire(ul: str, dl: str) -> WirePayload:  # as runtime/net/server.py computes it
        return WirePayload.from_codecs(make_codec(ul), make_codec(dl), pair.vocab_size, server.gamma_max)

    assert wire(server.ul_codec, server.dl_codec) == setup.choice.wire
    assert wire(server.ul_codec, "dense-fp16") != setup.choice.wire


@pytest.mark.integration
def test_the_run_summary_pages_command_and_python_run(multispin, capsys):
    """docs/run-summary.md as written: its testbed run, then its Python reading the file back."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "run-summary.md").read_text()
    (command,) = [ln for ln in page.split("```bash\n", 1)[1].split("```", 1)[0].splitlines() if ln]
    res = multispin(*shlex.split(command)[1:])
    assert res.code == 0, res.err[-800:]
    exec(page.split("```python\n", 1)[1].split("```", 1)[0], {})
    printed = capsys.readouterr().out
    assert printed.startswith("adaptive: ") and "texts ok True" in printed
