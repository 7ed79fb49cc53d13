"""The optimiser in the loop: per-round draft lengths (proactive) and modes/powers (reactive) for
the running system, from the scenario's channel and online acceptance estimates.

`ScenarioPlanner` is a `RoundPolicy` (`plan`, `modes`, `observe`: in-process and networked
alike); what each round cost is charged to its `clock` (`clock.ScenarioClock`):

- every round the channel is redrawn (block fading, `World.channel.draw(round)`), the active
  devices' Instance is built with the current acceptance estimates and the bits of the codecs
  and the pair in use (`WirePayload`: S^ul from the UL codec, S^dl from the DL codec, drafting
  uploads of id + q̂ scalar per token), and `optimize.plan` picks γ;
- with mobility or noisy pilots (`scenario.channel`: speed, pilot SNR), the channel instead
  evolves from round to round over each round's duration (`system.channel_process`) and γ is
  planned on the estimate from the previous round's pilots (naive) or over posterior channel
  draws (robust, `optimize.robust`); the modes, powers and the clock use the round's true
  channel (known after verification: pilots come with the drafts);
- after verification `optimize.reactive` picks modes, powers and bandwidths for the rejected set
  (kept on the round's `ScenarioPlannedRound`, which the engine hands back to `observe`);
- `observe` updates each device's acceptance estimate from its verdict and has the clock charge
  the round (T_comp from the γ actually drafted, T_comm from the bits each device moved under
  that decision).

The scenario's own `payload` section (a payload model for optimisation studies) is not used:
the running system plans and charges what it sends.

Policies: `adaptive` (optimal modes), `all_ul`, `all_dl`, `random` (fair coin per rejected
device), each with draft lengths optimised for its own mode rule, as in the paper's baselines;
`target_only` (γ = 0 for every device: plain decoding, one target token per device per round,
nothing to correct) runs through the same loop and clock as the reference every speculative
policy must beat.

Device ids map to the scenario's devices modulo K: in a steady-state run device k's j-th job has
id k + K·j (`DeviceSetup(prompt_queues=...)`) and keeps device k's channel and acceptance estimate.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from multispin.errors import ConfigError
from multispin.optimize.goodput import expected_comm_s, expected_tokens, goodput, rejection_prob
from multispin.optimize.objectives import EnergyModel, ObjectiveSearch, RoundScore, plan_objective
from multispin.optimize.plan import Plan, plan, target_only_plan
from multispin.optimize.reactive import ReactiveDecision, reactive
from multispin.optimize.robust import plan_on_estimate
from multispin.runtime.round.acceptance_estimate import AcceptanceEstimator
from multispin.runtime.round.clock import RoundCost, ScenarioClock
from multispin.runtime.round.engine import PlannedRound, RoundOutcome
from multispin.runtime.round.user_policy import RoundView, UserPolicy, checked_draft_lengths, checked_modes
from multispin.system.channel import ChannelState, World, coin_uniforms, stream
from multispin.system.channel_process import ChannelProcess, FadingState, uses_channel_process
from multispin.system.instance import Instance
from multispin.system.payload import WirePayload
from multispin.system.scenario import Scenario
from multispin.vocabulary import (
    PLAN_POLICIES,
    RUN_POLICIES,
    STANDARD,
    TARGET_ONLY,
    UL,
    LinkMode,
    policy_name,
    policy_verify,
)

# posterior draws of the channel (gain_ul, gain_dl), each (draws, devices): robust planning's
PosteriorGains = tuple[np.ndarray, np.ndarray]


def planned_rules(proactive: Plan, active: Sequence[int]) -> dict[int, bool]:
    """The verification rule per active device from an optimiser plan: its per-device bool array
    ``coupled`` (in ``active``'s order) where the plan has one, else every device standard. Read
    before drafting and passed to the engine on the planned round."""
    coupled = getattr(proactive, "coupled", None)
    if coupled is None:
        return {}
    flags = np.asarray(coupled, dtype=bool)
    if flags.shape != (len(active),):
        raise ConfigError(f"plan.coupled: need one flag per active device ({len(active)}), got shape {flags.shape}")
    return {d: bool(c) for d, c in zip(active, flags)}


@dataclass
class ScenarioPlannedRound(PlannedRound):
    """One round of the scenario: who is active, their Instance (this round's channel, the
    current estimates, the codecs' bits), the proactive plan and, after verification, the
    reactive decision (modes, powers, bandwidths) the clock charges."""

    active: list[int]
    instance: Instance  # the active devices, on the round's true channel
    proactive: Plan  # optimize.plan's result
    decision: ReactiveDecision | None = None  # optimize.reactive's result, set by `modes`
    planning_cpu_s: float = 0.0  # what `ScenarioPlanner.plan` took (thread CPU, wall)
    planning_wall_s: float = 0.0
    # a non-sum objective (scenario.optimizer.objective): the plan's score and the search that
    # picks the energy objective's modes after verification
    objective_score: RoundScore | None = None
    objective_search: ObjectiveSearch | None = None
    view: RoundView | None = None  # a user policy's view of the round (`user_policy`)


@dataclass(frozen=True)
class PlannedOn:
    """What one observed round was planned on (`ScenarioPlanner.history`): the Instance of its
    active devices (true channel, the acceptance estimates of the plan), the γ they drafted and
    their scenario device indices, all in the round's active order."""

    instance: Instance
    draft_len: np.ndarray
    devices: list[int]


@dataclass
class ScenarioPlanner:
    """Plans and charges rounds of `scenario`'s world for a system moving `payload`'s bits."""

    scenario: Scenario
    device_ids: Sequence[int]
    payload: WirePayload
    policy: str = "adaptive"
    split: str = "equal"
    online: bool = True  # update acceptance estimates from verdicts
    prior_alpha: np.ndarray | None = None  # default: the scenario's per-device α
    n_saa: int | None = None
    # the draft-length search run every round (`optimize.plan` policies): "fast" plans within a
    # tenth of the round at K = 20 (docs/optimiser.md)
    draft_policy: str = "fast"
    charge_planning: bool = False  # `ScenarioClock.charge_planning`
    # per observed round: what it was planned on
    history: list[PlannedOn] = field(default_factory=list)
    # a user's policy (`user_policy.UserPolicy`): its draft-length and mode rules replace the
    # planner's; the channel, estimates, clock and exactness are the same
    user_policy: UserPolicy | None = None
    # the scenario's drop and channel, when the caller has built them (a run's set-up hands its
    # own down); left out, built here. A `World` is a pure function of its scenario: one serves
    # every planner of that scenario
    world: World = None  # type: ignore[assignment]  # None until __post_init__ builds it

    def __post_init__(self) -> None:
        self.policy = policy_name(self.policy)
        self.device_ids = list(self.device_ids)
        if len(self.device_ids) != self.scenario.devices.count:
            raise ConfigError(
                f"devices: the scenario has {self.scenario.devices.count} devices, the run has {len(self.device_ids)}"
            )
        if self.draft_policy not in PLAN_POLICIES:
            raise ConfigError(
                f"draft_policy: unknown value {self.draft_policy!r} (allowed: {', '.join(PLAN_POLICIES)})"
            )
        if not isinstance(self.payload, WirePayload):
            raise ConfigError(f"payload: need a WirePayload (the codecs' bits), got {type(self.payload).__name__}")
        if self.world is None:
            self.world = World(self.scenario)
        elif self.world.scenario != self.scenario:
            raise ConfigError("world: built from another scenario than the planner's (give the world of its scenario)")
        self.objective = self.scenario.optimizer.objective
        if self.objective != "sum" and self.scenario.channel.planning == "robust":
            raise ConfigError(
                f"objective: {self.objective!r} plans on the known channel; channel.planning "
                "'robust' allows the objective 'sum' only"
            )
        self._slots = len(self.device_ids)
        self._slot_of_id = {d: i for i, d in enumerate(self.device_ids)}
        prior = self.world.drop.alpha if self.prior_alpha is None else self.prior_alpha
        self.estimator = AcceptanceEstimator(prior)
        # the coupled rule's acceptance is its own rate: a policy that may verify coupled keeps a
        # second estimator, fed by coupled rounds only, from the drop's coupled prior (measured or assumed)
        self.verify = policy_verify(self.policy)
        self.coupled_estimator = None
        if self.verify != STANDARD:
            if self.scenario.channel.planning == "robust":
                raise ConfigError(
                    f"policy: {self.policy!r} chooses the coupled rule on the known channel; channel.planning "
                    "'robust' plans standard verification only"
                )
            self.coupled_estimator = AcceptanceEstimator(self.world.drop.coupled_alpha(prior))
        self._n_saa = self.n_saa or self.scenario.optimizer.n_saa
        # mobility / noisy pilots: the channel process, its last block and the last round's duration
        self.process = (
            ChannelProcess(self.scenario, self.world.drop.distance_m) if uses_channel_process(self.scenario) else None
        )
        self._fading: dict[int, FadingState] = {}
        self._last_round_s = 0.0
        self._last_rejected: tuple[int, ...] = ()  # a user policy's view of the last round
        self._last_accepted: dict[int, int] = {}
        self._last_latency_s: float | None = None
        # this round's channel of every scenario device (retransmissions)
        self._true_channel: ChannelState | None = None
        self.clock = ScenarioClock(self.scenario, self.charge_planning)

    def _index(self, d: int) -> int:
        """The scenario device that device id d is: itself, or the device whose job d is (d mod K)."""
        slot = self._slot_of_id.get(d)
        return slot if slot is not None else self._slot_of_id[self.device_ids[d % self._slots]]

    # -- the round policy -----------------------------------------------------------------

    def _round_channel(self, round_idx: int) -> tuple[ChannelState, ChannelState, PosteriorGains | None]:
        """This round's true channel, the channel the planner sees, and (robust planning) posterior
        draws (gain_ul, gain_dl) of the true one, all for every scenario device."""
        if self.process is None:  # the paper's: a fresh block, known exactly
            ch = self.world.channel.draw(round_idx)
            return ch, ch, None
        state, est = self.process.step(self._fading.get(round_idx - 1), round_idx, self._last_round_s)
        self._fading = {round_idx: state}  # only the last block is ever needed
        posterior = None
        if self.scenario.channel.planning == "robust":
            posterior = est.posterior_gains(
                stream(self.scenario.seed, "posterior", round_idx), self._n_saa, self.scenario.radio.reciprocity
            )
        return self.process.gains(state), est.naive(), posterior

    def plan(
        self, round_idx: int, active: Sequence[int], caps: Mapping[int, int] | None = None
    ) -> ScenarioPlannedRound:
        """γ for the active devices from this round's channel (or its estimate) and the current
        acceptance estimates, never past a device's cap (``caps``: the engine's remaining budget − 1);
        the plan's instance carries the true channel, which the modes and the clock use. The time it
        took (thread CPU and wall) rides on the plan to the round's cost."""
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        rplan = self._plan(round_idx, active, caps)
        rplan.planning_cpu_s, rplan.planning_wall_s = time.thread_time() - cpu0, time.perf_counter() - wall0
        return rplan

    def _plan(
        self, round_idx: int, active: Sequence[int], caps: Mapping[int, int] | None = None
    ) -> ScenarioPlannedRound:
        active = list(active)
        inst, seen, posterior, gamma_cap = self._round_instances(round_idx, active, caps)
        if self.user_policy is not None:
            return self._user_plan(self.user_policy, round_idx, active, inst, seen, gamma_cap)
        if self.policy == TARGET_ONLY:
            return ScenarioPlannedRound(round_idx, {d: 0 for d in active}, active, inst, target_only_plan(inst))
        proactive, score, search = self._optimise(round_idx, seen, posterior)
        # a round with no observation after it (the forecast) ages the channel by its planned duration
        self._last_round_s = proactive.goodput.t_comp_s + proactive.goodput.e_t_comm_s
        gammas = {d: int(g) for d, g in zip(active, proactive.draft_len)}
        if self.coupled_estimator is not None:  # the modes, the clock and a forecast score this mask
            inst = inst.replace(coupled=np.asarray(proactive.coupled, dtype=bool))
        return ScenarioPlannedRound(
            round_idx,
            gammas,
            active,
            inst,
            proactive,
            objective_score=score,
            objective_search=search,
            coupled=planned_rules(proactive, active),
        )

    def _round_instances(
        self, round_idx: int, active: list[int], caps: Mapping[int, int] | None
    ) -> tuple[Instance, Instance, PosteriorGains | None, np.ndarray | None]:
        """The active devices' Instance on this round's true channel and on the channel the
        planner sees (the same object when it sees the true one), each with the current acceptance
        estimates, the bits of the codecs in use and the caps; the posterior channel draws of the
        active devices (robust planning, else None); and the caps as γ bounds (None: no caps)."""
        idx = [self._index(d) for d in active]
        true_ch, seen_ch, posterior = self._round_channel(round_idx)
        fields = self._estimates_and_bits()
        gamma_cap = None
        if caps is not None:
            gmax = self.scenario.optimizer.gamma_max
            gamma_cap = np.array([min(max(int(caps[d]), 0), gmax) for d in active], dtype=np.int64)

        def wired(ch: ChannelState) -> Instance:
            return self.world.instance(round_idx, ch).replace(**fields).subset(idx).replace(gamma_cap=gamma_cap)

        inst = wired(true_ch)
        self._true_channel = true_ch
        seen = inst if seen_ch is true_ch else wired(seen_ch)
        seen_posterior = None if posterior is None else (posterior[0][:, idx], posterior[1][:, idx])
        return inst, seen, seen_posterior, gamma_cap

    def _estimates_and_bits(self) -> dict[str, object]:
        """The Instance fields every device of the scenario plans with this round: its acceptance
        estimate (the coupled rule's too where the policy may verify coupled) and the bits of the
        codecs and the pair in use."""
        wire, k = self.payload, self.scenario.devices.count
        fields: dict[str, object] = {
            "alpha": self.estimator.alpha if self.online else np.asarray(self.world.drop.alpha),
            "payload_bits": np.full(k, float(wire.correction_bits("ul"))),
            "dl_payload_bits": np.full(k, float(wire.correction_bits("dl"))),
            "draft_upload_bits_per_token": float(wire.draft_bits_per_token),
        }
        if self.coupled_estimator is not None:
            est = self.coupled_estimator
            fields["alpha_coupled"] = est.alpha if self.online else np.asarray(est.prior)
            fields["coupled_upload_bits_per_token"] = float(wire.id_bits)  # a coupled draft moves token ids only
        return fields

    def _optimise(
        self, round_idx: int, seen: Instance, posterior: PosteriorGains | None
    ) -> tuple[Plan, RoundScore | None, ObjectiveSearch | None]:
        """The optimiser's plan of γ under the policy's mode rule on what the planner sees: on the
        estimate or over the posterior draws (robust), then, for an objective other than the sum,
        the objective's search from that plan (with its score and the search itself)."""
        modes = RUN_POLICIES[self.policy]
        u = stream(self.scenario.seed, "saa", round_idx).random((self._n_saa, seen.num_devices))
        mode_u = stream(self.scenario.seed, "modes", round_idx).random(u.shape) if modes == "random" else None
        split = self.split
        if posterior is None:
            proactive = plan(
                seen,
                uniforms=u,
                modes=modes,
                split=split,
                mode_uniforms=mode_u,
                policy=self.draft_policy,
                verify=self.verify,
            )
        else:
            proactive = plan_on_estimate(seen, u, "robust", posterior, modes=modes, split=split, mode_uniforms=mode_u)
        if self.objective == "sum":
            return proactive, None, None
        return plan_objective(
            seen,
            self.objective,
            uniforms=u,
            energy=EnergyModel.of(self.scenario),
            modes=modes,
            split=split,
            mode_uniforms=mode_u,
            starts=[proactive.draft_len],
            verify=self.verify,
        )

    def _user_plan(
        self,
        policy: UserPolicy,
        round_idx: int,
        active: list[int],
        inst: Instance,
        seen: Instance,
        gamma_cap: np.ndarray | None,
    ) -> ScenarioPlannedRound:
        """The user policy's γ (checked), planned on what the planner sees; its plan's goodput is
        that of those γ under optimal modes (what the round could give, for the planned column)."""
        gmax = self.scenario.optimizer.gamma_max
        u = stream(self.scenario.seed, "saa", round_idx).random((self._n_saa, len(active)))
        caps = gamma_cap if gamma_cap is not None else np.full(len(active), gmax, dtype=np.int64)
        view = RoundView(
            round_idx, tuple(active), np.asarray(seen.gain_ul), np.asarray(seen.gain_dl), np.asarray(seen.alpha),
            np.asarray(caps), gmax, self._last_rejected, seen, u, self.split,
            dict(self._last_accepted), self._last_latency_s, self.draft_policy,
        )  # fmt: skip
        self._last_rejected = ()  # set again by `_user_modes` if this round rejects anyone
        gamma = checked_draft_lengths(policy, view)
        g = goodput(seen, gamma, u, "optimal", self.split)
        proactive = Plan(
            gamma, g, "user", "optimal", self.split, expected_tokens(seen, gamma), rejection_prob(seen, gamma)
        )
        self._last_round_s = g.t_comp_s + g.e_t_comm_s
        gammas = {d: int(x) for d, x in zip(active, gamma)}
        return ScenarioPlannedRound(round_idx, gammas, active, inst, proactive, view=view)

    def _user_modes(
        self, policy: UserPolicy, rplan: ScenarioPlannedRound, rejected: Sequence[int], mask: np.ndarray
    ) -> dict[int, LinkMode]:
        """The user policy's modes (checked); the reactive solver sets powers and bandwidths for
        them (its coin rule with each coin fixed to the mode: UL where the coin is < 1/2)."""
        assert rplan.view is not None, "_user_modes: a round `_user_plan` planned"
        chosen = checked_modes(policy, rplan.view, rejected)
        self._last_rejected = tuple(sorted(rejected))
        coins = np.array([0.0 if chosen.get(d) == UL else 1.0 for d in rplan.active])[None, :]
        decision = reactive(mask, rplan.instance, split=self.split, modes="random", mode_uniforms=coins)
        rplan.decision = decision
        pos = {d: i for i, d in enumerate(rplan.active)}
        return {d: decision.link(pos[d]) for d in rejected}

    def modes(self, rplan: ScenarioPlannedRound, rejected: Sequence[int]) -> dict[int, LinkMode]:
        """Modes, powers and bandwidths for the rejected set; the decision stays on the plan."""
        pos = {d: i for i, d in enumerate(rplan.active)}
        mask = np.zeros(len(rplan.active), dtype=bool)
        mask[[pos[d] for d in rejected]] = True
        if self.user_policy is not None:
            return self._user_modes(self.user_policy, rplan, rejected, mask)
        coins = self._coins(rplan)
        mode_u = None if coins is None else coins[None, :]
        modes = RUN_POLICIES[self.policy]
        search, score = rplan.objective_search, rplan.objective_score
        if search is not None and score is not None and self.objective == "energy" and modes == "optimal":
            # the energy objective's modes for this rejected set (not the UL prefix in general), at
            # the plan's value as Dinkelbach's λ; the reactive solver then sets the powers for them
            # (its coin policy with coins fixed to the modes: UL where the coin is < 1/2)
            ul = search.energy_modes(mask, score.value)[0]
            modes, mode_u = "random", np.where(ul, 0.0, 1.0)[None, :]
        decision = reactive(mask, rplan.instance, split=self.split, modes=modes, mode_uniforms=mode_u)
        rplan.decision = decision
        return {d: decision.link(pos[d]) for d in rejected}

    def lasted(self, duration_s: float) -> None:
        """The round just planned lasted ``duration_s`` (a model of the round with no observation
        after it: the forecast): the channel ages over that before the next round, as it ages over
        a running round's charged latency in `observe`."""
        self._last_round_s = float(duration_s)

    def observe(self, outcome: RoundOutcome) -> RoundCost:
        """Update the acceptance estimates, charge the round to the scenario's clock and return
        the round's cost (the engine carries it on the outcome)."""
        rplan = outcome.plan
        assert isinstance(rplan, ScenarioPlannedRound), "observe: the outcome of a round this planner planned"
        records = outcome.records
        pos = {d: i for i, d in enumerate(rplan.active)}
        gamma = np.zeros(len(rplan.active), dtype=int)
        for d, r in records.items():
            gamma[pos[d]] = r.draft_len
            if self.online:
                est = self.coupled_estimator if r.rule != STANDARD and self.coupled_estimator else self.estimator
                est.update(self._index(d), r.draft_len, r.num_accepted, r.rejection_position is not None)
        self.history.append(PlannedOn(rplan.instance, gamma, [self._index(d) for d in rplan.active]))
        cost = self.clock.charge(rplan, records, gamma, self._true_channel, self._index)
        cost.conditioned_comm_latency_s = self._conditioned_comm_s(rplan, outcome, gamma)
        self._last_round_s = cost.latency_s  # the channel ages over the round's actual duration
        if self.user_policy is not None:  # what a learning policy sees of this round next round
            self._last_accepted = {d: int(r.num_accepted) for d, r in records.items()}
            self._last_latency_s = float(cost.latency_s)
        return cost

    def _conditioned_comm_s(
        self, rplan: ScenarioPlannedRound, outcome: RoundOutcome, gamma: np.ndarray
    ) -> float | None:
        """E[T_comm | the round's drafts]: the clock's T_comm of the round's decision averaged over
        the rejected sets the acceptance test could have drawn, device k rejected with 1 − β_1 ⋯ β_γ
        of its own draft (`RoundOutcome.draft_survival`), as `expected_tokens` averages its tokens.
        None where a round's T_comm is not the reactive decision's alone: a device that drafted and
        did not commit, cut corrections (a deadline), the energy objective's own modes."""
        if (
            self.user_policy is not None  # its mode rule is not one the expectation knows
            or self.scenario.channel.correction_deadline_s is not None
            or self.objective != "sum"
            or set(outcome.records) != set(rplan.active)
        ):
            return None
        survival = outcome.draft_survival
        if any(g > 0 and d not in survival for d, g in zip(rplan.active, gamma)):
            return None
        # a coupled device is never corrected, whatever its draft: it adds no T_comm
        reject = np.array(
            [1.0 - survival[d] if g > 0 and not rplan.coupled.get(d) else 0.0 for d, g in zip(rplan.active, gamma)]
        )
        rng = stream(self.scenario.seed, "conditioned_comm", rplan.round)
        modes = RUN_POLICIES[self.policy]
        return expected_comm_s(rplan.instance, np.clip(reject, 0.0, 1.0), modes, self.split, self._coins(rplan), rng)

    def _coins(self, rplan: ScenarioPlannedRound) -> np.ndarray | None:
        """The random mode policy's fair coin of the round, one uniform per active device id (as
        `generate` flips it); None under every other policy."""
        if RUN_POLICIES[self.policy] != "random":
            return None
        return coin_uniforms(self.scenario.seed, rplan.round, rplan.active)
