"""The optimiser in the loop: per-round draft lengths (proactive) and modes/powers (reactive) for
the running system, from the scenario's channel and online acceptance estimates.

`ScenarioPlanner` is a `RoundPolicy` (`plan`, `modes`, `observe`: in-process and networked
alike) and the bookkeeper of what each round cost on the scenario's clock:

- every round the channel is redrawn (block fading, `World.channel.draw(round)`), the active
  devices' Instance is built with the current acceptance estimates and the bits of the codecs
  and the pair in use (`WirePayload`: S^ul from the UL codec, S^dl from the DL codec, drafting
  uploads of id + q̂ scalar per token), and `optimize.plan` picks γ;
- with mobility or noisy pilots (`scenario.channel`: speed, pilot SNR), the channel instead
  evolves from round to round over each round's duration (`system.channel_process`) and γ is
  planned on the estimate from the previous round's pilots (naive) or over posterior channel
  draws (robust, `optimize.robust`); the modes, powers and the clock use the round's true
  channel (known after verification: pilots come with the drafts); with
  `channel.correction_deadline_s` a correction that misses the deadline is cut there and resent
  whole at the next round on that round's channel, and the clock charges both (`_retransmit`);
- after verification `optimize.reactive` picks modes, powers and bandwidths for the rejected set
  (kept on the round's `ScenarioPlannedRound`, which the engine hands back to `observe`);
- `observe` records the round: T_comp from the γ actually drafted and the compute profile
  (drafting uploads included), T_comm as the largest airtime, over the devices that moved a
  distribution, of the correction bits each one's record says it moved, at that round's power,
  bandwidth and gain of its mode's link; and updates each device's acceptance estimate.

The scenario's own `payload` section (a payload model for optimisation studies) is not used:
the running system plans and charges what it sends.

Policies: `adaptive` (optimal modes), `all_ul`, `all_dl`, `random` (fair coin per rejected
device), each with draft lengths optimised for its own mode rule, as in the paper's baselines;
`target_only` (γ = 0 for every device: plain decoding, one target token per device per round,
nothing to correct) runs through the same loop and clock as the reference every speculative
policy must beat.

Device ids map to the scenario's devices modulo K: in a steady-state run device k's j-th job has
id k + K·j (`LocalTestbed(prompt_queues=...)`) and keeps device k's channel and acceptance estimate.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from multispin.errors import ConfigError
from multispin.optimize.goodput import t_comp_s
from multispin.optimize.plan import plan
from multispin.optimize.reactive import reactive
from multispin.runtime.round.acceptance_estimate import ALPHA_CEIL, ALPHA_FLOOR, AcceptanceEstimator  # noqa: F401
from multispin.runtime.round.engine import PlannedRound, RoundOutcome, RoundRecord
from multispin.system.channel import World, coin_uniforms, stream
from multispin.system.channel_process import ChannelProcess, uses_channel_process
from multispin.system.payload import WirePayload
from multispin.system.radio import rate_bps
from multispin.system.scenario import Scenario
from multispin.vocabulary import PLAN_POLICIES, RUN_POLICIES, TARGET_ONLY, LinkMode, policy_name


@dataclass
class RoundCost:
    """One round on the scenario's clock."""

    round: int
    draft_len: dict[int, int]
    rejected: list[int]
    modes: dict[int, str]
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
    # the clock charges (the CPU time with `ScenarioPlanner.charge_planning`, else 0)
    planning_cpu_s: float = 0.0
    planning_wall_s: float = 0.0
    planning_charged_s: float = 0.0
    # per device on the clock: the correction's airtime on its mode's link, the drafting compute
    # (γ·T_k^dft) and the drafting uploads' airtime at P^ul on B/K (both inside T_comp)
    airtime_s: dict[int, float] = field(default_factory=dict)
    draft_compute_s: dict[int, float] = field(default_factory=dict)
    draft_upload_s: dict[int, float] = field(default_factory=dict)

    @property
    def latency_s(self) -> float:
        return self.comp_latency_s + self.comm_latency_s + self.planning_charged_s

    def to_dict(self) -> dict:
        return {**self.__dict__, "latency_s": self.latency_s}


