"""The demo's configuration is the testbed's shared settings plus the comparison's own: each run's
`TestbedConfig` carries every shared setting, and the demo declares none of them again except the
defaults it changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from multispin.errors import ConfigError
from multispin.experiments.demo import DemoConfig
from multispin.experiments.testbed import TestbedConfig, TestbedSettings

# the shared settings whose default (or bound: seeds seed, seed + 1, … are never negative) the demo
# changes: K = 20 devices in one pool, a long first round
DEMO_DEFAULTS = {"devices", "seed", "runner", "round_timeout_s"}

# a value other than the default for every shared setting
GIVEN = dict(
    pair="tiny",
    devices=5,
    max_new_tokens=7,
    drafts=["tiny-draft"],
    scenario="paper-qwen",
    split="optimized",
    p_dl_dbm=30.0,
    p_ul_dbm=20.0,
    noise_figure_db=9.0,
    speed_kmh=30.0,
    pilot_snr_db=0.0,
    csi_planning="robust",
    objective="energy",
    energy_weight=2.0,
    top_k=16,
    ul_codec="dense-fp16",
    dl_codec="dense-fp16",
    seed=4,
    runner="thread",
    round_timeout_s=50.0,
    n_saa=40,
    acceptance_profile=["acc-chat.json"],
    compute_profile="compute.json",
)


def test_every_shared_setting_has_a_value_here():
    assert set(GIVEN) == set(TestbedSettings.model_fields)


def test_each_run_carries_every_shared_setting():
    demo = DemoConfig.make(**GIVEN, rounds=9)
    run = demo.testbed("all_dl", seed=6, p_dl_dbm=33.0, out=Path("x"))
    assert isinstance(run, TestbedConfig)
    for name in TestbedSettings.model_fields:
        want = {"seed": 6, "p_dl_dbm": 33.0}.get(name, GIVEN[name])
        assert getattr(run, name) == want, name
    assert (run.policy, run.rounds, run.out) == ("all_dl", 9, Path("x"))


def test_the_demo_declares_again_only_the_defaults_it_changes():
    """Negative control of the shape: a field the demo re-declares shows up here."""
    own = set(DemoConfig.__annotations__) & set(TestbedSettings.model_fields)
    assert own == DEMO_DEFAULTS
    for name in DEMO_DEFAULTS:  # each one changes something, or it would be a repetition
        assert repr(DemoConfig.model_fields[name]) != repr(TestbedSettings.model_fields[name]), name


def test_a_bad_codec_is_refused_by_the_demo_config_itself():
    with pytest.raises(ConfigError, match="ul_codec"):
        DemoConfig.make(ul_codec="no-such-codec")
