"""The planner's hook for the optimiser's per-device rule: a plan with a bool array ``coupled``
puts those devices under the coupled rule for the round (fixed before drafting); the engine never
corrects them and the scenario clock charges them no correction airtime. Without the array every
device is standard, as before."""

from __future__ import annotations

import numpy as np
import pytest

import multispin.runtime.round.planner as planner_module
from multispin.errors import ConfigError
from multispin.models.synthetic import MarkovBatchedLM, MarkovSequenceLM, make_tables
from multispin.runtime.round.local import run_rounds
from multispin.runtime.round.planner import ScenarioPlanner, planned_rules
from multispin.runtime.round.roles import DraftDevice, VerifierServer
from multispin.speculative.codecs import make_codec
from multispin.speculative.warp import SamplingParams
from multispin.system.payload import WirePayload
from multispin.system.scenario import get_preset
from multispin.vocabulary import COUPLED, STANDARD

K, VOCAB = 6, 12
CODEC = make_codec("dense-fp32")
TARGET, DRAFT = make_tables(VOCAB, seed=2, scale=1.5, draft_noise=1.5)


class WithRules:
    """An optimiser plan with a ``coupled`` array added (what the three-way optimiser returns)."""

    def __init__(self, plan, coupled):
        self._plan, self.coupled = plan, coupled

    def __getattr__(self, name):
        return getattr(self._plan, name)


def _run(monkeypatch, flags):
    real = planner_module.plan
    if flags is not None:
        monkeypatch.setattr(
            planner_module, "plan", lambda inst, **kw: WithRules(real(inst, **kw), flags[: inst.num_devices])
        )
    sc = get_preset("paper-qwen").override({"devices.count": K, "seed": 3, "optimizer.n_saa": 100})
    planner = ScenarioPlanner(sc, range(K), WirePayload.from_codecs(CODEC, CODEC, VOCAB, 20), online=False)
    sampling = SamplingParams()
    server = VerifierServer(MarkovBatchedLM(TARGET), sampling, CODEC, CODEC, 1)
    devices = {k: DraftDevice(k, MarkovSequenceLM(DRAFT), sampling, CODEC, CODEC, 1, [k % VOCAB]) for k in range(K)}
    logs = run_rounds(server, devices, planner, 40, (), max_rounds=8)
    return logs, planner.clock.rounds


def test_a_plans_coupled_array_sets_each_devices_rule(monkeypatch):
    flags = np.array([True, False, True, False, True, False])
    logs, costs = _run(monkeypatch, flags)
    coupled = {d for d in range(K) if flags[d]}
    for d, log in logs.items():
        assert log and all(r.rule == (COUPLED if d in coupled else STANDARD) for r in log)
        if d in coupled:
            assert all(r.mode is None and r.correction_bits == 0 for r in log)
    assert any(r.rejection_position is not None for d in coupled for r in logs[d])  # coupled mismatches happened
    for cost in costs:  # never charged for a correction: not in R, no bits, no airtime
        assert not coupled & set(cost.rejected) and not coupled & set(cost.charged_bits)
        assert not coupled & set(cost.airtime_s)
    assert any(cost.charged_bits for cost in costs)  # the standard devices still were


def test_without_the_array_every_device_is_standard(monkeypatch):
    logs, _ = _run(monkeypatch, None)
    assert all(r.rule == STANDARD for log in logs.values() for r in log)


def test_a_coupled_array_of_the_wrong_length_is_refused():
    with pytest.raises(ConfigError, match="plan.coupled: need one flag per active device"):
        planned_rules(WithRules(None, np.array([True])), [0, 1])