def analytic_round(
    inst, gamma: np.ndarray, modes: str, split: str, rng: np.random.Generator, samples: int = 4000
) -> tuple[float, float, float]:
    """The analytic model of one round at draft lengths γ: (Σ E[N_k] exactly, T_comp, E[T_comm] over
    `samples` fresh outcome uniforms)."""
    from multispin.optimize.goodput import expected_tokens
    from multispin.optimize.reactive import t_comm_batch

    u = rng.random((samples, inst.num_devices))
    rejected = u > inst.survival[np.arange(inst.num_devices), gamma]
    mu = rng.random(u.shape) if modes == "random" else None
    return (
        float(expected_tokens(inst, gamma).sum()),
        float(t_comp_s(inst, gamma)),
        float(t_comm_batch(rejected, inst, modes, split, mu).mean()),
    )


def model_predictions(planner: ScenarioPlanner, mc_rounds: int, seed: int) -> dict[str, float]:
    """What the analytic model and the Monte Carlo simulator predict for the rounds the planner
    ran, at the draft lengths actually used and the scenario's (profile) acceptance rates: the
    ratio Σ tokens / Σ time, comparable with the running system's `goodput_tokens_per_s`."""
    from multispin.optimize.montecarlo import simulate_rounds

    modes = RUN_POLICIES[planner.policy]
    rng = np.random.default_rng([seed, 41])
    a_tok = a_time = mc_tok = mc_time = 0.0
    for inst, gamma, index in planner.history:
        profile = inst.replace(alpha=planner.world.drop.alpha[index])
        tokens, comp, comm = analytic_round(profile, gamma, modes, planner.split, rng)
        a_tok += tokens
        a_time += comp + comm
        mc = simulate_rounds(profile, gamma, mc_rounds, rng, modes=modes, split=planner.split)
        mc_tok += mc.tokens / mc_rounds
        mc_time += mc.time_s / mc_rounds
    return {
        "analytic_tokens_per_s": a_tok / a_time if a_time else 0.0,
        "montecarlo_tokens_per_s": mc_tok / mc_time if mc_time else 0.0,
    }


def target_only_plan(inst):
    """The plan of plain decoding: γ = 0 everywhere, one token per device, no communication."""
    from multispin.optimize.goodput import expected_tokens, goodput, rejection_prob
    from multispin.optimize.plan import Plan

    gamma = np.zeros(inst.num_devices, dtype=int)
    g = goodput(inst, gamma, np.zeros((1, inst.num_devices)))  # nothing is ever rejected at γ = 0
    return Plan(gamma, g, TARGET_ONLY, "optimal", "equal", expected_tokens(inst, gamma), rejection_prob(inst, gamma))


