"""The round engine: one Multi-SPIN round on plain data (docs/system-model.md §1), the only
implementation of its steps.

clip γ to the budget (and take each device's verification rule from the plan) → (devices draft)
→ verify the ragged batch in one pass → rejected set R (standard devices only: a coupled device
commits the server's x* and is never corrected) →
modes from the policy → server-side correction (UL) or p_j to send (DL) → commit the kept tokens
→ count the bits → "finished" → one record per device and one `RoundOutcome`.

The in-process loop (`local.run_rounds`) and the networked server (`server.EdgeServer`) both
drive a `RoundEngine`; they differ only in how drafts and corrections reach it (a call or a
message), so the token math and the bookkeeping cannot drift apart.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from multispin.errors import ConfigError
from multispin.runtime.round.roles import Draft, Verdict, VerifierServer
from multispin.speculative.expected_kept import draft_survival, expected_kept
from multispin.system.payload import RoundBits, WirePayload
from multispin.vocabulary import COUPLED, LINK_MODES, STANDARD, LinkMode, VerifyRule

if TYPE_CHECKING:  # the clock imports the engine's records; the engine only carries its costs
    from multispin.runtime.round.clock import RoundCost


class DraftLengthPolicy(Protocol):
    def __call__(self, round_idx: int, active: Sequence[int]) -> Mapping[int, int]: ...


class ModePolicy(Protocol):
    def __call__(self, round_idx: int, rejected: Sequence[int]) -> Mapping[int, LinkMode]: ...


@dataclass
class PlannedRound:
    """What a policy decided before drafting. The mode decision receives it back, so a policy
    keeps a round's context (channel, estimates, its optimiser's plan) here, not on itself."""

    round: int
    draft_lengths: Mapping[int, int]  # γ per active device, before the engine's budget clip
    # the verification rule per active device, fixed before drafting: True = coupled (a device
    # missing here is standard). Never chosen from p, q or the drafts: that would bias the output.
    coupled: Mapping[int, bool] = field(default_factory=dict, kw_only=True)


class RoundPolicy(Protocol):
    """Proactive plan, reactive modes and feedback, in the order the engine calls them (the
    shape of Hugging Face's candidate generator with `update_candidate_strategy`)."""

    def plan(self, round_idx: int, active: Sequence[int], caps: Mapping[int, int] | None = None) -> PlannedRound:
        """γ per active device; ``caps``: the longest draft the engine lets each one use
        (its remaining budget − 1, at most γ_max), so a budget-aware policy plans within them."""
        ...

    def modes(self, plan: PlannedRound, rejected: Sequence[int]) -> Mapping[int, LinkMode]: ...

    def observe(self, outcome: RoundOutcome) -> RoundCost | None:
        """Learn from the round; return what the round cost on the policy's clock (a planner's
        `RoundCost`), or None for a policy that keeps no clock. The engine puts it on the outcome."""
        ...


@dataclass
class PolicyPair:
    """A `RoundPolicy` made of a draft-length policy and a mode policy that learn nothing."""

    draft_lengths: DraftLengthPolicy
    mode_policy: ModePolicy
    coupled: bool = False  # every device under the coupled rule (then no mode is ever asked for)

    def plan(self, round_idx: int, active: Sequence[int], caps: Mapping[int, int] | None = None) -> PlannedRound:
        rules = {d: True for d in active} if self.coupled else {}
        return PlannedRound(round_idx, self.draft_lengths(round_idx, list(active)), coupled=rules)  # the engine clips

    def modes(self, plan: PlannedRound, rejected: Sequence[int]) -> Mapping[int, LinkMode]:
        return self.mode_policy(plan.round, list(rejected))

    def observe(self, outcome: RoundOutcome) -> None:
        return None

    @property
    def name(self) -> str:
        return f"{type(self.draft_lengths).__name__} + {type(self.mode_policy).__name__}"


@dataclass
class RoundRecord:
    """What one device did in one round."""

    round: int
    draft_len: int
    num_accepted: int
    rejection_position: int | None
    mode: LinkMode | None
    tokens_gained: int
    payload_bits: int  # the one vocabulary-wide distribution moved (0 if none)
    uplink_bits: int  # everything the device sent (drafts, q̂_j or correction id)
    downlink_bits: int  # everything the server sent (bonus/rejection, p_j or correction id)
    correction_bits: int = 0  # distribution + correction id: what the clock charges at the mode's rate
    # the device's verification rule this round; under ``coupled`` rejection_position is the first
    # mismatch y_i ≠ x*_i (x* committed there, nothing corrected: mode None, no correction bits)
    rule: VerifyRule = STANDARD

    @classmethod
    def of(cls, bits: RoundBits, **fields) -> RoundRecord:
        """A record whose bit fields come from one `WirePayload.round_bits` count."""
        return cls(
            payload_bits=bits.distribution,
            uplink_bits=bits.uplink,
            downlink_bits=bits.downlink,
            correction_bits=bits.correction,
            **fields,
        )

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def clip_new_tokens(tokens: Sequence[int], eos_ids: Sequence[int], budget: int) -> list[int]:
    """Tokens a device keeps from one round: at most `budget`, and nothing after an EOS."""
    kept: list[int] = []
    for tok in tokens[:budget]:
        kept.append(int(tok))
        if tok in eos_ids:
            break
    return kept


@dataclass
class RoundOutcome:
    """One round as the engine saw it: the plan, the verdicts' consequences and the commits."""

    round: int
    gammas: dict[int, int]  # γ of every device active at the round's start (after the clip)
    plan: PlannedRound | None = None  # the policy's plan for the round
    coupled: frozenset[int] = frozenset()  # the active devices the plan put under the coupled rule
    rejected: list[int] = field(default_factory=list)
    modes: dict[int, LinkMode] = field(default_factory=dict)
    records: dict[int, RoundRecord] = field(default_factory=dict)  # devices that committed
    kept: dict[int, list[int]] = field(default_factory=dict)  # the tokens each committed
    finished: list[int] = field(default_factory=list)  # devices done after their commit
    verdicts: dict[int, Verdict] = field(default_factory=dict)
    verify_s: float = 0.0  # the one batched verify call
    server_correction_s: float = 0.0  # residual sampling (UL) and p_j encoding (DL) at the server
    cost: RoundCost | None = None  # what the policy's observe() charged the round (None: a policy without a clock)
    # E[tokens kept | draft] of every device that drafted: the acceptance uniforms averaged out
    # (`speculative.expected_kept`); the demo's intervals use it as a control variate
    expected_tokens: dict[int, float] = field(default_factory=dict)
    # P(every drafted token passes | draft) = β_1 ⋯ β_γ of every device that drafted (1 at γ = 0):
    # the planner's E[T_comm | the round's drafts] rejects device k with 1 minus it
    draft_survival: dict[int, float] = field(default_factory=dict)


class RoundEngine:
    """Rounds over one `VerifierServer`: the policy decides, the engine does everything else.

    The server's record of each device (`verifier.records`) is the truth the budget, the EOS test
    and "finished" read, in-process and networked alike."""

    def __init__(
        self,
        verifier: VerifierServer,
        policy: RoundPolicy,
        max_new_tokens: int,
        eos_ids: Sequence[int],
        wire: WirePayload,
    ):
        if max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens: must be >= 1 (got {max_new_tokens})")
        self.verifier = verifier
        self.policy = policy
        self.max_new_tokens = max_new_tokens
        self.eos_ids = tuple(int(t) for t in eos_ids)
        self.wire = wire

    # -- per device ---------------------------------------------------------------------------

    def generated(self, d: int) -> list[int]:
        return self.verifier.generated(d)

    def budget(self, d: int) -> int:
        return self.max_new_tokens - self.verifier.num_generated(d)

    def finished(self, d: int) -> bool:
        n = self.verifier.num_generated(d)
        return n >= self.max_new_tokens or (n > 0 and self.verifier.last_token(d) in self.eos_ids)

    # -- the steps ----------------------------------------------------------------------------

    def gamma_cap(self, d: int) -> int:
        """The longest draft device d can use now: γ + 1 tokens must fit its budget."""
        return max(0, min(self.budget(d) - 1, self.verifier.gamma_max))

    def plan(self, r: int, active: Sequence[int]) -> RoundOutcome:
        """Ask the policy, telling it each device's cap, and clip each γ to it."""
        caps = {d: self.gamma_cap(d) for d in active}
        plan = self.policy.plan(r, list(active), caps)
        planned = plan.draft_lengths
        gammas = {}
        for d in active:
            try:
                want = int(planned[d])
            except (KeyError, TypeError, ValueError):
                raise ConfigError(f"draft-length policy: no integer γ for device {d} in round {r}") from None
            gammas[d] = max(0, min(want, caps[d]))
        coupled = frozenset(d for d in active if bool(plan.coupled.get(d, False)))
        return RoundOutcome(r, gammas, plan, coupled)

    def rule(self, out: RoundOutcome, d: int) -> VerifyRule:
        """Device d's verification rule this round (the plan's, fixed before it drafted)."""
        return COUPLED if d in out.coupled else STANDARD

    def verify(self, out: RoundOutcome, drafts: Mapping[int, Draft]) -> None:
        """One batched verify of every draft that arrived, then the modes of the rejected set."""
        if drafts:
            t0 = time.perf_counter()
            out.verdicts = self.verifier.verify(dict(drafts), out.coupled)
            out.verify_s = time.perf_counter() - t0
            # outside verify_s: a measurement's cost, not the protocol's
            beta = self.verifier.accept_probabilities()
            out.expected_tokens = {
                d: expected_kept(beta[d], drafts[d].tokens, self.eos_ids, self.budget(d)) for d in drafts
            }
            out.draft_survival = {d: draft_survival(beta[d]) for d in drafts}
        out.rejected = [d for d in drafts if out.verdicts[d].rejected]
        chosen = dict(self.policy.modes(out.plan, list(out.rejected)))  # type: ignore[arg-type]
        for d in out.rejected:
            if chosen.get(d) not in LINK_MODES:
                raise ConfigError(
                    f"mode policy: need 'ul' or 'dl' for device {d} in round {out.round} (got {chosen.get(d)!r})"
                )
        out.modes = {d: chosen[d] for d in out.rejected}

    def correct_remotely(self, out: RoundOutcome, d: int, q_payload: bytes) -> int:
        """UL mode: the correction sampled at the server from the device's q̂_j."""
        t0 = time.perf_counter()
        token = self.verifier.correct_remotely(d, q_payload)
        out.server_correction_s += time.perf_counter() - t0
        return token

    def p_payload(self, out: RoundOutcome, d: int) -> bytes:
        """DL mode: the encoded p_j the device corrects with."""
        t0 = time.perf_counter()
        payload = self.verifier.send_p(d)
        out.server_correction_s += time.perf_counter() - t0
        return payload

    def commit(self, out: RoundOutcome, d: int, final: int) -> list[int]:
        """Append the verdict's tokens and `final` (bonus or correction), clipped to the budget
        and the first EOS; record the round's bits; return the kept tokens."""
        v, gamma = out.verdicts[d], out.gammas[d]
        mode, rule = out.modes.get(d), self.rule(out, d)
        kept = clip_new_tokens(v.accepted_tokens + [int(final)], self.eos_ids, self.budget(d))
        self.verifier.commit(d, kept)
        out.kept[d] = kept
        out.records[d] = RoundRecord.of(
            self.wire.round_bits(gamma, mode, rule),
            round=out.round,
            draft_len=gamma,
            num_accepted=v.num_accepted,
            rejection_position=v.num_accepted if v.rejected or (rule == COUPLED and v.num_accepted < gamma) else None,
            mode=mode,
            tokens_gained=len(kept),
            rule=rule,
        )
        if self.finished(d):
            out.finished.append(d)
        return kept

    def close(self, out: RoundOutcome) -> RoundOutcome:
        """End the round: a device that drafted but did not commit gains nothing (its target
        cache goes back to what it held before the round); the policy observes the outcome."""
        for d in out.verdicts:
            if d not in out.records:
                self.verifier.abandon(d)
        out.cost = self.policy.observe(out)
        return out
