"""The model's forecast of a running system's goodput, independent of any run.

The forecast replays, at the model level, what the running planner goes through:

- **channels**: fresh block-fading draws (rounds far past any run's, so it never sees a realised
  channel); ``channels="run"`` instead replays the run's own channel rounds 0, 1, … in every
  replica: the forecast given the channel a run saw (the drop is the seed's either way), which
  takes the channel's luck out of a realised / forecast check and nothing else: the channel is
  drawn by the same generator in the run and in the model. Under mobility the channel ages
  between rounds over each model round's duration on the true channel (T_comp + E[T_comm] as
  scored), as the run's ages over each round's charged latency;
- **jobs** (``max_new_tokens``): every device starts a fresh prompt with that budget and a new one
  as soon as its job ends, as a steady-state testbed run does; each round the planner is told each
  device's cap (remaining budget − 1, the round engine's clip), and the tokens each device gains
  (drawn from the i.i.d. model at the scenario's α) spend its budget. With ``max_new_tokens=None``
  the prompts never end (the budget-blind forecast);
- **prompts differ** (``spread``): each job draws its own α from a Beta distribution around its
  device's α with the task's measured between-prompt spread (`acceptance.spread`); its
  verdicts and its tokens follow that α. Without it every job has its device's α;
- **estimates** (``online``): the planner plans on the running system's online estimator, fed with
  verdicts drawn from the model, so the forecast carries the same estimation noise the run does
  (and, with ``spread``, the same signal: a device on an easy prompt is seen to be one);
  without it the planner plans on the scenario's α itself.

Each round's plan is scored by the analytic model at each job's α (the truth of the forecast):
Σ E[N_k] exactly (capped at each job's budget), T_comp of the planned γ, E[T_comm] over fresh
outcome uniforms. The forecast is the ratio of sums over ``replicas`` runs of ``horizon`` rounds
(each a fresh estimator and fresh prompts, like a seed of the run).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from multispin.acceptance.spread import job_alpha_quantile
from multispin.optimize.montecarlo import analytic_round
from multispin.runtime.round.planner import ScenarioPlanner
from multispin.system.channel import World
from multispin.system.payload import WirePayload
from multispin.system.scenario import Scenario
from multispin.vocabulary import RUN_POLICIES

# channel rounds the forecast plans on: far past any run, so it never sees a realised channel
FORECAST_ROUND_OFFSET = 1 << 40


def draw_accepted(alpha: np.ndarray, gamma: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Accepted draft tokens per device under the i.i.d. model: P(at least i accepted) = α^i, at
    most γ."""
    u = rng.random(alpha.shape)
    with np.errstate(divide="ignore"):
        run = np.floor(np.log(u) / np.log(np.clip(alpha, 1e-12, 1 - 1e-12)))
    return np.minimum(run, gamma).astype(np.int64)


def van_der_corput(i: np.ndarray) -> np.ndarray:
    """The i-th points of the base-2 van der Corput sequence: any first n of them cover [0, 1)
    evenly (one in each of n equal cells, to within a factor of 2)."""
    i = np.asarray(i, dtype=np.int64).copy()
    out, scale = np.zeros(i.shape), 0.5
    while np.any(i):
        out += (i & 1) * scale
        i >>= 1
        scale /= 2
    return out


class JobAlphas:
    """Each device's jobs' α for the forecast: device d's j-th job takes the j-th point of its own
    randomly shifted van der Corput sequence through the Beta quantile (`job_alpha_quantile`).
    A forecast sees a few jobs per device; independent draws leave it lucky or unlucky (at 40
    rounds and a 0.04 spread, 4% sd between forecast seeds), evenly spread quantiles do not."""

    def __init__(self, mean: np.ndarray, sd: np.ndarray, rng: np.random.Generator):
        self.mean, self.sd = np.asarray(mean, dtype=float), np.asarray(sd, dtype=float)
        self.shift = rng.random(self.mean.shape)
        self.jobs = np.zeros(self.mean.shape, dtype=np.int64)

    def next(self, devices: np.ndarray) -> np.ndarray:
        """α of the next job of each of ``devices`` (indices)."""
        u = (van_der_corput(self.jobs[devices]) + self.shift[devices]) % 1.0
        self.jobs[devices] += 1
        return job_alpha_quantile(self.mean[devices], self.sd[devices], u)