@dataclass
class ScenarioPlannedRound(PlannedRound):
    """One round of the scenario: who is active, their Instance (this round's channel, the
    current estimates, the codecs' bits), the proactive plan and, after verification, the
    reactive decision (modes, powers, bandwidths) the clock charges."""

    active: list[int] = field(default_factory=list)
    instance: Any = None  # optimize Instance of the active devices
    proactive: Any = None  # optimize.plan's result
    decision: Any = None  # optimize.reactive's result, set by `modes`
    planning_cpu_s: float = 0.0  # what `ScenarioPlanner.plan` took (thread CPU, wall)
    planning_wall_s: float = 0.0
    # a non-sum objective (scenario.optimizer.objective): the plan's score and the search that
    # picks the energy objective's modes after verification
    objective_score: Any = None
    objective_search: Any = None


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
    # charge each round the CPU time its planning took (on the round's critical path: γ is known
    # only once planned); measured and recorded either way. Off by default: the host's CPU time
    # is not the scenario's server's and would make the virtual clock non-deterministic.
    charge_planning: bool = False
    rounds: list[RoundCost] = field(default_factory=list)
    # per round: (Instance of the active devices, γ drafted, their scenario indices)
    history: list[tuple] = field(default_factory=list)

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
        self.world = World(self.scenario)
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
        self._n_saa = self.n_saa or self.scenario.optimizer.n_saa
        # mobility / noisy pilots: the channel process, its last block and the last round's duration
        self.process = (
            ChannelProcess(self.scenario, self.world.drop.distance_m) if uses_channel_process(self.scenario) else None
        )
        self._fading: dict[int, Any] = {}
        self._last_round_s = 0.0
        self._true_channel = None  # this round's channel of every scenario device (retransmissions)
        self._pending: dict[int, tuple[int, str]] = {}  # device id → (bits, mode) of a cut correction

    def _index(self, d: int) -> int:
        """The scenario device that device id d is: itself, or the device whose job d is (d mod K)."""
        slot = self._slot_of_id.get(d)
        return slot if slot is not None else self._slot_of_id[self.device_ids[d % self._slots]]

    # -- the round policy -----------------------------------------------------------------

    def _round_channel(self, round_idx: int):
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
        idx = [self._index(d) for d in active]
        true_ch, seen_ch, posterior = self._round_channel(round_idx)
        alpha = self.estimator.alpha if self.online else np.asarray(self.world.drop.alpha)
        wire, k = self.payload, self.scenario.devices.count
        gamma_cap = None
        if caps is not None:
            gmax = self.scenario.optimizer.gamma_max
            gamma_cap = np.array([min(max(int(caps[d]), 0), gmax) for d in active], dtype=np.int64)

        def wired(ch):
            return (
                self.world.instance(round_idx, ch)
                .replace(
                    alpha=alpha,
                    payload_bits=np.full(k, float(wire.correction_bits("ul"))),
                    dl_payload_bits=np.full(k, float(wire.correction_bits("dl"))),
                    draft_upload_bits_per_token=float(wire.draft_bits_per_token),
                )
                .subset(idx)
                .replace(gamma_cap=gamma_cap)
            )

        inst = wired(true_ch)
        self._true_channel = true_ch
        seen = inst if seen_ch is true_ch else wired(seen_ch)
        if self.policy == TARGET_ONLY:
            return ScenarioPlannedRound(round_idx, {d: 0 for d in active}, active, inst, target_only_plan(inst))
        modes = RUN_POLICIES[self.policy]
        u = stream(self.scenario.seed, "saa", round_idx).random((self._n_saa, len(idx)))
        mode_u = stream(self.scenario.seed, "modes", round_idx).random(u.shape) if modes == "random" else None
        if posterior is None:
            proactive = plan(
                seen, uniforms=u, modes=modes, split=self.split, mode_uniforms=mode_u, policy=self.draft_policy
            )
        else:
            from multispin.optimize.robust import plan_on_estimate

            proactive = plan_on_estimate(
                seen,
                u,
                "robust",
                (posterior[0][:, idx], posterior[1][:, idx]),
                modes=modes,
                split=self.split,
                mode_uniforms=mode_u,
            )
        score = search = None
        if self.objective != "sum":
            from multispin.optimize.objectives import EnergyModel, plan_objective

            proactive, score, search = plan_objective(
                seen,
                self.objective,
                uniforms=u,
                energy=EnergyModel.of(self.scenario),
                modes=modes,
                split=self.split,
                mode_uniforms=mode_u,
                starts=[proactive.draft_len],
            )
        # a round with no observation after it (the forecast) ages the channel by its planned duration
        self._last_round_s = proactive.goodput.t_comp_s + proactive.goodput.e_t_comm_s
        gammas = {d: int(g) for d, g in zip(active, proactive.draft_len)}
        return ScenarioPlannedRound(
            round_idx, gammas, active, inst, proactive, objective_score=score, objective_search=search
        )

    def modes(self, rplan: ScenarioPlannedRound, rejected: Sequence[int]) -> dict[int, LinkMode]:
        """Modes, powers and bandwidths for the rejected set; the decision stays on the plan."""
        pos = {d: i for i, d in enumerate(rplan.active)}
        mask = np.zeros(len(rplan.active), dtype=bool)
        mask[[pos[d] for d in rejected]] = True
        mode_u = None
        if RUN_POLICIES[self.policy] == "random":  # the fair coin, flipped per device id (as `generate` flips it)
            mode_u = coin_uniforms(self.scenario.seed, rplan.round, rplan.active)[None, :]
        modes = RUN_POLICIES[self.policy]
        if rplan.objective_search is not None and self.objective == "energy" and modes == "optimal":
            # the energy objective's modes for this rejected set (not the UL prefix in general), at
            # the plan's value as Dinkelbach's λ; the reactive solver then sets the powers for them
            # (its coin policy with coins fixed to the modes: UL where the coin is < 1/2)
            ul = rplan.objective_search.energy_modes(mask, rplan.objective_score.value)[0]
            modes, mode_u = "random", np.where(ul, 0.0, 1.0)[None, :]
        rplan.decision = reactive(mask, rplan.instance, split=self.split, modes=modes, mode_uniforms=mode_u)
        names = rplan.decision.mode_names()
        return {d: names[pos[d]] for d in rejected}

    def observe(self, outcome: RoundOutcome) -> RoundCost:
        """Charge the round to the scenario's clock (`rounds`), update the acceptance estimates and
        return the round's cost (the engine carries it on the outcome)."""
        rplan = outcome.plan
        assert isinstance(rplan, ScenarioPlannedRound), "observe: the outcome of a round this planner planned"
        cost = self._charge(rplan, outcome.records)
        self.rounds.append(cost)
        self._last_round_s = cost.latency_s  # the channel ages over the round's actual duration
        return cost

    # -- bookkeeping ----------------------------------------------------------------------

    def _charged_bits(self, record: RoundRecord) -> int:
        """Bits the clock charges for a device's correction: what its record says it moved."""
        return record.correction_bits

    def _airtime_s(self, rplan: ScenarioPlannedRound, bits: int, mode: str, i: int) -> tuple[float, float]:
        """(airtime of `bits` for active device index i in `mode` under this round's decision, gain)."""
        dec, inst = rplan.decision, rplan.instance
        gain = float((inst.gain_ul if mode == "ul" else inst.gain_dl)[i])
        rate = float(rate_bps(dec.bandwidth_hz[i], dec.power_w[i], gain, inst.radio.noise_psd_w_per_hz))
        return (bits / rate if rate > 0 else float("inf")), gain

    def _retransmit(self, deadline: float) -> tuple[dict[int, int], float]:
        """Resend the corrections earlier rounds cut at the deadline, one after another on the whole
        band B at the mode's full power (P^ul, or the DL budget), on this round's channel of the
        device's link; each is cut at the deadline again if it misses it. Returns the bits resent
        per device and the airtime charged."""
        r, ch = self.scenario.radio, self._true_channel
        assert ch is not None, "_retransmit: after a round was planned"
        n0 = self.scenario.noise_psd_w_per_hz
        sent, total = {}, 0.0
        for d, (bits, mode) in list(self._pending.items()):
            i = self._index(d)
            gain = float((ch.gain_ul if mode == "ul" else ch.gain_dl)[i])
            rate = float(rate_bps(r.bandwidth_hz, r.p_ul_w if mode == "ul" else r.p_dl_watts, gain, n0))
            airtime = bits / rate if rate > 0 else float("inf")
            sent[d] = bits
            total += min(airtime, deadline)
            if airtime <= deadline:
                del self._pending[d]
        return sent, total

    def _charge(self, rplan: ScenarioPlannedRound, records: dict[int, RoundRecord]) -> RoundCost:
        pos = {d: i for i, d in enumerate(rplan.active)}
        gamma = np.zeros(len(rplan.active), dtype=int)
        for d, r in records.items():
            gamma[pos[d]] = r.draft_len
            if self.online:
                self.estimator.update(self._index(d), r.draft_len, r.num_accepted, r.rejection_position is not None)
        rejected = [d for d, r in records.items() if r.rejection_position is not None]
        modes: dict[int, str] = {}
        power, bw, gain, charged, airtime = {}, {}, {}, {}, {}
        if rplan.decision is not None:
            # Charge only devices that actually moved a distribution (a dropped device moved none),
            # each for the correction bits its record says it moved, under this round's rate of its link.
            for d in rejected:
                mode = records[d].mode
                if mode is None:
                    continue
                i = pos[d]
                modes[d], charged[d] = mode, int(self._charged_bits(records[d]))
                power[d], bw[d] = float(rplan.decision.power_w[i]), float(rplan.decision.bandwidth_hz[i])
                airtime[d], gain[d] = self._airtime_s(rplan, charged[d], mode, i)
        proactive = rplan.proactive
        self.history.append((rplan.instance, gamma, [self._index(d) for d in rplan.active]))
        comm_s = max(airtime.values(), default=0.0)
        deadline = self.scenario.channel.correction_deadline_s
        deferred: dict[int, int] = {}
        retx: dict[int, int] = {}
        retx_s = 0.0
        if deadline is not None:
            retx, retx_s = self._retransmit(deadline)
            deferred = {d: charged[d] for d, a in airtime.items() if a > deadline}
            self._pending.update({d: (charged[d], modes[d]) for d in deferred})
            comm_s = min(comm_s, deadline) + retx_s
        inst = rplan.instance
        t_dft = {d: float(gamma[pos[d]] * inst.draft_latency_s[pos[d]]) for d in rplan.active}
        t_up = {
            d: float(gamma[pos[d]] * (inst.token_latency_s[pos[d]] - inst.draft_latency_s[pos[d]]))
            for d in rplan.active
        }
        return RoundCost(
            airtime_s=dict(airtime),
            draft_compute_s=t_dft,
            draft_upload_s=t_up,
            round=rplan.round,
            draft_len={d: int(gamma[pos[d]]) for d in rplan.active},
            rejected=rejected,
            modes=modes,
            power_w=power,
            bandwidth_hz=bw,
            gain=gain,
            charged_bits=charged,
            comp_latency_s=float(t_comp_s(rplan.instance, gamma)),
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
