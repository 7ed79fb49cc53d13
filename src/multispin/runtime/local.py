"""In-process Multi-SPIN round loop: K devices and one server in one process, no transport.

Per round: the draft-length policy fixes γ_k (proactive), devices draft, the server verifies the
ragged batch in one forward pass, the mode policy picks UL or DL for each rejected device
(reactive), the correction is sampled where the mode says, and every device appends its tokens.
The policies are objects apart from the loop (as in HF assisted generation): the loop never
knows how γ or the modes were chosen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Protocol, Sequence

import numpy as np

from multispin.errors import ConfigError
from multispin.runtime.roles import Draft, DraftDevice, VerifierServer, clip_new_tokens
from multispin.spec.stats import AcceptanceStats
from multispin.system.payload import RoundBits, WirePayload

Mode = Literal["ul", "dl"]


class DraftLengthPolicy(Protocol):
    def __call__(self, round_idx: int, active: Sequence[int]) -> dict[int, int]: ...


class ModePolicy(Protocol):
    def __call__(self, round_idx: int, rejected: Sequence[int]) -> dict[int, Mode]: ...


@dataclass
class FixedDraftLengths:
    """The same γ for every device (or one per device)."""

    draft_lens: dict[int, int]

    def __call__(self, round_idx: int, active: Sequence[int]) -> dict[int, int]:
        return {d: self.draft_lens[d] for d in active}


@dataclass
class UniformDraftLength:
    """The same γ for every active device, whatever its id."""

    gamma: int

    def __call__(self, round_idx: int, active: Sequence[int]) -> dict[int, int]:
        return {d: self.gamma for d in active}


@dataclass
class FixedMode:
    mode: Mode

    def __call__(self, round_idx: int, rejected: Sequence[int]) -> dict[int, Mode]:
        return {d: self.mode for d in rejected}


@dataclass
class RandomMode:
    """Each rejected device independently UL or DL with probability 1/2 (seeded per round)."""

    seed: int

    def __call__(self, round_idx: int, rejected: Sequence[int]) -> dict[int, Mode]:
        rng = np.random.default_rng([self.seed, round_idx, 7])
        return {d: ("ul" if rng.random() < 0.5 else "dl") for d in rejected}


def mode_policy(mode: str, seed: int) -> ModePolicy:
    """The policy behind `--mode`: ul, dl, or mixed (a fair coin per rejected device)."""
    if mode == "mixed":
        return RandomMode(seed)
    if mode in ("ul", "dl"):
        return FixedMode(mode)  # type: ignore[arg-type]
    raise ConfigError(f"mode: must be ul, dl or mixed (got {mode!r})")


@dataclass
class RoundRecord:
    """What one device did in one round."""

    round: int
    draft_len: int
    num_accepted: int
    rejection_position: int | None
    mode: Mode | None
    tokens_gained: int
    payload_bits: int  # the one vocabulary-wide distribution moved (0 if none)
    uplink_bits: int  # everything the device sent (drafts, q̂_j or correction id)
    downlink_bits: int  # everything the server sent (bonus/rejection, p_j or correction id)
    correction_bits: int = 0  # distribution + correction id: what the clock charges at the mode's rate

    @classmethod
    def of(cls, bits: RoundBits, **fields) -> "RoundRecord":
        """A record whose bit fields come from one `WirePayload.round_bits` count."""
        return cls(payload_bits=bits.distribution, uplink_bits=bits.uplink, downlink_bits=bits.downlink,
                   correction_bits=bits.correction, **fields)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class DeviceResult:
    device_id: int
    draft_name: str
    prompt: str
    tokens: list[int]
    text: str
    rounds: list[RoundRecord] = field(default_factory=list)
    stats: AcceptanceStats = field(default_factory=AcceptanceStats)

    def to_dict(self) -> dict:
        return {
            "device_id": self.device_id,
            "draft": self.draft_name,
            "prompt": self.prompt,
            "tokens": self.tokens,
            "text": self.text,
            "num_rounds": len(self.rounds),
            "accepted_counts": [r.num_accepted for r in self.rounds],
            "draft_lens": [r.draft_len for r in self.rounds],
            "rejection_positions": [r.rejection_position for r in self.rounds],
            "modes": [r.mode for r in self.rounds],
            "payload_bits": [r.payload_bits for r in self.rounds],
            "uplink_bits": sum(r.uplink_bits for r in self.rounds),
            "downlink_bits": sum(r.downlink_bits for r in self.rounds),
            "correction_bits": sum(r.correction_bits for r in self.rounds),
            "acceptance": self.stats.to_dict(),
        }


def run_rounds(
    server: VerifierServer,
    devices: dict[int, DraftDevice],
    draft_lengths: DraftLengthPolicy,
    modes: ModePolicy,
    max_new_tokens: int,
    eos_ids: Sequence[int],
    max_rounds: int | None = None,
    on_round: Callable[[int, dict[int, RoundRecord]], None] | None = None,
) -> dict[int, list[RoundRecord]]:
    """Run rounds until every device has max_new_tokens or emitted EOS; return each device's log."""
    if max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens: must be >= 1 (got {max_new_tokens})")
    vocab = next(iter(devices.values())).lm.vocab_size
    wire = WirePayload.from_codecs(server.ul_codec, server.dl_codec, vocab, server.gamma_max)
    logs: dict[int, list[RoundRecord]] = {d: [] for d in devices}
    for d, dev in devices.items():
        server.open(d, dev.tokens)

    def finished(d: int) -> bool:
        gen = devices[d].generated
        return len(gen) >= max_new_tokens or (bool(gen) and gen[-1] in eos_ids)

    round_idx = 0
    while True:
        active = [d for d in devices if not finished(d)]
        if not active or (max_rounds is not None and round_idx >= max_rounds):
            break
        planned = draft_lengths(round_idx, active)
        gammas = {}
        for d in active:
            budget = max_new_tokens - len(devices[d].generated)
            gammas[d] = max(0, min(int(planned[d]), budget - 1))  # γ + 1 tokens fit the budget
        drafts: dict[int, Draft] = {d: devices[d].draft(gammas[d], round_idx) for d in active}
        verdicts = server.verify(drafts, round_idx)
        rejected = [d for d in active if verdicts[d].rejected]
        chosen = modes(round_idx, rejected)

        records = {}
        for d in active:
            v, dev, gamma = verdicts[d], devices[d], gammas[d]
            mode: Mode | None = None
            if v.rejected:
                mode = chosen[d]
                if mode == "ul":
                    q_payload = dev.upload_q(v.num_accepted)
                    final = server.correct_remotely(d, q_payload, round_idx)
                else:
                    p_payload = server.send_p(d)
                    final = dev.correct_locally(v.num_accepted, p_payload, round_idx)
            else:
                final = v.bonus_token
            budget = max_new_tokens - len(dev.generated)
            kept = clip_new_tokens(v.accepted_tokens + [final], eos_ids, budget)
            dev.commit(v.num_accepted, kept)
            server.commit(d, kept)
            records[d] = RoundRecord.of(
                wire.round_bits(gamma, mode), round=round_idx, draft_len=gamma, num_accepted=v.num_accepted,
                rejection_position=v.num_accepted if v.rejected else None, mode=mode,
                tokens_gained=len(kept),
            )
            logs[d].append(records[d])
        if on_round is not None:
            on_round(round_idx, records)
        round_idx += 1
    return logs
