"""Under mobility the forecast ages each replica's channel over each model round's duration on the
true channel (T_comp + E[T_comm] of the round as scored), as the run ages it over each round's
charged latency, not over the duration the planner expected when it planned."""

from __future__ import annotations

import numpy as np

from multispin.experiments import forecast as forecast_module
from multispin.experiments.forecast import forecast_goodput
from multispin.system.channel_process import ChannelProcess
from multispin.system.payload import WirePayload
from multispin.system.scenario_io import resolve_scenario

K, HORIZON, REPLICAS = 3, 6, 2


def _ageing(monkeypatch) -> tuple[list[float], list[float], list[float]]:
    """(the Δt each round's channel step aged over, each scored round's T_comp + E[T_comm], each
    plan's expected duration), over a small naive-planning forecast at 3 km/h."""
    aged: list[float] = []
    scored: list[float] = []
    planned: list[float] = []
    step, score, plan = ChannelProcess.step, forecast_module.analytic_round, forecast_module.ScenarioPlanner.plan

    def step_spy(self, prev, round_index, dt_s=0.0):
        if prev is not None:  # a replica's first round has no block before it
            aged.append(dt_s)
        return step(self, prev, round_index, dt_s)

    def score_spy(*args, **kwargs):
        n, tc, tm = score(*args, **kwargs)
        scored.append(tc + tm)
        return n, tc, tm

    def plan_spy(self, round_idx, active, caps=None):
        rp = plan(self, round_idx, active, caps)
        planned.append(float(rp.proactive.goodput.t_comp_s + rp.proactive.goodput.e_t_comm_s))
        return rp

    monkeypatch.setattr(ChannelProcess, "step", step_spy)
    monkeypatch.setattr(forecast_module, "analytic_round", score_spy)
    monkeypatch.setattr(forecast_module.ScenarioPlanner, "plan", plan_spy)
    sc = resolve_scenario("paper-qwen").override(
        {"devices.count": K, "devices.acceptance": [0.8] * K, "channel.speed_kmh": 3.0, "channel.pilot_snr_db": 10.0}
    )
    wire = WirePayload(vocab_size=1000, ul_distribution_bits=16_000, dl_distribution_bits=16_000, gamma_max=8)
    forecast_goodput(sc, wire, "adaptive", rounds=HORIZON * REPLICAS, horizon=HORIZON, max_new_tokens=16, online=True)
    return aged, scored, planned


def _after_each_round(durations: list[float]) -> list[float]:
    """The durations a replica's rounds 1 … H − 1 would age over: each replica's, less its last."""
    return [d for r in range(REPLICAS) for d in durations[r * HORIZON : (r + 1) * HORIZON - 1]]


def test_the_forecast_ages_the_channel_over_each_scored_round(monkeypatch):
    aged, scored, planned = _ageing(monkeypatch)
    assert len(aged) == REPLICAS * (HORIZON - 1)
    np.testing.assert_allclose(aged, _after_each_round(scored), rtol=1e-12)
    # the negative control: the planned durations are another sequence, which the check tells
    # apart (ageing over them, as the forecast did before, fails it)
    assert not np.allclose(aged, _after_each_round(planned), rtol=1e-3)
