"""What one round costs a device's battery, in joules, from the times the clock already charges.

The round's parts on the device (docs/service.md):

- transmit: the drafting uploads (at P^ul, their airtime is inside T_comp) and, in UL mode, the
  correction (at its planned power, its airtime in T_comm), each as radiated power / η_PA;
- receive: in DL mode, the target distribution's airtime at ``rx_power_w``;
- drafting: γ·T^dft of drafting compute at ``draft_power_w``;
- idle: the rest of the round (the device waits for the verdict and the others) at ``idle_power_w``.

DL mode spends the server's transmit power, not the device's: a DL correction charges the device
reception only. The verdict (bonus id or rejection position) goes down uncharged, as on the clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceRoundEnergy:
    """Joules one device spent in one round, by part."""

    transmit_j: float
    receive_j: float
    draft_j: float
    idle_j: float

    @property
    def total_j(self) -> float:
        return self.transmit_j + self.receive_j + self.draft_j + self.idle_j


def device_round_energy(
    energy,
    *,
    round_s: float,
    draft_compute_s: float,
    draft_upload_s: float,
    p_ul_w: float,
    mode: str | None,
    airtime_s: float,
    correction_power_w: float,
) -> DeviceRoundEnergy:
    """One device's joules in one round of duration ``round_s`` under ``energy`` (an
    `EnergyConfig`): drafting ``draft_compute_s`` s, uploading drafts for ``draft_upload_s`` s at
    ``p_ul_w`` W radiated, and moving a correction in ``mode`` ("ul", "dl" or None) for
    ``airtime_s`` s, at ``correction_power_w`` W radiated when the device sends it (UL)."""
    eta = energy.pa_efficiency
    ul_air = airtime_s if mode == "ul" else 0.0
    dl_air = airtime_s if mode == "dl" else 0.0
    tx = (p_ul_w * draft_upload_s + correction_power_w * ul_air) / eta
    rx = energy.rx_power_w * dl_air
    busy = draft_compute_s + draft_upload_s + ul_air + dl_air
    return DeviceRoundEnergy(
        transmit_j=tx,
        receive_j=rx,
        draft_j=energy.draft_power_w * draft_compute_s,
        idle_j=energy.idle_power_w * max(0.0, round_s - busy),
    )
