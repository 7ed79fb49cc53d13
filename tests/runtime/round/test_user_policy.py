"""A user's policy in the running system (runtime/round/user_policy.py, docs/own-policy.md): a
class that rebuilds all-DL from the protocol gives the built-in all_dl's tokens bit for bit, and a
hostile policy (γ out of range, NaN, modes for devices that were not rejected) is refused in one
line naming the policy and the round."""

from __future__ import annotations

import numpy as np
import pytest

from multispin.errors import ConfigError
from multispin.runtime.round.user_policy import RoundView, checked_draft_lengths, checked_modes, load_policy


def _view(caps=(4, 4, 2)) -> RoundView:
    k = len(caps)
    return RoundView(
        3,
        tuple(range(10, 10 + k)),
        np.ones(k),
        np.ones(k),
        np.full(k, 0.7),
        np.array(caps),
        20,
        (),
        None,
        np.zeros((1, k)),
        "equal",
    )


class Returns:
    def __init__(self, gammas=None, modes=None):
        self.g, self.m = gammas, modes

    def draft_lengths(self, view):
        return self.g

    def modes(self, view, rejected):
        return self.m


@pytest.mark.parametrize(
    "gammas,says",
    [
        ([1, 2, 3], r"device 12 must be an integer in \[0, 2\] \(got 3\)"),
        ([1, -1, 0], r"device 11 must be an integer in \[0, 4\] \(got -1\)"),
        ([float("nan"), 1, 1], r"device 10 must be an integer .* \(got nan\)"),
        ([1.5, 1, 1], r"\(got 1.5\)"),
        ([1, 1], "returned 2 values for 3 devices"),
        (None, "draft_lengths must return one γ per device"),
    ],
)
def test_hostile_draft_lengths_are_one_line_errors(gammas, says):
    with pytest.raises(ConfigError, match=r"^policy Returns, round 3: .*" + says):
        checked_draft_lengths(Returns(gammas), _view())
    # negative control: a valid answer passes, floats that are integers included
    assert list(checked_draft_lengths(Returns([4, 0, 2.0]), _view())) == [4, 0, 2]


@pytest.mark.parametrize(
    "modes,says",
    [
        ({10: "dl", 11: "ul"}, r"device\(s\) \[11\] were not rejected"),
        ({}, r"no mode for rejected device\(s\) \[10\]"),
        ({10: "up"}, "mode of device 10 must be 'ul' or 'dl'"),
        ([("dl")], "must return a mapping"),
    ],
)
def test_hostile_modes_are_one_line_errors(modes, says):
    with pytest.raises(ConfigError, match=says):
        checked_modes(Returns(modes=modes), _view(), [10])
    assert checked_modes(Returns(modes={10: "ul"}), _view(), [10]) == {10: "ul"}


def test_a_policy_is_loaded_from_module_attr_or_refused(examples):
    assert type(load_policy("own_policies:AllDL")).__name__ == "AllDL"
    with pytest.raises(ConfigError, match="has no 'Nope'"):
        load_policy("own_policies:Nope")
    with pytest.raises(ConfigError, match="cannot import 'no_such_module_x'"):
        load_policy("no_such_module_x:A")
    with pytest.raises(ConfigError, match="lacks modes"):
        load_policy(type("Half", (), {"draft_lengths": lambda self, v: []})())


@pytest.mark.integration
def test_a_user_all_dl_gives_the_built_in_all_dl_tokens_and_a_hostile_one_stops_the_run(examples):
    from multispin.experiments.testbed import TestbedConfig, run_testbed

    common = dict(pair="tiny", devices=3, rounds=5, max_new_tokens=16, runner="thread", n_saa=40, seed=4)
    built_in = run_testbed(TestbedConfig.make(**common, policy="all_dl"))
    user = run_testbed(TestbedConfig.make(**common, user_policy="own_policies:AllDL"))
    assert user.texts == built_in.texts
    assert [r.gamma for r in user.rounds] == [r.gamma for r in built_in.rounds]
    assert [r.modes for r in user.rounds] == [r.modes for r in built_in.rounds]
    assert user.summary.policy == "own_policies:AllDL" and user.summary.forecast is None
    # negative control: another user policy (other γ and modes) gives other tokens
    other = run_testbed(TestbedConfig.make(**common, user_policy="own_policies:Threshold"))
    assert [r.gamma for r in other.rounds] != [r.gamma for r in built_in.rounds]
    with pytest.raises(ConfigError, match=r"policy Hostile, round 0: draft length of device 0 .*\(got nan\)"):
        run_testbed(TestbedConfig.make(**common, user_policy="own_policies:Hostile"))
