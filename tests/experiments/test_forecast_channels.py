"""The forecast given the run's channel (`forecast_goodput(channels="run")`): every replica plans
on the run's channel rounds 0 … horizon − 1, the fresh forecast never on any of them, and a bad
value is refused."""

from __future__ import annotations

import pytest

from multispin.experiments import forecast as forecast_module
from multispin.experiments.forecast import FORECAST_ROUND_OFFSET, forecast_goodput
from multispin.system.payload import WirePayload
from multispin.system.scenario_io import resolve_scenario

K, HORIZON, REPLICAS = 4, 5, 3


def _forecast(monkeypatch, channels: str) -> tuple[float, list[int]]:
    seen: list[int] = []
    plan = forecast_module.ScenarioPlanner.plan

    def spy(self, round_idx, active, caps=None):
        seen.append(round_idx)
        return plan(self, round_idx, active, caps)

    monkeypatch.setattr(forecast_module.ScenarioPlanner, "plan", spy)
    sc = resolve_scenario("paper-qwen").override({"devices.count": K, "devices.acceptance": [0.8] * K})
    wire = WirePayload(vocab_size=1000, ul_distribution_bits=16_000, dl_distribution_bits=16_000, gamma_max=8)
    out = forecast_goodput(
        sc,
        wire,
        "adaptive",
        rounds=HORIZON * REPLICAS,
        horizon=HORIZON,
        max_new_tokens=16,
        online=True,
        channels=channels,
    )
    return out["forecast_tokens_per_s"], seen


def test_run_channels_replay_the_run_rounds_in_every_replica(monkeypatch):
    given, rounds = _forecast(monkeypatch, "run")
    assert rounds == list(range(HORIZON)) * REPLICAS
    fresh, fresh_rounds = _forecast(monkeypatch, "fresh")
    assert min(fresh_rounds) >= FORECAST_ROUND_OFFSET and given != fresh


def test_an_unknown_channel_choice_is_refused(monkeypatch):
    with pytest.raises(ValueError, match="channels: 'fresh' or 'run'"):
        _forecast(monkeypatch, "mine")
