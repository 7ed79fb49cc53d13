"""The optimiser in the running loop: plans every round, charges the scenario's clock, learns
acceptance online, and agrees with the analytic model and the Monte Carlo simulator."""

from __future__ import annotations

import numpy as np
import pytest

from multispin.errors import ConfigError
from multispin.experiments.predictions import model_predictions
from multispin.models.synthetic import MarkovBatchedLM, MarkovSequenceLM, MarkovTable, make_tables
from multispin.runtime.round.acceptance_estimate import AcceptanceEstimator
from multispin.runtime.round.local import run_rounds
from multispin.runtime.round.planner import ScenarioPlanner
from multispin.runtime.round.roles import DraftDevice, VerifierServer
from multispin.speculative.codecs import make_codec
from multispin.speculative.warp import SamplingParams, warp
from multispin.system.payload import WirePayload
from multispin.system.scenario import get_preset, scenario_from_dict

SAMPLING = SamplingParams()
CODEC = make_codec("dense-fp32")
WIRE = WirePayload.from_codecs(CODEC, CODEC, 12, 20)  # what _run's devices and server move


def _iid_pair(noise: float, seed: int):
    """Context-free tables: every position is accepted i.i.d. with α = Σ min(p, q)."""
    target, draft = make_tables(12, seed=seed, scale=1.5, draft_noise=noise)
    flat = [MarkovTable(np.broadcast_to(t.logits[0, 0], t.logits.shape).copy()) for t in (target, draft)]
    alpha = float(np.minimum(warp(flat[0].logits[0, 0], SAMPLING), warp(flat[1].logits[0, 0], SAMPLING)).sum())
    return flat[0], flat[1], alpha


def _scenario(alphas, seed=0, p_dl_dbm=16.0):
    base = get_preset("paper-qwen").model_dump()
    base["devices"]["count"] = len(alphas)
    base["devices"]["acceptance"] = list(alphas)
    base["radio"]["p_dl_dbm"] = p_dl_dbm
    base["optimizer"]["n_saa"] = 300
    base["seed"] = seed
    return scenario_from_dict(base)


def _run(planner: ScenarioPlanner, pairs, rounds: int, seed: int = 0):
    codec = CODEC
    target = pairs[0][0]
    server = VerifierServer(MarkovBatchedLM(target), SAMPLING, codec, codec, seed)
    devices = {
        k: DraftDevice(k, MarkovSequenceLM(pairs[k][1]), SAMPLING, codec, codec, seed, [0]) for k in range(len(pairs))
    }
    run_rounds(server, devices, planner, max_new_tokens=100_000, eos_ids=(), max_rounds=rounds)
    return devices


def test_estimator_converges_and_ignores_gamma_zero():
    est = AcceptanceEstimator(np.array([0.5]), prior_weight=4)
    rng = np.random.default_rng(0)
    for _ in range(3000):
        acc = 0
        while acc < 5 and rng.random() < 0.85:
            acc += 1
        est.update(0, 5, acc, acc < 5)
        est.update(0, 0, 0, False)
    assert abs(est.alpha[0] - 0.85) < 0.01


def test_planner_rejects_bad_policy_and_device_count():
    sc = _scenario([0.8, 0.8])
    with pytest.raises(ConfigError, match="policy"):
        ScenarioPlanner(sc, [0, 1], WIRE, policy="greedy-ul")
    with pytest.raises(ConfigError, match="devices"):
        ScenarioPlanner(sc, [0, 1, 2], WIRE)


@pytest.mark.parametrize("policy", ["adaptive", "all_ul", "all_dl", "random"])
def test_each_policy_runs_and_charges_the_clock(policy):
    target, draft, alpha = _iid_pair(0.8, 1)
    sc = _scenario([alpha] * 4)
    planner = ScenarioPlanner(sc, range(4), WIRE, policy=policy)
    _run(planner, [(target, draft)] * 4, rounds=6)
    assert len(planner.clock.rounds) == 6
    for r in planner.clock.rounds:
        assert r.comp_latency_s > 0 and r.comm_latency_s >= 0
        assert (r.comm_latency_s > 0) == bool(r.modes)
        if policy == "all_ul":
            assert set(r.modes.values()) <= {"ul"}
        if policy == "all_dl":
            assert set(r.modes.values()) <= {"dl"}
    assert planner.clock.goodput_tokens_per_s > 0


def test_running_system_agrees_with_analytic_and_montecarlo():
    """Virtual-clock goodput of real rounds (real tokens, i.i.d. drafts by construction) within
    5% of the analytic model and the Monte Carlo simulator on the same scenario."""
    # One context-free target for the batch; each device its own context-free draft.
    target, _, _ = _iid_pair(0.5, seed=10)
    pairs = []
    for k, noise in enumerate([0.5, 0.8, 1.1, 0.6, 0.9, 1.3]):
        rng = np.random.default_rng(100 + k)
        draft = MarkovTable((target.logits + rng.normal(size=target.logits.shape[-1]) * noise).astype(np.float32))
        pairs.append((target, draft))
    alphas = [
        float(np.minimum(warp(target.logits[0, 0], SAMPLING), warp(d.logits[0, 0], SAMPLING)).sum()) for _, d in pairs
    ]
    sc = _scenario(alphas, seed=3)
    planner = ScenarioPlanner(sc, range(len(pairs)), WIRE, policy="adaptive")
    _run(planner, pairs, rounds=150, seed=3)
    pred = model_predictions(planner, mc_rounds=400, seed=3)
    measured = planner.clock.goodput_tokens_per_s
    assert abs(measured / pred["analytic_tokens_per_s"] - 1) < 0.05, (measured, pred)
    assert abs(measured / pred["montecarlo_tokens_per_s"] - 1) < 0.05, (measured, pred)
    est = planner.estimator.alpha
    assert np.all(np.abs(est - np.array(alphas)) < 0.08)


def test_agreement_check_detects_a_wrong_acceptance_profile():
    """Negative control: the same comparison fails when the model's α is off by 0.15."""
    target, draft, alpha = _iid_pair(0.9, 5)
    sc = _scenario([max(alpha - 0.15, 0.05)] * 4, seed=4)
    planner = ScenarioPlanner(sc, range(4), WIRE, policy="adaptive", online=False)
    _run(planner, [(target, draft)] * 4, rounds=120, seed=4)
    pred = model_predictions(planner, mc_rounds=300, seed=4)
    assert abs(planner.clock.goodput_tokens_per_s / pred["analytic_tokens_per_s"] - 1) > 0.05
