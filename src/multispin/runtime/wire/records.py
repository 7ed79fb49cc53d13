"""What the networked system reports: one `RoundEvent` per round (the per-round hook's argument
and the JSONL `round` line), one `DeviceRecord` per device, the `ServerSummary` of a run and the
`TestbedSummary` that puts each device's own outcome next to the server's record."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from multispin.runtime.round.engine import RoundRecord

if TYPE_CHECKING:  # a device, which reads this module, never loads the clock and its optimiser
    from multispin.runtime.round.clock import RoundCost


@dataclass
class RoundEvent:
    """What happened in one round (the per-round hook's argument and the JSONL `round` line)."""

    round: int
    gammas: dict[int, int]  # γ sent in PLAN, every device active at the round's start
    records: dict[int, RoundRecord]  # devices that committed this round
    rejected: list[int]
    modes: dict[int, str]
    dropped: dict[int, str]  # device -> reason its session ended during this round
    verify_s: float  # the one batched VerifierServer.verify call
    server_correction_s: float  # residual sampling (UL) and p_j encoding (DL) at the server
    draft_compute_s: dict[int, float]  # as reported by each device in DRAFT
    device_correction_s: dict[int, float]  # DL residual sampling, as reported in CORRECTION
    payload_bytes: dict[int, int]  # codec bytes of the one distribution moved (UL or DL)
    wire_bytes_up: dict[int, int]  # every byte each device sent this round (msgpack frames)
    wire_bytes_down: dict[int, int]
    round_wall_s: (
        float  # from the round's PLANs leaving (in the last round's COMMITs, if they rode there) to its COMMITs
    )
    cost: RoundCost | None = (
        None  # what the policy charged the round on its clock (`RoundOutcome.cost`), if it keeps one
    )
    expected_tokens: dict[int, float] = field(default_factory=dict)  # E[kept | draft], committed devices

    @property
    def model_compute_s(self) -> float:
        """Model compute on the round's critical path: the slowest draft, the batched verify, the
        server's corrections and the slowest device-side correction."""
        return (
            max(self.draft_compute_s.values(), default=0.0)
            + self.verify_s
            + self.server_correction_s
            + max(self.device_correction_s.values(), default=0.0)
        )

    def to_dict(self) -> dict[str, Any]:
        def keyed(d: dict) -> dict[str, Any]:
            return {str(k): v for k, v in sorted(d.items())}

        recs = self.records
        return {
            "event": "round",
            "round": self.round,
            "gamma": keyed(self.gammas),
            "rejected": sorted(self.rejected),
            "modes": keyed(self.modes),
            "num_accepted": keyed({d: r.num_accepted for d, r in recs.items()}),
            "tokens_gained": keyed({d: r.tokens_gained for d, r in recs.items()}),
            "uplink_bits": keyed({d: r.uplink_bits for d, r in recs.items()}),
            "downlink_bits": keyed({d: r.downlink_bits for d, r in recs.items()}),
            "payload_bits": keyed({d: r.payload_bits for d, r in recs.items()}),
            "correction_bits": keyed({d: r.correction_bits for d, r in recs.items()}),
            "payload_bytes": keyed(self.payload_bytes),
            "wire_bytes_up": keyed(self.wire_bytes_up),
            "wire_bytes_down": keyed(self.wire_bytes_down),
            "dropped": keyed(self.dropped),
            "verify_s": self.verify_s,
            "server_correction_s": self.server_correction_s,
            "draft_compute_s": keyed(self.draft_compute_s),
            "device_correction_s": keyed(self.device_correction_s),
            "round_wall_s": self.round_wall_s,
        }


@dataclass
class DeviceRecord:
    """The server's view of one device at the end of a run."""

    device_id: int
    draft: str
    num_prompt: int
    tokens: list[int]  # prompt + committed tokens: the source of truth
    finished: bool
    sessions: int  # authenticated connections (1 + resumes)
    drops: list[str]  # why sessions ended early
    rounds: list[RoundRecord]  # empty unless the server keeps history
    digest: str
    client_digest: str | None  # from the device's final BYE
    digest_match: bool | None
    num_rounds: int = 0  # rounds the device committed in (kept with or without history)

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.num_prompt :]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["rounds"] = [r.to_dict() for r in self.rounds]
        out["generated"] = self.generated
        return out


@dataclass
class ServerSummary:
    rounds: int
    stop_reason: str
    wall_s: float
    devices: dict[int, DeviceRecord]
    refused: int  # connections refused (authentication or protocol) before a session
    events: list[RoundEvent] = field(default_factory=list)  # empty unless the server keeps history
    refusals: dict[str, int] = field(default_factory=dict)  # refusals per cause
    churn: dict[str, int] = field(default_factory=dict)  # drops and resumes per device and cause
    # draft deadlines missed, stragglers told to back off, and the most the others waited for them
    stragglers: dict[str, float] = field(default_factory=dict)

    def to_dict(self, with_events: bool = False) -> dict[str, Any]:
        out = {
            "rounds": self.rounds,
            "stop_reason": self.stop_reason,
            "wall_s": self.wall_s,
            "refused": self.refused,
            "refusals": dict(self.refusals),
            "churn": dict(self.churn),
            "stragglers": dict(self.stragglers),
            "devices": {str(d): r.to_dict() for d, r in sorted(self.devices.items())},
        }
        if with_events:
            out["events"] = [e.to_dict() for e in self.events]
        return out


@dataclass
class TestbedSummary:
    server: ServerSummary
    devices: dict[int, dict]  # each device's own outcome (its last run); missing if it never finished one
    consistent: bool  # every device outcome's tokens equal the server's record of that device
    wall_s: float
    log_path: str | None

    def tokens(self) -> dict[int, list[int]]:
        """Generated tokens per device, from the server's record (the source of truth)."""
        return {d: rec.generated for d, rec in self.server.devices.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "server": self.server.to_dict(),
            "devices": {str(k): v for k, v in self.devices.items()},
            "consistent": self.consistent,
            "wall_s": self.wall_s,
            "log_path": self.log_path,
        }
