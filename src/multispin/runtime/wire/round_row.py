"""One round as a typed row: the server's `RoundEvent` next to the cost the planner charged it
(`RoundCost`, carried on the event). This is the one shape of a round that rounds.jsonl holds and
that experiments and commands compute from; `to_dict` is its only serialiser and `from_dict` reads
a rounds.jsonl line back (device ids are ints in memory, strings in JSON).

The keys of rounds.jsonl only ever grow: a field added here is a key added to the line, so an
older reader keeps working."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from multispin.vocabulary import COUPLED

if TYPE_CHECKING:  # a reader of rounds.jsonl loads neither the engine nor the clock
    from multispin.runtime.round.clock import RoundCost
    from multispin.runtime.wire.records import RoundEvent


def _keyed(d: dict) -> dict[str, Any]:
    return {str(k): v for k, v in d.items()}


def _ints(d: dict | None, cast=lambda v: v) -> dict:
    return {int(k): cast(v) for k, v in (d or {}).items()}


@dataclass
class RoundRow:
    """One round on the scenario's clock: who drafted what, who was rejected and corrected how,
    the bits, the per-device times and the round's duration."""

    round: int
    gamma: dict[int, int]  # γ drafted, every device active at the round's start
    rejected: list[int]
    modes: dict[int, str]  # devices that moved a correction: "ul" or "dl"
    power_w: dict[int, float]  # transmit power of the correction's link (device's UL, or its DL share)
    bandwidth_hz: dict[int, float]
    gain: dict[int, float]  # power gain of the mode's link
    charged_bits: dict[int, int]  # correction bits the clock charged at the mode's rate
    payload_bits: dict[int, int]
    correction_bits: dict[int, int]
    uplink_bits: dict[int, int]
    downlink_bits: dict[int, int]
    tokens_gained: dict[int, int]  # tokens each device committed this round
    comp_latency_s: float  # T_comp of the round
    comm_latency_s: float  # T_comm of the round
    planned_goodput_tokens_per_s: float
    planning_cpu_s: float
    planning_wall_s: float
    planning_charged_s: float
    verify_s: float
    round_wall_s: float
    dropped: dict[int, str]
    # added keys (older rounds.jsonl files lack them: read as empty)
    airtime_s: dict[int, float] = field(default_factory=dict)  # the correction's airtime per device
    draft_compute_s: dict[int, float] = field(default_factory=dict)  # γ·T_k^dft per device
    draft_upload_s: dict[int, float] = field(default_factory=dict)  # drafting uploads' airtime per device
    # E[tokens kept | draft] per device (`speculative.expected_kept`): the acceptance uniforms
    # averaged out, for the demo's control-variate intervals
    expected_tokens: dict[int, float] = field(default_factory=dict)
    # E[T_comm | the round's drafts] (`RoundCost.conditioned_comm_latency_s`): the same luck averaged
    # out of T_comm; None where the planner does not define it (or in older files)
    conditioned_comm_latency_s: float | None = None
    # the devices verified under the coupled rule this round (fixed by the plan before drafting)
    coupled: list[int] = field(default_factory=list)

    @property
    def latency_s(self) -> float:
        """The round's duration on the run's clock: T_comp + T_comm (+ planning, where charged)."""
        return self.comp_latency_s + self.comm_latency_s + self.planning_charged_s

    @property
    def tokens(self) -> int:
        return sum(self.tokens_gained.values())

    @classmethod
    def of(cls, event: RoundEvent, cost: RoundCost) -> RoundRow:
        """The row of one round: the server's `RoundEvent` and the clock's `RoundCost`."""
        recs = event.records
        return cls(
            round=event.round,
            gamma=dict(cost.draft_len),
            rejected=list(cost.rejected),
            modes=dict(cost.modes),
            power_w=dict(cost.power_w),
            bandwidth_hz=dict(cost.bandwidth_hz),
            gain=dict(cost.gain),
            charged_bits=dict(cost.charged_bits),
            payload_bits={d: r.payload_bits for d, r in recs.items()},
            correction_bits={d: r.correction_bits for d, r in recs.items()},
            uplink_bits={d: r.uplink_bits for d, r in recs.items()},
            downlink_bits={d: r.downlink_bits for d, r in recs.items()},
            tokens_gained={d: r.tokens_gained for d, r in recs.items()},
            comp_latency_s=cost.comp_latency_s,
            comm_latency_s=cost.comm_latency_s,
            planned_goodput_tokens_per_s=cost.planned_goodput_tokens_per_s,
            planning_cpu_s=cost.planning_cpu_s,
            planning_wall_s=cost.planning_wall_s,
            planning_charged_s=cost.planning_charged_s,
            verify_s=event.verify_s,
            round_wall_s=event.round_wall_s,
            dropped=dict(event.dropped),
            airtime_s=dict(cost.airtime_s),
            draft_compute_s=dict(cost.draft_compute_s),
            draft_upload_s=dict(cost.draft_upload_s),
            expected_tokens=dict(event.expected_tokens),
            conditioned_comm_latency_s=cost.conditioned_comm_latency_s,
            coupled=sorted(d for d, r in recs.items() if r.rule == COUPLED),
        )

    def to_dict(self) -> dict[str, Any]:
        """The rounds.jsonl line (per-device maps keyed by the device id as a string)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = _keyed(v) if isinstance(v, dict) else v
        return out

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> RoundRow:
        """A rounds.jsonl line read back (keys a line lacks take their defaults)."""
        kw: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in doc:
                continue
            v = doc[f.name]
            kw[f.name] = _ints(v) if isinstance(v, dict) else v
        return cls(**kw)
