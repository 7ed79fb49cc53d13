"""The device energy model (system/energy.py) against hand-computed joules."""

from __future__ import annotations

import pytest

from multispin.system.energy import device_round_energy
from multispin.system.scenario import EnergyConfig

E = EnergyConfig(pa_efficiency=0.25, rx_power_w=1.0, draft_power_w=4.0, idle_power_w=0.2)


def _ul_round(energy=E):
    # 0.1 s round: 30 ms drafting, 2 ms drafting uploads at 0.2 W, a 10 ms UL correction at 0.1 W
    return device_round_energy(
        energy,
        round_s=0.1,
        draft_compute_s=0.03,
        draft_upload_s=0.002,
        p_ul_w=0.2,
        mode="ul",
        airtime_s=0.01,
        correction_power_w=0.1,
    )


def hand_ul_joules() -> float:
    tx = (0.2 * 0.002 + 0.1 * 0.01) / 0.25  # 5.6 mJ
    draft = 4.0 * 0.03  # 120 mJ
    idle = 0.2 * (0.1 - 0.03 - 0.002 - 0.01)  # 11.6 mJ
    return tx + draft + idle


def test_a_scripted_ul_round_gives_the_hand_computed_joules():
    e = _ul_round()
    assert e.transmit_j == pytest.approx(0.0056, abs=1e-12)
    assert e.receive_j == 0.0
    assert e.total_j == pytest.approx(hand_ul_joules(), abs=1e-12)


def test_dl_mode_charges_the_device_reception_not_transmission_for_the_correction():
    e = device_round_energy(
        E,
        round_s=0.1,
        draft_compute_s=0.03,
        draft_upload_s=0.0,
        p_ul_w=0.2,
        mode="dl",
        airtime_s=0.01,
        correction_power_w=5.0,
    )  # the server's power
    assert e.transmit_j == 0.0
    assert e.receive_j == pytest.approx(0.01, abs=1e-12)
    assert e.total_j == pytest.approx(0.01 + 0.12 + 0.2 * 0.06, abs=1e-12)


def test_a_wrong_constant_is_caught():
    """Negative control: the hand check rejects a model with another PA efficiency or idle power."""
    for wrong in (EnergyConfig(pa_efficiency=0.5), EnergyConfig(idle_power_w=0.3)):
        assert _ul_round(wrong).total_j != pytest.approx(hand_ul_joules(), abs=1e-9)
