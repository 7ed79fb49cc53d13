"""In-process Multi-SPIN round loop: K devices and one server in one process, no transport.

Per round the `RoundEngine` does the steps and a `RoundPolicy` decides: γ_k before drafting
(proactive), UL or DL for each rejected device after verification (reactive), and it observes
the outcome. The policy is an object apart from the loop (as in HF assisted generation): the
loop never knows how γ or the modes were chosen. Here every device is a function call away.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from multispin.runtime.round.engine import ModePolicy, PolicyPair, RoundEngine, RoundOutcome, RoundPolicy, RoundRecord
from multispin.runtime.round.roles import DraftDevice, VerifierServer, draft_all
from multispin.speculative.stats import AcceptanceStats
from multispin.system.channel import fair_coin_ul
from multispin.system.payload import WirePayload
from multispin.vocabulary import COUPLED, DL, UL, LinkMode, fixed_mode


@dataclass
class UniformDraftLength:
    """The same γ for every active device, whatever its id."""

    gamma: int

    def __call__(self, round_idx: int, active: Sequence[int]) -> dict[int, int]:
        return {d: self.gamma for d in active}


@dataclass
class FixedLink:
    """Every rejected device on one link (``--mode ul`` or ``dl``)."""

    mode: LinkMode

    def __call__(self, round_idx: int, rejected: Sequence[int]) -> dict[int, LinkMode]:
        return {d: self.mode for d in rejected}


@dataclass
class NoCorrection:
    """The mode policy of a run whose devices are all coupled: no device is ever rejected, so it
    is never asked for a mode (the engine refuses the empty answer if it were)."""

    def __call__(self, round_idx: int, rejected: Sequence[int]) -> dict[int, LinkMode]:
        return {}


@dataclass
class RandomMode:
    """Each rejected device independently UL or DL with probability 1/2: the fair coin of the
    ``random`` mode rule (`multispin.system.channel.fair_coin_ul`), the same coin the testbed's
    ``--policy random`` flips, so runs of either are paired on common random numbers."""

    seed: int

    def __call__(self, round_idx: int, rejected: Sequence[int]) -> dict[int, LinkMode]:
        ul = fair_coin_ul(self.seed, round_idx, rejected)
        return {d: (UL if u else DL) for d, u in zip(rejected, ul)}


#: γ of the fixed policy unless told otherwise (the `--draft-len` flag's default)
DEFAULT_DRAFT_LEN = 4


def fixed_policy(draft_len: int = DEFAULT_DRAFT_LEN, mode: str = "random", seed: int = 0) -> PolicyPair:
    """The policy of the `--draft-len` and `--mode` flags: the same γ for every device, and each
    rejected device's mode fixed, or the fair coin (``random``); ``coupled``: every device under
    the coupled rule, nothing ever corrected."""
    return PolicyPair(UniformDraftLength(draft_len), mode_policy(mode, seed), coupled=fixed_mode(mode) == COUPLED)


def mode_policy(mode: str, seed: int) -> ModePolicy:
    """The policy behind `--mode`: ul, dl, random (the fair coin per rejected device), or none
    for ``coupled``."""
    canon = fixed_mode(mode)
    if canon == COUPLED:
        return NoCorrection()
    if canon == "random":
        return RandomMode(seed)
    return FixedLink(canon)  # type: ignore[arg-type]


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
            "rules": [r.rule for r in self.rounds],
            "payload_bits": [r.payload_bits for r in self.rounds],
            "uplink_bits": sum(r.uplink_bits for r in self.rounds),
            "downlink_bits": sum(r.downlink_bits for r in self.rounds),
            "correction_bits": sum(r.correction_bits for r in self.rounds),
            "acceptance": self.stats.to_dict(),
        }


def run_rounds(
    server: VerifierServer,
    devices: dict[int, DraftDevice],
    policy: RoundPolicy,
    max_new_tokens: int,
    eos_ids: Sequence[int],
    max_rounds: int | None = None,
    on_round: Callable[[int, dict[int, RoundRecord]], None] | None = None,
) -> dict[int, list[RoundRecord]]:
    """Run rounds until every device has max_new_tokens or emitted EOS; return each device's log."""
    vocab = next(iter(devices.values())).lm.vocab_size
    wire = WirePayload.from_codecs(server.ul_codec, server.dl_codec, vocab, server.gamma_max)
    engine = RoundEngine(server, policy, max_new_tokens, eos_ids, wire)
    logs: dict[int, list[RoundRecord]] = {d: [] for d in devices}
    for d, dev in devices.items():
        server.open(d, dev.tokens)
    round_idx = 0
    while max_rounds is None or round_idx < max_rounds:
        active = [d for d in devices if not engine.finished(d)]
        if not active:
            break
        out = _one_round(engine, devices, round_idx, active)
        for d, rec in out.records.items():
            logs[d].append(rec)
        if on_round is not None:
            on_round(round_idx, out.records)
        round_idx += 1
    return logs


def _one_round(engine: RoundEngine, devices: dict[int, DraftDevice], r: int, active: list[int]) -> RoundOutcome:
    """The engine's steps with every device a function call away."""
    out = engine.plan(r, active)
    engine.verify(out, draft_all(devices, {d: out.gammas[d] for d in active}, out.coupled))
    for d in active:
        v, dev = out.verdicts[d], devices[d]
        if not v.rejected:
            assert v.bonus_token is not None  # every accepted draft earns its bonus token
            final = v.bonus_token
        elif out.modes[d] == "ul":
            final = engine.correct_remotely(out, d, dev.upload_q(v.num_accepted))
        else:
            final = dev.correct_locally(v.num_accepted, engine.p_payload(out, d))
        dev.commit(v.num_accepted, engine.commit(out, d, final))
    return engine.close(out)
