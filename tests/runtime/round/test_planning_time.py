"""Planning time on the clock: measured every round, recorded in rounds.jsonl, charged to the
round only with `charge_planning` (the testbed's --clock wall), on a scripted clock."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_planner import WIRE, _iid_pair, _run, _scenario

from multispin.errors import ConfigError
from multispin.runtime.round import planner as planner_module
from multispin.runtime.round.planner import ScenarioPlanner


class _ScriptedClock:
    """thread_time and perf_counter that advance only inside `ScenarioPlanner.plan`: every
    reading adds `step_s` to the CPU clock and twice that to the wall clock."""

    def __init__(self, step_s: float):
        self.step_s, self.cpu, self.wall = step_s, 0.0, 0.0

    def thread_time(self) -> float:
        self.cpu += self.step_s
        return self.cpu

    def perf_counter(self) -> float:
        self.wall += 2 * self.step_s
        return self.wall


def _planned_run(monkeypatch, charge: bool, step_s: float = 0.125, rounds: int = 5):
    monkeypatch.setattr(planner_module, "time", _ScriptedClock(step_s))
    target, draft, alpha = _iid_pair(0.8, 1)
    planner = ScenarioPlanner(_scenario([alpha] * 3), range(3), WIRE, charge_planning=charge)
    _run(planner, [(target, draft)] * 3, rounds=rounds)
    return planner


@pytest.mark.parametrize("charge", [False, True])
def test_planning_time_is_recorded_and_charged_only_when_asked(monkeypatch, charge):
    planner = _planned_run(monkeypatch, charge)
    assert len(planner.clock.rounds) == 5
    for r in planner.clock.rounds:
        # one reading before and one after the plan: a scripted step of CPU, two of wall
        assert r.planning_cpu_s == pytest.approx(0.125) and r.planning_wall_s == pytest.approx(0.25)
        assert r.planning_charged_s == (pytest.approx(0.125) if charge else 0.0)
        assert r.latency_s == pytest.approx(r.comp_latency_s + r.comm_latency_s + (0.125 if charge else 0.0))
    assert planner.clock.virtual_time_s == pytest.approx(
        sum(r.comp_latency_s + r.comm_latency_s for r in planner.clock.rounds) + (5 * 0.125 if charge else 0.0)
    )


def test_charged_planning_lowers_the_goodput_by_exactly_its_time(monkeypatch):
    """Same seeds, same rounds and tokens: charging adds the planning time to every round and nothing else."""
    free, charged = _planned_run(monkeypatch, False), _planned_run(monkeypatch, True)
    assert [r.tokens for r in free.clock.rounds] == [r.tokens for r in charged.clock.rounds]
    tokens = sum(r.tokens for r in free.clock.rounds)
    assert charged.clock.goodput_tokens_per_s == pytest.approx(tokens / (free.clock.virtual_time_s + 5 * 0.125))
    assert charged.clock.goodput_tokens_per_s < free.clock.goodput_tokens_per_s


def test_rounds_jsonl_rows_carry_the_planning_time(monkeypatch, tmp_path):
    from multispin.runtime.net.round_sink import RoundSink
    from multispin.runtime.wire.records import RoundEvent

    planner = _planned_run(monkeypatch, True, rounds=2)
    sink = RoundSink(False, tmp_path / "rounds.jsonl", None)
    sink(
        RoundEvent(
            round=0,
            gammas={},
            records={},
            rejected=[],
            modes={},
            dropped={},
            verify_s=0.0,
            server_correction_s=0.0,
            draft_compute_s={},
            device_correction_s={},
            payload_bytes={},
            wire_bytes_up={},
            wire_bytes_down={},
            round_wall_s=0.0,
            cost=planner.clock.rounds[0],
        )
    )
    sink.close()
    row = json.loads((tmp_path / "rounds.jsonl").read_text().splitlines()[0])
    assert row["planning_cpu_s"] == pytest.approx(0.125) and row["planning_wall_s"] == pytest.approx(0.25)
    assert row["planning_charged_s"] == pytest.approx(0.125)


def test_the_planner_plans_with_the_fast_search_by_default():
    target, draft, alpha = _iid_pair(0.8, 1)
    sc = _scenario([alpha] * 3)
    planner = ScenarioPlanner(sc, range(3), WIRE)
    assert planner.plan(0, range(3)).proactive.policy == "fast"
    assert ScenarioPlanner(sc, range(3), WIRE, draft_policy="greedy").plan(0, range(3)).proactive.policy == "greedy"
    with pytest.raises(ConfigError, match="draft_policy"):
        ScenarioPlanner(sc, range(3), WIRE, draft_policy="slow")
    assert np.isfinite(planner.plan(1, range(3)).planning_cpu_s)
