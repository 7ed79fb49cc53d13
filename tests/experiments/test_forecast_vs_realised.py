"""The planner's model predicts the running system: realised / forecast goodput on the tiny pair
over several seeds, with short prompts (a 10-token budget, so jobs end every few rounds and the
engine's clip matters). The budget-blind forecast (prompts that never end, no online estimator)
is the negative control: the same check must reject it."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from multispin.acceptance.shipped import shipped_shrunk_alpha
from multispin.experiments.acceptance import MeasureConfig, measure
from multispin.experiments.testbed import TestbedConfig, run_testbed
from multispin.system.scenario_io import resolve_scenario

# real sockets, processes or models: `make test-fast` leaves these out
pytestmark = pytest.mark.integration

SEEDS = range(5)
DEVICES, ROUNDS, BUDGET = 8, 20, 10


def _interval(ratios) -> tuple[float, float]:
    x = np.asarray(ratios)
    half = stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size)
    return x.mean() - half, x.mean() + half


@pytest.mark.slow
def test_forecast_matches_the_realised_goodput_and_the_budget_blind_one_does_not(tmp_path):
    # the draft's α, measured apart from the runs (other prompts, other seed) as a profile would be
    profile = measure(
        MeasureConfig(
            pair="tiny",
            drafts=["close"],
            task="chat",
            prompts=48,
            draft_len=3,
            max_new_tokens=BUDGET,
            temperature=1.0,
            seed=99,
        )
    )["close"]
    alpha = shipped_shrunk_alpha(profile)
    scenario = resolve_scenario("paper-qwen").override(
        {"devices.count": DEVICES, "devices.acceptance": [alpha] * DEVICES}
    )
    path = tmp_path / "scenario.json"
    path.write_text(scenario.model_dump_json())
    model, blind = [], []
    for seed in SEEDS:
        cfg = TestbedConfig.make(
            pair="tiny",
            devices=DEVICES,
            rounds=ROUNDS,
            max_new_tokens=BUDGET,
            policy="adaptive",
            runner="thread",
            scenario=str(path),
            seed=seed,
            drafts=["close"],
            tasks="chat",
        )
        s = run_testbed(cfg).summary
        assert s.forecast is not None
        model.append(s.goodput_tokens_per_s / s.forecast.tokens_per_s)
        blind.append(s.goodput_tokens_per_s / s.forecast.budget_blind_tokens_per_s)
    lo, hi = _interval(model)
    assert lo <= 1.0 <= hi and 0.9 <= lo and hi <= 1.1, (model, lo, hi)
    lo_b, hi_b = _interval(blind)
    assert not lo_b <= 1.0 <= hi_b, (blind, lo_b, hi_b)
