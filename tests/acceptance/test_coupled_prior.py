"""What a run's coupled devices plan on (`shipped.coupled_prior`, `experiments.testbed.prior_alpha`)
and how the scenario carries it (`devices.acceptance_coupled`, `DeviceDrop.coupled_ratio`)."""

from __future__ import annotations

import numpy as np
import pytest

from multispin.acceptance import kinds
from multispin.acceptance.shipped import (
    coupled_prior,
    device_alpha,
    shipped_coupled_alpha,
    teacher_forced_coupled_ratio,
)
from multispin.experiments.testbed import prior_alpha
from multispin.runtime.round.planner import ScenarioPlanner
from multispin.speculative.codecs import make_codec
from multispin.system import World, get_preset
from multispin.system.coupled_alpha import task_ratio
from multispin.system.payload import WirePayload

T1 = {"temperature": 1.0, "top_k": 1024, "top_p": 1.0}
GREEDY = {"temperature": 0.0, "top_k": 0, "top_p": 1.0}
T07 = {"temperature": 0.7, "top_k": 1024, "top_p": 1.0}


def test_the_prior_comes_from_the_coupled_runs_else_the_profiles_ratio_else_none():
    pair = "smollm2-135m"
    planned = device_alpha(pair, "q5g64", "chat", T1, kind="planned")
    found = coupled_prior(pair, "q5g64", "chat", T1, planned)
    in_runs = shipped_coupled_alpha(pair, "q5g64", "chat", T1)
    if in_runs is not None:
        assert found == (in_runs, kinds.COUPLED_RUNS)
    else:
        assert found == (planned * teacher_forced_coupled_ratio(pair, "q5g64", "chat", T1), kinds.COUPLED_SCALED)
    # q4g64 has its own measured ratio at T = 1 (no coupled runs): the planned α scaled by it
    ratio = teacher_forced_coupled_ratio(pair, "q4g64", "chat", T1)
    assert ratio is not None and 0.8 < ratio < 1 and shipped_coupled_alpha(pair, "q4g64", "chat", T1) is None
    assert coupled_prior(pair, "q4g64", "chat", T1, 0.7) == (0.7 * ratio, kinds.COUPLED_SCALED)
    # under a sampling policy nothing was measured for: nothing
    assert coupled_prior(pair, "q5g64", "chat", T07, 0.7) is None
    # under greedy decoding both rules test arg-max agreement: the ratio is 1, not measured
    assert teacher_forced_coupled_ratio(pair, "q4g64", "code", GREEDY) == 1.0
    assert coupled_prior("tiny", "close", "chat", T1, 0.8) is None


def test_a_run_resolves_each_devices_coupled_prior_and_labels_it():
    scenario = get_preset("smollm2-cpu").override({"devices.count": 3})
    prior = prior_alpha(scenario, "smollm2-135m", ["q5g64", "q4g64", "q5g64"], ["chat", "chat", "code"], T1)
    assert prior.coupled_kinds == [kinds.COUPLED_RUNS, kinds.COUPLED_SCALED, kinds.COUPLED_RUNS]
    ratio = teacher_forced_coupled_ratio("smollm2-135m", "q4g64", "chat", T1)
    assert prior.coupled[1] == pytest.approx(prior.alpha[1] * ratio)
    # under a sampling policy no coupled α was measured for, the assumed ratio, labelled so
    assumed = prior_alpha(scenario, "smollm2-135m", ["q5g64"] * 3, ["chat", "chat", "code"], T07)
    assert assumed.coupled_kinds == [kinds.COUPLED_ASSUMED] * 3
    assert assumed.coupled[0] == pytest.approx(assumed.alpha[0] * task_ratio("chat"))
    assert assumed.applied_to(scenario).devices.acceptance_coupled is None
    applied = World(prior.applied_to(scenario)).drop
    assert not applied.coupled_assumed
    np.testing.assert_allclose(applied.coupled_alpha(applied.alpha), prior.coupled, rtol=1e-12)


def test_the_scenarios_coupled_alpha_is_what_the_planner_starts_from():
    base = get_preset("paper-qwen").override({"devices.count": 3, "devices.acceptance": [0.9, 0.8, 0.7]})
    assumed = World(base).drop
    assert assumed.coupled_assumed
    np.testing.assert_allclose(assumed.coupled_alpha([0.9, 0.8, 0.7]), [0.9, 0.8, 0.7] * assumed.coupled_ratio)
    measured = base.override({"devices.acceptance_coupled": [0.85, 0.6, 0.7]})
    codec = make_codec("dense-fp32")
    wire = WirePayload.from_codecs(codec, codec, 12, 20)
    planner = ScenarioPlanner(measured, range(3), wire, policy="all_coupled", online=False)
    np.testing.assert_allclose(planner.coupled_estimator.prior, [0.85, 0.6, 0.7], rtol=1e-12)
    # jobs' α move the coupled α by the device's ratio (the forecast's truth)
    np.testing.assert_allclose(planner.world.drop.coupled_alpha([0.45, 0.4, 0.35]), [0.425, 0.3, 0.35], rtol=1e-12)


def test_a_coupled_list_of_the_wrong_length_is_one_line():
    from multispin.errors import ConfigError

    with pytest.raises(ConfigError, match=r"devices.acceptance_coupled: needs devices.count = 3 entries \(got 2\)"):
        get_preset("paper-qwen").override({"devices.count": 3, "devices.acceptance_coupled": [0.8, 0.8]})


def test_plans_and_sweeps_say_whether_the_coupled_alpha_was_given_or_assumed():
    import multispin.api as ms
    from multispin.system.coupled_alpha import ASSUMPTION, MEASURED_COUPLED

    base = get_preset("paper-qwen").override({"devices.count": 3, "optimizer.n_saa": 50})
    given = base.override({"devices.acceptance_coupled": [0.8, 0.8, 0.8]})
    assert ms.plan(base, verify="choose").to_dict()["coupled_alpha"] == ASSUMPTION
    assert ms.plan(given, verify="choose").to_dict()["coupled_alpha"] == MEASURED_COUPLED
    for sc, label in ((base, ASSUMPTION), (given, MEASURED_COUPLED)):
        table = ms.sweep(sc, over={"radio.p_ul_dbm": [10]}, drops=2, policies=["adaptive", "three_way"])
        assert {r["coupled_alpha"] for r in table.rows} == {label}
