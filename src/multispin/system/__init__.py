"""The world: scenario configuration, channel, compute and acceptance profiles (numpy only)."""

from multispin.system.channel import ChannelGenerator, ChannelState, DeviceDrop, World, build_instance, drop_devices
from multispin.system.instance import ComputeParams, Instance, RadioParams
from multispin.system.scenario import (
    PRESETS,
    Scenario,
    get_preset,
    load_acceptance_profile,
    load_scenario,
    preset_names,
    scenario_from_dict,
)

__all__ = [
    "ChannelGenerator",
    "ChannelState",
    "ComputeParams",
    "DeviceDrop",
    "Instance",
    "PRESETS",
    "RadioParams",
    "Scenario",
    "World",
    "build_instance",
    "drop_devices",
    "get_preset",
    "load_acceptance_profile",
    "load_scenario",
    "preset_names",
    "scenario_from_dict",
]