def forecast_goodput(
    scenario: Scenario,
    payload: WirePayload,
    policy: str,
    rounds: int = 40,
    split: str = "equal",
    seed: int = 0,
    *,
    max_new_tokens: int | None = None,
    online: bool = False,
    horizon: int | None = None,
    spread: np.ndarray | list[float] | None = None,
    truth_alpha: np.ndarray | list[float] | None = None,
    channels: str = "fresh",
    world: World | None = None,
) -> dict[str, float]:
    """Forecast goodput Σ E[N] / Σ (T_comp + E[T_comm]) over ``rounds`` model rounds (module
    docstring), next to the same plans' free-communication value Σ E[N] / Σ T_comp. ``horizon``:
    rounds per replica (the run's length; default ``rounds``); ``spread``: per device, the sd of
    its jobs' α around its own (default: none); ``truth_alpha``: per device, the acceptance its jobs
    really have where it differs from the α the planner starts from (the scenario's): a what-if
    for a prior that is off, e.g. a run's prior against the rates its verdicts showed; ``channels``:
    ``"fresh"`` (the forecast) or ``"run"`` (every replica on the run's channel rounds 0 … horizon − 1);
    ``world``: the scenario's `World` where the caller has built it (default: built here, once for
    every replica)."""
    if channels not in ("fresh", "run"):
        raise ValueError(f"channels: 'fresh' or 'run' (got {channels!r})")
    world = World(scenario) if world is None else world
    k = scenario.devices.count
    horizon = max(1, min(horizon or rounds, rounds))
    rng = np.random.default_rng([seed, 43])
    sd, given_truth = _per_device_inputs(k, spread, truth_alpha)
    jobs = None  # each job's α, from a stream of its own: without spread the forecast is what it was
    tally = _Tally()
    r = FORECAST_ROUND_OFFSET
    for _ in range(-(-rounds // horizon)):
        if channels == "run":
            r = 0
        planner = ScenarioPlanner(scenario, range(k), payload, policy=policy, split=split, online=online, world=world)
        prior = np.asarray(planner.world.drop.alpha, dtype=float)
        device_alpha = prior if given_truth is None else given_truth
        if sd is not None and jobs is None:
            jobs = JobAlphas(device_alpha, sd, np.random.default_rng([seed, 44]))
        truth = device_alpha if jobs is None else jobs.next(np.arange(k))
        r = _run_replica(planner, truth, jobs, r, horizon, max_new_tokens, split, online, rng, tally)
    return tally.figures(prior)


def _per_device_inputs(
    k: int, spread: np.ndarray | list[float] | None, truth_alpha: np.ndarray | list[float] | None
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``spread`` and ``truth_alpha`` as arrays of one value per device (None: not given; a spread
    of zeros is none)."""
    sd = None if spread is None else np.asarray(spread, dtype=float)
    if sd is not None and sd.shape != (k,):
        raise ValueError(f"spread: need one sd per device ({k}), got {sd.size}")
    if sd is not None and not np.any(sd > 0):
        sd = None
    given_truth = None if truth_alpha is None else np.asarray(truth_alpha, dtype=float)
    if given_truth is not None and given_truth.shape != (k,):
        raise ValueError(f"truth_alpha: need one α per device ({k}), got {given_truth.size}")
    return sd, given_truth


@dataclass
class _Tally:
    """What the forecast adds up over its model rounds and replicas."""

    tokens: float = 0.0
    comp: float = 0.0
    comm: float = 0.0
    replica_goodput: list[float] = field(default_factory=list)  # each replica's realised tokens over its time
    gammas: list[np.ndarray] = field(default_factory=list)  # per model round: the plan's γ
    estimates: list[np.ndarray] = field(default_factory=list)  # ... and the acceptance estimates it planned on

    def figures(self, prior: np.ndarray) -> dict[str, float]:
        """The forecast's figures (`forecast_goodput`'s return)."""
        tokens, comp, comm = self.tokens, self.comp, self.comm
        g = np.array(self.gammas)
        return {
            "forecast_tokens_per_s": tokens / (comp + comm),
            "forecast_free_comm_tokens_per_s": tokens / comp,
            # per model round, beside the run's own figures (where a gap sits)
            "forecast_tokens_per_round": tokens / len(g),
            "forecast_t_comp_s": comp / len(g),
            "forecast_t_comm_s": comm / len(g),
            "forecast_mean_gamma": float(g.mean()),
            "forecast_drafting_share": float(np.mean(g > 0)),
            **one_run_range(self.replica_goodput, tokens / (comp + comm)),
            **{f"forecast_{key}": v for key, v in estimate_figures(np.array(self.estimates), prior).items()},
        }


def _run_replica(
    planner: ScenarioPlanner,
    truth: np.ndarray,
    jobs: JobAlphas | None,
    r: int,
    horizon: int,
    max_new_tokens: int | None,
    split: str,
    online: bool,
    rng: np.random.Generator,
    tally: _Tally,
) -> int:
    """One replica: ``horizon`` model rounds of ``planner`` from round ``r`` on jobs whose acceptance
    is ``truth``, added to ``tally``; the round after its last."""
    k = len(truth)
    gmax = planner.scenario.optimizer.gamma_max
    fresh = None if max_new_tokens is None else int(max_new_tokens)
    budget = None if fresh is None else np.full(k, fresh)
    drawn = spent = 0.0
    for _ in range(horizon):
        caps = None if budget is None else {d: int(min(budget[d] - 1, gmax)) for d in range(k)}
        rp = planner.plan(r, range(k), caps)
        r += 1
        gamma = np.asarray(rp.proactive.draft_len, dtype=np.int64)
        coupled, truth_c = _coupled_truth(planner, rp, truth)
        n, tc, tm = analytic_round(
            rp.instance.replace(alpha=truth, alpha_coupled=truth_c), gamma, RUN_POLICIES[planner.policy], split, rng
        )
        tally.tokens, tally.comp, tally.comm = tally.tokens + n, tally.comp + tc, tally.comm + tm
        # the run's channel ages over each round's duration on the true channel, not the planned one
        planner.lasted(tc + tm)
        tally.gammas.append(gamma)
        tally.estimates.append(np.asarray(rp.instance.alpha, dtype=float))
        accepted = draw_accepted(truth if truth_c is None else np.where(coupled, truth_c, truth), gamma, rng)
        drawn, spent = drawn + float(np.sum(accepted + 1)), spent + tc + tm
        if online:
            for d in range(k):
                est = planner.coupled_estimator if coupled[d] else planner.estimator
                est.update(d, int(gamma[d]), int(accepted[d]), bool(accepted[d] < gamma[d]))
        if budget is not None and fresh is not None:
            budget -= accepted + 1
            ended = budget <= 0
            budget[ended] = fresh  # the job ended: a fresh prompt next round
            if jobs is not None and np.any(ended):
                truth = truth.copy()
                truth[ended] = jobs.next(np.flatnonzero(ended))
    tally.replica_goodput.append(drawn / spent if spent > 0 else 0.0)
    return r


def _coupled_truth(planner: ScenarioPlanner, rp, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(which devices the round's plan verifies coupled, their jobs' coupled α): each job's α times
    its device's coupled/standard ratio (`DeviceDrop.coupled_ratio`), as the planner's prior is;
    ``None`` under a policy that never verifies coupled."""
    k = truth.size
    if planner.coupled_estimator is None:
        return np.zeros(k, dtype=bool), None
    coupled = np.array([bool(rp.coupled.get(d, False)) for d in range(k)])
    return coupled, planner.world.drop.coupled_alpha(truth)


MIN_REPLICAS_FOR_RANGE = 4  # fewer replicas give no honest spread


def one_run_range(replica_goodput: list[float], forecast: float) -> dict[str, float | None]:
    """The 95% range of one run of the forecast's length on the model: the forecast ± 1.96 sd of
    the replicas' goodput, each a run of that length with its own jobs, channels and acceptance draws
    (T_comm at its expectation given the drafts), cut at 0 (a goodput is not negative). None with fewer than `MIN_REPLICAS_FOR_RANGE`
    replicas (a makespan forecast is one replica)."""
    if len(replica_goodput) < MIN_REPLICAS_FOR_RANGE:
        return {"forecast_one_run_low": None, "forecast_one_run_high": None}
    g = np.asarray(replica_goodput, dtype=float)
    half = 1.96 * float(g.std(ddof=1))
    return {"forecast_one_run_low": max(0.0, forecast - half), "forecast_one_run_high": forecast + half}


def estimate_figures(estimates: np.ndarray, prior: np.ndarray) -> dict[str, float]:
    """How far the acceptance estimates a planner planned on ((rounds, K)) sat from its prior
    (K,): the mean and the sd over rounds and devices. The plans follow the online estimator, so
    a run whose estimates sit lower or wider than the forecast's drafts differently on the same
    channel (docs/system-model.md §5.5)."""
    gap = np.asarray(estimates, dtype=float) - np.asarray(prior, dtype=float)
    return {"estimate_minus_prior_mean": float(gap.mean()), "estimate_minus_prior_sd": float(gap.std())}
