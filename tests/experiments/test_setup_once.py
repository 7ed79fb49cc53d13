"""One set-up per testbed run: the run's `World` (the scenario's drop and channel) is built once, by
`testbed_setup`, and handed down to the run's planner and to every planner of its forecast.

The counter wraps `World.__init__`; its negative control is the same run with the forecast not
handed the set-up's world, which the counter sees build two more (one per forecast call). The
planner's ``world=`` and the forecast's are checked to change nothing: the same plans and the same
forecast as a world built for them, and a world of another scenario refused in one line.
"""

from __future__ import annotations

import numpy as np
import pytest

from multispin.errors import ConfigError
from multispin.experiments import testbed as tb
from multispin.experiments.forecast import forecast_goodput
from multispin.runtime.round.planner import ScenarioPlanner
from multispin.speculative.codecs import make_codec
from multispin.system.channel import World
from multispin.system.payload import WirePayload
from multispin.system.scenario_io import resolve_scenario


@pytest.fixture
def worlds_built(monkeypatch) -> list[World]:
    """Every `World` constructed while the test runs."""
    built: list[World] = []
    init = World.__init__

    def counted(self, scenario):
        built.append(self)
        init(self, scenario)

    monkeypatch.setattr(World, "__init__", counted)
    return built


def _tiny_run():
    config = tb.TestbedConfig.make(pair="tiny", devices=2, rounds=3, max_new_tokens=16, seed=3, runner="thread")
    return tb.run_testbed(config)


@pytest.mark.integration
def test_a_testbed_run_builds_its_world_once(worlds_built):
    result = _tiny_run()
    assert result.summary.forecast is not None  # the forecast ran (its planners are in the count)
    assert len(worlds_built) == 1 and worlds_built[0] is result.setup.world


@pytest.mark.integration
def test_the_counter_sees_a_forecast_that_builds_its_own(worlds_built, monkeypatch):
    """Negative control: the forecast called without the set-up's world builds one per call."""
    forecast = tb.forecast_goodput

    def without_world(*args, world=None, **kw):
        return forecast(*args, **kw)

    monkeypatch.setattr(tb, "forecast_goodput", without_world)
    _tiny_run()
    assert len(worlds_built) == 3


def _scenario(seed: int = 0):
    return resolve_scenario("paper-qwen").override({"devices.count": 4, "seed": seed, "optimizer.n_saa": 40})


def _wire(scenario) -> WirePayload:
    codec = make_codec("sparse:v_eff=1024,q=16")
    return WirePayload.from_codecs(codec, codec, 151_665, scenario.optimizer.gamma_max)


def test_a_planner_given_a_world_plans_as_one_that_builds_it(worlds_built):
    sc = _scenario()
    world = World(sc)
    given = ScenarioPlanner(sc, range(4), _wire(sc), world=world)
    own = ScenarioPlanner(sc, range(4), _wire(sc))
    assert given.world is world and own.world is not world and len(worlds_built) == 2
    for r in range(3):
        a, b = given.plan(r, range(4)), own.plan(r, range(4))
        assert np.array_equal(a.proactive.draft_len, b.proactive.draft_len)
        assert np.array_equal(a.instance.gain_ul, b.instance.gain_ul)


def test_a_world_of_another_scenario_is_refused():
    sc = _scenario()
    with pytest.raises(ConfigError, match="^world: built from another scenario"):
        ScenarioPlanner(sc, range(4), _wire(sc), world=World(_scenario(seed=1)))


def test_the_forecast_on_a_given_world_is_the_forecast(worlds_built):
    sc = _scenario()
    kw = {"rounds": 6, "horizon": 3, "max_new_tokens": 16, "online": True, "seed": 2}
    own = forecast_goodput(sc, _wire(sc), "adaptive", **kw)
    assert len(worlds_built) == 1  # one for every replica's planner
    given = forecast_goodput(sc, _wire(sc), "adaptive", world=World(sc), **kw)
    assert len(worlds_built) == 2 and given == own
