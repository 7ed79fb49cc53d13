"""The scenario's virtual clock: what each round of a running system costs in the scenario's time.

A round costs T_comp (the server's verification and every device's drafting compute and drafting
uploads, at the scenario's compute profile and the γ actually drafted) plus T_comm: the largest
airtime, over the devices that moved a distribution, of the correction bits each device's record
says it moved, at that round's power, bandwidth and gain of its mode's link (the reactive decision
on the plan). With ``channel.correction_deadline_s`` a correction that misses the deadline is cut
there and resent whole at the next round on that round's channel, and the clock charges both.

The clock charges; it plans nothing and learns nothing (`planner.ScenarioPlanner` does both and
hands every round it planned here).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from multispin.optimize.goodput import t_comp_s
from multispin.optimize.plan import Plan
from multispin.optimize.reactive import ReactiveDecision
from multispin.runtime.round.engine import RoundRecord
from multispin.system.channel import ChannelState
from multispin.system.instance import Instance
from multispin.system.radio import rate_bps
from multispin.system.scenario import Scenario
from multispin.vocabulary import COUPLED, LinkMode


@dataclass
class RoundCost:
    """One round on the scenario's clock."""

    round: int
    draft_len: dict[int, int]
    rejected: list[int]
    modes: dict[int, LinkMode]
    power_w: dict[int, float]
    bandwidth_hz: dict[int, float]
    gain: dict[int, float]  # power gain h_k of the mode's link this round
    charged_bits: dict[int, int]  # correction bits charged at that link's rate
    comp_latency_s: float
    comm_latency_s: float
    tokens: int
    planned_goodput_tokens_per_s: float
    expected_tokens: float  # Σ E[N_k] of the plan (the optimiser's model, current estimates)
    expected_latency_s: float  # T_comp + E[T_comm] of the plan
    # channel.correction_deadline_s: corrections cut at the deadline (device → bits still to send),
    # and the retransmissions of earlier ones this round charged (device → bits, and their airtime)
    deferred_bits: dict[int, int] = field(default_factory=dict)
    retransmitted_bits: dict[int, int] = field(default_factory=dict)
    retransmission_s: float = 0.0
    # the planner's time for this round's γ (CPU of the planning thread, and wall), and what of it
    # the clock charges (the CPU time with `ScenarioClock.charge_planning`, else 0)
    planning_cpu_s: float = 0.0
    planning_wall_s: float = 0.0
    planning_charged_s: float = 0.0
    # per device on the clock: the correction's airtime on its mode's link, the drafting compute
    # (γ·T_k^dft) and the drafting uploads' airtime at P^ul on B/K (both inside T_comp)
    airtime_s: dict[int, float] = field(default_factory=dict)
    draft_compute_s: dict[int, float] = field(default_factory=dict)
    draft_upload_s: dict[int, float] = field(default_factory=dict)
    # E[T_comm | the round's drafts] (the planner's, after the charge): the acceptance test's luck
    # averaged out of T_comm as `expected_tokens` averages it out of the tokens; None where not defined
    conditioned_comm_latency_s: float | None = None

    @property
    def latency_s(self) -> float:
        return self.comp_latency_s + self.comm_latency_s + self.planning_charged_s

    def to_dict(self) -> dict:
        return {**self.__dict__, "latency_s": self.latency_s}


@dataclass
class MovedCorrections:
    """What the corrections of one round moved, per device that moved one: its link, the bits
    charged, its power, bandwidth and gain on that link, and the airtime."""

    modes: dict[int, LinkMode] = field(default_factory=dict)
    charged_bits: dict[int, int] = field(default_factory=dict)
    power_w: dict[int, float] = field(default_factory=dict)
    bandwidth_hz: dict[int, float] = field(default_factory=dict)
    gain: dict[int, float] = field(default_factory=dict)
    airtime_s: dict[int, float] = field(default_factory=dict)


class ChargedRound(Protocol):
    """What the clock reads of a planned round (`planner.ScenarioPlannedRound`)."""

    round: int
    active: list[int]
    instance: Instance  # the active devices, on the round's true channel
    proactive: Plan  # optimize.plan's result (the plan's own goodput)
    decision: ReactiveDecision | None  # optimize.reactive's result: power and bandwidth per active device
    planning_cpu_s: float
    planning_wall_s: float


@dataclass
class ScenarioClock:
    """Charges the rounds of `scenario`'s world (`rounds`) and keeps the corrections cut at the
    deadline until they are resent."""

    scenario: Scenario
    # charge each round the CPU time its planning took (on the round's critical path: γ is known
    # only once planned); measured and recorded either way. Off by default: the host's CPU time
    # is not the scenario's server's and would make the virtual clock non-deterministic.
    charge_planning: bool = False
    rounds: list[RoundCost] = field(default_factory=list)
    _pending: dict[int, tuple[int, str]] = field(default_factory=dict)  # device id → (bits, mode) of a cut correction

    def charge(
        self,
        rplan: ChargedRound,
        records: Mapping[int, RoundRecord],
        gamma: np.ndarray,
        channel: ChannelState | None,
        index: Callable[[int], int],
    ) -> RoundCost:
        """Charge one round: ``gamma`` the draft lengths drafted (per active device, in
        ``rplan.active``'s order), ``channel`` this round's true channel of every scenario device
        (for retransmissions), ``index`` the scenario device of a device id."""
        pos = {d: i for i, d in enumerate(rplan.active)}
        # a coupled device's mismatch commits the server's x*: nothing to correct, nothing charged
        rejected = [d for d, r in records.items() if r.rejection_position is not None and r.rule != COUPLED]
        moved = self._corrections(rplan, records, rejected, pos)
        comm_s, retx, retx_s, deferred = self._against_deadline(moved, channel, index)
        inst, proactive = rplan.instance, rplan.proactive
        cost = RoundCost(
            airtime_s=dict(moved.airtime_s),
            draft_compute_s={d: float(gamma[pos[d]] * inst.draft_latency_s[pos[d]]) for d in rplan.active},
            draft_upload_s={
                d: float(gamma[pos[d]] * (inst.token_latency_s[pos[d]] - inst.draft_latency_s[pos[d]]))
                for d in rplan.active
            },
            round=rplan.round,
            draft_len={d: int(gamma[pos[d]]) for d in rplan.active},
            rejected=rejected,
            modes=moved.modes,
            power_w=moved.power_w,
            bandwidth_hz=moved.bandwidth_hz,
            gain=moved.gain,
            charged_bits=moved.charged_bits,
            comp_latency_s=float(t_comp_s(inst, gamma)),
            comm_latency_s=comm_s,
            deferred_bits=deferred,
            retransmitted_bits=retx,
            retransmission_s=retx_s,
            tokens=sum(r.tokens_gained for r in records.values()),
            planning_cpu_s=rplan.planning_cpu_s,
            planning_wall_s=rplan.planning_wall_s,
            planning_charged_s=rplan.planning_cpu_s if self.charge_planning else 0.0,
            planned_goodput_tokens_per_s=float(proactive.goodput_tokens_per_s),
            expected_tokens=float(proactive.goodput.expected_tokens),
            expected_latency_s=float(proactive.goodput.t_comp_s + proactive.goodput.e_t_comm_s),
        )
        self.rounds.append(cost)
        return cost

    def _corrections(
        self, rplan: ChargedRound, records: Mapping[int, RoundRecord], rejected: list[int], pos: Mapping[int, int]
    ) -> MovedCorrections:
        """The corrections the rejected devices moved, each charged under this round's decision.
        Only devices that actually moved a distribution are charged (a dropped device moved none),
        each for the correction bits its record says it moved, at this round's rate of its link."""
        moved = MovedCorrections()
        decision = rplan.decision
        if decision is None:
            return moved
        for d in rejected:
            mode = records[d].mode
            if mode is None:
                continue
            i = pos[d]
            moved.modes[d], moved.charged_bits[d] = mode, int(self._charged_bits(records[d]))
            moved.power_w[d], moved.bandwidth_hz[d] = float(decision.power_w[i]), float(decision.bandwidth_hz[i])
            moved.airtime_s[d], moved.gain[d] = self._airtime_s(
                rplan.instance, decision, moved.charged_bits[d], mode, i
            )
        return moved

    def _against_deadline(
        self, moved: MovedCorrections, channel: ChannelState | None, index: Callable[[int], int]
    ) -> tuple[float, dict[int, int], float, dict[int, int]]:
        """The round's T_comm (the slowest correction) and, with ``channel.correction_deadline_s``,
        the retransmissions of earlier cut corrections (bits per device, airtime) and this round's
        corrections cut at the deadline (bits per device, kept to resend), T_comm then being the
        cut airtime plus the retransmissions'."""
        comm_s = max(moved.airtime_s.values(), default=0.0)
        deadline = self.scenario.channel.correction_deadline_s
        if deadline is None:
            return comm_s, {}, 0.0, {}
        retx, retx_s = self._retransmit(deadline, channel, index)
        deferred = {d: moved.charged_bits[d] for d, a in moved.airtime_s.items() if a > deadline}
        self._pending.update({d: (moved.charged_bits[d], moved.modes[d]) for d in deferred})
        return min(comm_s, deadline) + retx_s, retx, retx_s, deferred

    def _charged_bits(self, record: RoundRecord) -> int:
        """Bits the clock charges for a device's correction: what its record says it moved."""
        return record.correction_bits

    def _airtime_s(self, inst: Instance, dec: ReactiveDecision, bits: int, mode: str, i: int) -> tuple[float, float]:
        """(airtime of `bits` for active device index i in `mode` under this round's decision, gain)."""
        gain = float((inst.gain_ul if mode == "ul" else inst.gain_dl)[i])
        rate = float(rate_bps(dec.bandwidth_hz[i], dec.power_w[i], gain, inst.radio.noise_psd_w_per_hz))
        return (bits / rate if rate > 0 else float("inf")), gain

    def _retransmit(
        self, deadline: float, channel: ChannelState | None, index: Callable[[int], int]
    ) -> tuple[dict[int, int], float]:
        """Resend the corrections earlier rounds cut at the deadline, one after another on the whole
        band B at the mode's full power (P^ul, or the DL budget), on this round's channel of the
        device's link; each is cut at the deadline again if it misses it. Returns the bits resent
        per device and the airtime charged."""
        r, ch = self.scenario.radio, channel
        assert ch is not None, "_retransmit: after a round was planned"
        n0 = self.scenario.noise_psd_w_per_hz
        sent, total = {}, 0.0
        for d, (bits, mode) in list(self._pending.items()):
            i = index(d)
            gain = float((ch.gain_ul if mode == "ul" else ch.gain_dl)[i])
            rate = float(rate_bps(r.bandwidth_hz, r.p_ul_w if mode == "ul" else r.p_dl_watts, gain, n0))
            airtime = bits / rate if rate > 0 else float("inf")
            sent[d] = bits
            total += min(airtime, deadline)
            if airtime <= deadline:
                del self._pending[d]
        return sent, total

    # -- summaries ------------------------------------------------------------------------

    @property
    def virtual_time_s(self) -> float:
        return sum(r.latency_s for r in self.rounds)

    @property
    def goodput_tokens_per_s(self) -> float:
        """Σ tokens / Σ (T_comp + T_comm) over the rounds so far (the paper's ratio of sums)."""
        t = self.virtual_time_s
        return sum(r.tokens for r in self.rounds) / t if t > 0 else 0.0

    @property
    def planned_goodput_tokens_per_s(self) -> float:
        """Mean over rounds of the optimiser's own G(γ) for the plan it made."""
        return float(np.mean([r.planned_goodput_tokens_per_s for r in self.rounds])) if self.rounds else 0.0

    def dl_share(self) -> float:
        """Fraction of corrections served in DL mode."""
        modes = [m for r in self.rounds for m in r.modes.values()]
        return modes.count("dl") / len(modes) if modes else 0.0
