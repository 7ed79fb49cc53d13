"""The Python API on one page: scenario → instance → plan → evaluate, and the two ways to run
real models (``generate`` in one process, ``testbed`` over real sockets).

    >>> import multispin as ms
    >>> sc = ms.scenario("paper-qwen", devices=6, p_dl_dbm=22, n_saa=200)
    >>> p = ms.plan(sc)                      # γ per device, with baselines and a certificate
    >>> p.draft_len.shape
    (6,)
    >>> p.goodput_tokens_per_s >= p.certificate.best_baseline_tokens_per_s
    True
    >>> d = p.decide(rejected=[0, 3])        # modes, powers, bandwidths for one outcome
    >>> {d.link(0), d.link(3)} <= {"ul", "dl"}
    True
    >>> ms.evaluate(p, rounds=2000).goodput_tokens_per_s > 0   # Monte Carlo of the same rounds
    True

``multispin optimize`` prints exactly what [`plan`][multispin.api.plan] returns (the CLI calls it), so a script
reproduces the command's numbers from the same scenario, round and policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the heavy layers load only when a function needs them
    from multispin.experiments.own_policy import PolicyEvaluation
    from multispin.experiments.sweep import SweepTable
    from multispin.experiments.testbed import TestbedResult
    from multispin.optimize.montecarlo import MonteCarloResult
    from multispin.optimize.plan import Certificate, OptimizeReport
    from multispin.optimize.reactive import ReactiveDecision
    from multispin.runtime.round.session import GenerationResult
    from multispin.system.instance import Instance
    from multispin.system.scenario import Scenario

__all__ = ["RoundPlan", "capacity", "evaluate", "generate", "instance", "plan", "plot", "scenario", "sweep", "testbed"]


def scenario(
    spec: str | Path | Scenario = "paper-qwen",
    *,
    devices: int | None = None,
    p_dl_dbm: float | None = None,
    p_ul_dbm: float | None = None,
    noise_figure_db: float | None = None,
    seed: int | None = None,
    n_saa: int | None = None,
    split: str | None = None,
    fields: Mapping[str, Any] | None = None,
    acceptance_profile: None | str | Path | dict | Sequence = None,
    compute_profile: None | str | Path | dict = None,
    draft: str | None = None,
    force: bool = False,
) -> Scenario:
    """A validated scenario, built the way ``--scenario`` and the flags of every verb build it.

    Args:
        spec: a preset (``paper-qwen``, ``paper-r1``, ``smollm2-cpu``), a YAML/TOML/JSON scenario
            file, or a [`Scenario`][multispin.system.scenario.Scenario].
        devices: K (``--devices``); ``None`` keeps the scenario's value, as for the next six.
        p_dl_dbm: the server's DL power budget P^dl in dBm (``--pdl-dbm``).
        p_ul_dbm: the devices' UL power P^ul in dBm (``--pul-dbm``).
        noise_figure_db: receiver noise figure in dB (``--noise-figure-db``).
        seed: the scenario seed (drop, tasks, fading, SAA samples).
        n_saa: SAA samples N_SAA.
        split: bandwidth split among rejected devices, ``equal`` or ``optimized``.
        fields: any other field by dotted name, e.g. ``{"radio.bandwidth_hz": 20e6}``.
        acceptance_profile: measured per-task acceptance (``multispin measure --out`` files).
        compute_profile: a measured compute profile (``multispin profile --out``); ``draft``
            names the draft whose T^dft every device takes (default: the drafts in turn).
        force: apply a profile measured on another vocabulary than ``payload.vocab_size``
            (``--force``): a warning instead of a ConfigError.

    Raises:
        ConfigError: a bad value, with the field and what is allowed.
    """
    from multispin.system.scenario_io import resolve_scenario, with_overrides

    sc = with_overrides(
        resolve_scenario(spec),
        devices=devices,
        p_dl_dbm=p_dl_dbm,
        p_ul_dbm=p_ul_dbm,
        noise_figure_db=noise_figure_db,
        seed=seed,
        n_saa=n_saa,
        split=split,
    )
    if fields:
        sc = sc.override(dict(fields))
    if acceptance_profile is not None:
        sc = sc.with_acceptance_profile(acceptance_profile, force=force)
    if compute_profile is not None:
        sc = sc.with_compute_profile(compute_profile, draft=draft, force=force)
    return sc


def instance(sc: Scenario, round_index: int = 0) -> Instance:
    """Round ``round_index``'s arrays (channel gains, acceptance, draft latencies, radio and
    compute parameters) of a scenario: what the optimiser decides on."""
    from multispin.system.channel import World

    return World(sc).instance(_round(round_index))


@dataclass(frozen=True)
class RoundPlan:
    """One round planned: every device's draft length γ_k, the goodput it is expected to give,
    the baselines on the same samples and the certificate; [`decide`][multispin.api.RoundPlan.decide] gives the modes and
    powers for any outcome (rejected set) of the round."""

    scenario: Scenario
    round_index: int
    instance: Instance
    report: OptimizeReport
    #: the SAA uniforms (N_SAA, K) the plan was optimised on (common random numbers)
    uniforms: np.ndarray
    #: a non-sum objective's plan on the same samples (``plan(objective=...)``), else None
    objective: dict | None = None
    #: the verification choice it was planned with (``plan(verify=...)``)
    verify: str = "standard"
    #: your own policy on the plan's samples (``plan(policy=...)``): its label, γ̄ and goodput
    #: beside the plan's, else None
    user: dict | None = None

    @property
    def coupled(self) -> np.ndarray:
        """(K,) bool: the devices that verify coupled (all False for ``verify="standard"``)."""
        return self.report.plan.coupled

    @property
    def draft_len(self) -> np.ndarray:
        """(K,) draft lengths γ_k."""
        return self.report.plan.draft_len

    @property
    def goodput_tokens_per_s(self) -> float:
        """G: expected tokens per second of the round (SAA estimate)."""
        return float(self.report.plan.goodput_tokens_per_s)

    @property
    def baselines(self) -> dict[str, float]:
        """Goodput of every baseline on the same samples (empty with ``baselines=False``)."""
        return dict(self.report.baselines)

    @property
    def certificate(self) -> Certificate:
        """The plan next to the best baseline and to the free-communication upper bound."""
        return self.report.certificate

    def decide(self, rejected, modes: str = "optimal") -> ReactiveDecision:
        """Modes (a `LinkCode` per device; ``link(i)`` names a rejected device's), powers (W),
        bandwidths (Hz) and latencies for one outcome: ``rejected`` is a list of device indices or
        a (K,) boolean mask."""
        from multispin.optimize.reactive import reactive

        return reactive(rejected, self.instance, split=self.scenario.radio.bandwidth_split, modes=modes)

    def to_dict(self) -> dict[str, Any]:
        """The plan as the JSON-ready dict that ``multispin optimize --json`` prints (less the
        version fields, which [to_json][multispin.api.RoundPlan.to_json] adds): per device its
        drop, channel, γ and mode shares; the goodput, the baselines and the certificate; the
        scenario's radio and compute parameters."""
        from multispin.jsonout import json_safe
        from multispin.system.channel import World
        from multispin.system.coupled_alpha import ASSUMPTION, MEASURED_COUPLED

        sc, inst, rep = self.scenario, self.instance, self.report
        drop = World(sc).drop
        p, radio = rep.plan, sc.radio
        return json_safe(
            {
                "scenario": sc.name,
                "seed": sc.seed,
                "round": self.round_index,
                "draft_policy": p.policy,
                "bandwidth_split": radio.bandwidth_split,
                "acceptance_assumed": bool(drop.acceptance_assumed),
                "acceptance_source": sc.tasks.source,
                "goodput_tokens_per_s": p.goodput.goodput_tokens_per_s,
                "g_max_tokens_per_s": p.goodput.g_max_tokens_per_s,
                "e_t_comm_s": p.goodput.e_t_comm_s,
                "t_comp_s": p.goodput.t_comp_s,
                "expected_tokens_per_round": p.goodput.expected_tokens,
                "baselines": dict(rep.baselines),
                "certificate": rep.certificate.to_dict(),
                "baseline_draft_len": dict(rep.baseline_draft_len),
                "devices": [self._device_dict(drop, k) for k in range(inst.num_devices)],
                "num_devices": inst.num_devices,
                **_radio_and_compute(sc),
                **({"objective": self.objective} if self.objective is not None else {}),
                "verify": self.verify,
                "coupled_share": p.coupled_share,
                "coupled_alpha": (
                    None if self.verify == "standard" else ASSUMPTION if drop.coupled_assumed else MEASURED_COUPLED
                ),
            }
        )

    def _device_dict(self, drop, k: int) -> dict[str, Any]:
        """Device ``k`` in the plan: its drop, channel, acceptance, γ and mode shares."""
        from multispin.system.radio import linear_to_db

        inst, p, st = self.instance, self.report.plan, self.report.stats
        return {
            "device": k,
            "task": drop.task[k],
            "distance_m": float(drop.distance_m[k]),
            "channel_gain": float(inst.gain_ul[k]),
            "channel_gain_db": float(linear_to_db(inst.gain_ul[k])),
            "channel_gain_dl": float(inst.gain_dl[k]),
            "alpha": float(drop.alpha[k]),
            "draft_latency_s": float(inst.draft_latency_s[k]),
            "draft_len": int(p.draft_len[k]),
            "rejection_prob": float(p.rejection_prob[k]),
            "expected_tokens": float(p.expected_tokens[k]),
            "ul_latency_s": float(st.ul_latency_s_given_rejected[k]),
            "ul_latency_s_full_band": float(st.ul_latency_s_alone[k]),
            "ul_share": float(st.ul_share[k]),
            "dl_share": float(st.dl_share[k]),
            "ul_share_given_rejected": float(st.ul_share_given_rejected[k]),
            "coupled": bool(p.coupled[k]),
            "alpha_coupled": None if inst.alpha_coupled is None else float(inst.alpha_coupled[k]),
        }

    def to_json(self) -> str:
        """The JSON text ``multispin optimize --json`` prints for the same scenario, round and
        draft policy (the document ``multispin.optimize``)."""
        import json

        from multispin.jsonout import versioned

        return json.dumps(versioned(self.to_dict(), "optimize"))


# what `RoundPlan.to_dict` copies from each part of the scenario, in the document's order: "key"
# reads the attribute of that name, "key:attribute" another one
_SCENARIO_FIELDS = {
    "radio": (
        "bandwidth_hz",
        "p_ul_dbm",
        "p_dl_dbm:p_dl_dbm_value",
        "p_dl_w:p_dl_watts",
        "noise_psd_dbm_per_hz",
        "noise_figure_db",
        "path_loss_db_at_1m",
        "path_loss_exponent",
        "reciprocity",
    ),
    "payload": ("codec", "payload_bits", "count_signalling_bits"),
    "compute": ("t_ver0_s", "t_ver1_s", "t_ver_tok_s"),
    "optimizer": ("gamma_max", "n_saa"),
}


def _radio_and_compute(sc: Scenario) -> dict[str, Any]:
    """The scenario's radio, payload, compute and optimiser parameters as `RoundPlan.to_dict` gives them."""
    out: dict[str, Any] = {}
    for part, names in _SCENARIO_FIELDS.items():
        for name in names:
            key, _, attribute = name.partition(":")
            out[key] = getattr(getattr(sc, part), attribute or key)
    return out


def plan(
    sc: Scenario,
    round_index: int = 0,
    *,
    draft_policy: str = "greedy",
    baselines: bool = True,
    objective: str | None = None,
    verify: str = "standard",
    policy: str | object | None = None,
) -> RoundPlan:
    """Plan one round of a scenario as ``multispin optimize`` does.

    Args:
        sc: the scenario (see [scenario][multispin.api.scenario]).
        round_index: which round (block fading is redrawn every round).
        draft_policy: how the draft lengths are chosen (``--draft-policy``): ``greedy`` (the
            shipped search), ``greedy_paper``, ``best_uniform``, ``computation_only``, ``oracle``
            (small K only) or ``certified`` (branch and bound, K ≤ 12).
        baselines: also compute every baseline on the same samples (the shipped search starts
            from each of them, so it never ends below one).
        objective: ``sum`` (the paper's, the plan above), ``proportional-fair``, ``max-min`` or
            ``energy`` (None: the scenario's ``optimizer.objective``). A non-sum objective's plan on
            the same samples is added as ``objective`` (its γ, value, per-device goodputs, the sum
            goodput it gives and whether the search was exhaustive: `multispin.optimize.objectives`).
        verify: ``standard`` (the paper's model), ``coupled`` (every device coupled) or ``choose``
            (coupled or standard per device with γ; docs/system-model.md §5.7). The coupled α is
            the assumption of `multispin.system.coupled_alpha` (the plan's ``coupled_alpha`` says so).
        policy: your own policy (an object or ``"module:attr"``, docs/own-policy.md), played over
            the plan's SAA samples as successive rounds; ``.user`` holds its goodput beside the
            plan's (one round's samples: the intervals come from `evaluate` and `sweep`).
    """
    from multispin.optimize.plan import optimize_instance
    from multispin.optimize.verification import check_verify
    from multispin.system.channel import World

    r = _round(round_index)
    world = World(sc)
    inst = world.instance(r)
    if check_verify(verify) != "standard":
        inst = inst.replace(alpha_coupled=world.drop.coupled_alpha(inst.alpha))
    u = world.saa_uniforms(r)
    rep = optimize_instance(
        inst,
        u,
        world.mode_uniforms(r),
        policy=draft_policy,
        split=sc.radio.bandwidth_split,
        with_baselines=baselines,
        verify=verify,
    )
    user = _user_on_plan(rep, u, sc.radio.bandwidth_split, policy) if policy is not None else None
    return RoundPlan(sc, r, rep.inst, rep, u, _objective_plan(sc, inst, u, rep, objective, verify), verify, user)


def _user_on_plan(rep, u, split: str, policy: str | object) -> dict:
    """A user policy on the plan's samples: its goodput and γ̄ beside the plan's."""
    from multispin.experiments.own_policy import drop_goodput
    from multispin.runtime.round.user_policy import load_policy, user_policy_label

    loaded = load_policy(policy)
    value, mean_gamma = drop_goodput(rep.inst, u, loaded, split)
    adaptive = float(rep.plan.goodput_tokens_per_s)
    return {
        "policy": policy if isinstance(policy, str) else user_policy_label(loaded),
        "goodput_tokens_per_s": value,
        "mean_draft_len": mean_gamma,
        "adaptive_gain_pct": 100.0 * (adaptive / value - 1.0) if value > 0 else None,
    }


def _objective_plan(sc, inst, u, rep, objective: str | None, verify: str = "standard") -> dict | None:
    """A non-sum objective's plan on the plan's samples, next to the sum's (None for ``sum``)."""
    from multispin.optimize.objectives import EnergyModel, check_objective, plan_objective, score

    name = check_objective(objective if objective is not None else sc.optimizer.objective)
    if name == "sum":
        return None
    p, s, _ = plan_objective(
        inst,
        name,
        uniforms=u,
        energy=EnergyModel.of(sc),
        split=sc.radio.bandwidth_split,
        starts=[rep.plan.draft_len],
        verify=verify,
    )
    g = rep.plan.goodput
    sum_g = rep.plan.expected_tokens / (g.t_comp_s + g.e_t_comm_s)  # the sum plan's per-device goodputs
    return {
        "name": name,
        "search": p.policy.split(":")[1],
        "draft_len": p.draft_len.tolist(),
        "value": s.value,
        "device_goodput_tokens_per_s": s.device_goodput.tolist(),
        "goodput_tokens_per_s": p.goodput_tokens_per_s,
        "worst_device_goodput_tokens_per_s": float(s.device_goodput.min()),
        "sum_plan_worst_device_goodput_tokens_per_s": float(sum_g.min()),
        "sum_plan_value": (score(name, sum_g) if name != "energy" else None),
        "coupled": p.coupled.tolist(),
    }


def evaluate(
    p: RoundPlan,
    rounds: int = 10_000,
    *,
    draft_len=None,
    modes: str = "optimal",
    seed: int | None = None,
    policy: str | object | None = None,
) -> MonteCarloResult | PolicyEvaluation:
    """Monte Carlo of ``rounds`` rounds at the plan's γ (or ``draft_len``) on its instance, with
    fresh acceptance draws; randomness from the scenario's ``montecarlo`` stream (or ``seed``).

    ``policy``: a policy that decides round by round, played over ``rounds`` simulated rounds beside
    adaptive on the same draws: ``adaptive``, ``all_ul``, ``all_dl``, ``random`` (at the plan's
    γ, or the baseline's) or your own (an object or ``"module:attr"``, docs/own-policy.md; its
    ``draft_lengths`` is called once per round). Returns a
    [PolicyEvaluation][multispin.experiments.own_policy.PolicyEvaluation] (``.paired``: the policy
    against adaptive with its paired 95% interval) instead of a `MonteCarloResult`."""
    from multispin.errors import ConfigError
    from multispin.optimize.montecarlo import simulate_rounds
    from multispin.system.channel import stream

    if not isinstance(rounds, int) or rounds < 1:
        raise ConfigError(f"rounds: must be an integer in [1, inf) (got {rounds!r})")

    def make_rng() -> np.random.Generator:
        return np.random.default_rng(seed) if seed is not None else stream(p.scenario.seed, "montecarlo", p.round_index)

    if policy is not None:
        return _evaluate_policy(p, policy, rounds, make_rng, seed)
    gamma = p.draft_len if draft_len is None else np.asarray(draft_len)
    return simulate_rounds(p.instance, gamma, rounds, make_rng(), modes=modes, split=p.scenario.radio.bandwidth_split)


def _evaluate_policy(p: RoundPlan, policy: str | object, rounds: int, make_rng, seed: int | None):
    """`evaluate` with ``policy``: a built-in name, or a user policy loaded here (module:attr)."""
    from multispin.errors import ConfigError
    from multispin.experiments.own_policy import BUILT_IN_RULES, built_in_round_policy, evaluate_policy
    from multispin.runtime.round.user_policy import load_policy

    coin_seed = p.scenario.seed if seed is None else seed

    def built_in(name: str):
        return built_in_round_policy(name, p.draft_len, p.report.baseline_draft_len, coin_seed)

    if isinstance(policy, str) and ":" not in policy and policy not in BUILT_IN_RULES:
        raise ConfigError(
            f"policy: unknown value {policy!r} (allowed: {', '.join(BUILT_IN_RULES)}, or your own as module:attr)"
        )
    chosen = policy if isinstance(policy, str) and policy in BUILT_IN_RULES else load_policy(policy)
    return evaluate_policy(
        p.instance,
        p.uniforms,
        p.scenario.radio.bandwidth_split,
        chosen,
        built_in("adaptive"),
        make_rng,
        rounds,
        built_in,
        policy if isinstance(policy, str) else None,
    )


def capacity(
    sc: str | Path | Scenario = "paper-qwen",
    *,
    policy: str = "adaptive",
    objective: str = "sum",
    tpot_target_s: float = 0.1,
    quantile: float = 95.0,
    max_devices: int = 16,
    drops: int = 3,
    rounds: int = 200,
) -> dict[str, Any]:
    """How many devices one server carries while the ``quantile``-th percentile of every device's
    time per output token stays within ``tpot_target_s`` (the model: each K planned with
    ``objective`` under the ``policy``'s modes and its rounds simulated; docs/service.md).

    Returns ``{"capacity": K, "points": [{"devices", "tpot_quantile_s", "served"}, ...]}``.
    """
    from dataclasses import asdict

    from multispin.experiments.capacity import capacity as _capacity

    spec = sc if not isinstance(sc, (str, Path)) else scenario(sc)
    k, points = _capacity(
        spec,
        policy=policy,
        objective=objective,
        tpot_target_s=tpot_target_s,
        quantile=quantile,
        max_devices=max_devices,
        drops=drops,
        rounds=rounds,
    )
    return {"capacity": k, "points": [asdict(p) for p in points]}


def sweep(
    sc: str | Path | Scenario,
    over: Mapping[str, Sequence[Any]],
    drops: int = 10,
    policies: Sequence[str | object] = ("adaptive", "all_ul", "all_dl"),
    *,
    seed: int | None = None,
    workers: int = 1,
    out: None | str | Path = None,
    progress: bool = False,
    objective: str | None = None,
    energy_weight: float | None = None,
) -> SweepTable:
    """Goodput of ``policies`` at every point of a grid, each with its 95% interval (``multispin sweep``).

        >>> import multispin as ms
        >>> t = ms.sweep(ms.scenario(devices=4, n_saa=50), over={"radio.p_dl_dbm": [10, 30]}, drops=3)
        >>> [(r["radio.p_dl_dbm"], r["policy"]) for r in t.rows][:2]
        [(10, 'adaptive'), (10, 'all_ul')]

    Every point and policy is evaluated on the same ``drops`` drops (positions, tasks, fading, SAA
    samples: common random numbers), by the drops, cache and statistics of ``multispin reproduce``
    (module `multispin.experiments.sweep`).

    Args:
        sc: a scenario, a preset name or a scenario file.
        over: dotted field name -> values; several fields sweep their Cartesian product.
        drops: drops per point (at least 2, for an interval).
        policies: any of ``adaptive`` (the optimiser), ``all_ul``, ``all_dl``, ``random``,
            ``best_uniform``, ``computation_only``, ``greedy_paper``, and your own policies (an
            object or ``"module:attr"``, docs/own-policy.md): each plays a drop's SAA samples as
            successive rounds, its row labelled ``module:attr`` (an object: its ``name`` or class).
        seed: base seed of the drops (default: the scenario's).
        workers: processes the drops run on.
        out: a folder for the cache of finished drops (a rerun resumes); ``None``: no cache.
        progress: a progress bar on stderr.
        objective: what every policy's plan maximises: ``sum`` (the paper's), ``proportional-fair``,
            ``max-min`` or ``energy`` (None: the scenario's ``optimizer.objective``). A non-sum
            objective compares ``adaptive``, ``all_ul``, ``all_dl`` and ``random``.
        energy_weight: w of the ``energy`` objective, tokens per joule (None: the scenario's).

    Returns:
        A [SweepTable][multispin.experiments.sweep.SweepTable]: ``rows`` (one per point × policy),
        ``to_json()`` (what ``multispin sweep --json`` prints); draw it with
        [plot][multispin.api.plot].
    """
    from multispin.experiments.sweep import SWEEP_POLICIES, run_sweep
    from multispin.runtime.round.user_policy import load_policy, user_policy_label

    built_in = [x for x in policies if isinstance(x, str) and (x in SWEEP_POLICIES or ":" not in x)]
    user = {x if isinstance(x, str) else user_policy_label(x): load_policy(x) for x in policies if x not in built_in}
    return run_sweep(
        sc if not isinstance(sc, (str, Path)) else scenario(sc),
        over,
        drops,
        built_in or ["adaptive"],
        seed=seed,
        workers=workers,
        out=Path(out) if out is not None else None,
        progress=progress,
        objective=objective,
        energy_weight=energy_weight,
        user_policies=user,
    )


def plot(table: SweepTable, path: None | str | Path = None, *, field: str | None = None, metric: str = "goodput"):
    """A figure of the sweep against its swept field, one line per policy with its 95% band (a
    matplotlib Figure; saved as PNG to ``path`` when given).

        >>> fig = ms.plot(table, "worst.png", metric="worst_device_goodput")  # doctest: +SKIP

    Args:
        table: what [sweep][multispin.api.sweep] returned.
        path: a PNG to save the figure to; ``None``: only return it.
        field: the x axis of a sweep over several fields (one panel per combination of the others).
        metric: ``goodput`` (the sum, the default), ``worst_device_goodput`` (min_k G_k),
            ``jain_index`` (Jain's index of the G_k), ``tpot_p95`` (p95 time per output token) or
            ``energy_per_token`` (the devices' joules per generated token); the service metrics
            are the plans' on the model (docs/service.md). Another name raises ConfigError.
    """
    from multispin.experiments.sweep import plot_sweep

    return plot_sweep(table, Path(path) if path is not None else None, field, metric)


def generate(
    pair: str = "smollm2-135m",
    *,
    devices: int = 4,
    draft_len: int = 4,
    mode: str = "random",
    max_new_tokens: int = 32,
    prompts: Sequence[str] | None = None,
    drafts: Sequence[str] | None = None,
    seed: int = 0,
    device: str = "cpu",
    **options: Any,
) -> GenerationResult:
    """Real tokens from K devices and one server in this process (``multispin generate``).

    ``options``: ``temperature``, ``top_k``, ``top_p``, ``ul_codec``, ``dl_codec``. ``device``:
    ``cpu``, ``cuda`` or ``auto``. Every device's text is in ``result.devices[k].text``.
    """
    from multispin.models.placement import place_pair
    from multispin.models.registry import resolve_pair
    from multispin.runtime.round.session import GenerateConfig
    from multispin.runtime.round.session import generate as run

    config = GenerateConfig.make(
        pair=pair,
        devices=devices,
        draft_len=draft_len,
        mode=mode,
        max_new_tokens=max_new_tokens,
        prompts=list(prompts) if prompts else None,
        drafts=list(drafts) if drafts else None,
        seed=seed,
        **options,
    )
    return run(config, pair=place_pair(resolve_pair(pair, drafts=config.drafts), device))


def testbed(
    sc: str | Path = "paper-qwen",
    pair: str = "smollm2-135m",
    *,
    devices: int | None = None,
    policy: str = "adaptive",
    rounds: int | None = None,
    max_new_tokens: int = 64,
    out: None | str | Path = None,
    force: bool = False,
    device: str = "cpu",
    **options: Any,
) -> TestbedResult:
    """The networked system (``multispin testbed``): an edge server and K device processes over
    ZeroMQ on this machine, re-planned every round with the optimiser.

    ``sc``: a preset name or scenario file; ``devices`` and ``seed`` default as the CLI's do (the
    scenario file's ``devices.count`` and ``seed`` where it sets them, else 8 and 0); ``out`` that
    holds a previous run is refused unless ``force=True``, as ``--force`` does; ``policy``: a built-in
    policy or your own as ``"module:attr"`` (docs/own-policy.md); ``options``: any
    other field of `TestbedConfig` (``clock``, ``split``, ``p_dl_dbm``, ``ul_codec``, ...).
    ``result.summary`` (a `RunSummary`, summary.json typed) holds the goodput
    (``.goodput_tokens_per_s``) next to the forecast (``.forecast``) and the analytic and Monte
    Carlo predictions (``.conditioned``); ``result.texts`` every device's text.
    """
    from multispin.commands._checks import check_out_free
    from multispin.commands._scenario_fields import check_scenario_fields, running_values
    from multispin.experiments.testbed import TestbedConfig, run_testbed
    from multispin.models.placement import place_pair
    from multispin.models.registry import resolve_pair

    if out is not None:
        check_out_free(Path(out), force, "testbed", ("summary.json", "rounds.jsonl"))
    given = check_scenario_fields("testbed", str(sc))
    picked = running_values(
        str(sc), given, devices=devices, **{k: options.pop(k, None) for k in ("seed", "n_saa", "split")}
    )
    user_policy = policy if ":" in policy else None  # your own policy: module:attr (docs/own-policy.md)
    config = TestbedConfig.make(
        scenario=str(sc),
        pair=pair,
        policy="adaptive" if user_policy else policy,
        user_policy=user_policy,
        rounds=rounds,
        max_new_tokens=max_new_tokens,
        out=out,
        **picked,
        **options,
    )
    return run_testbed(config, pair=place_pair(resolve_pair(pair), device, drafts=False))


def _round(round_index: int) -> int:
    from multispin.errors import ConfigError

    if not isinstance(round_index, (int, np.integer)) or round_index < 0:
        raise ConfigError(f"round: must be an integer in [0, inf) (got {round_index!r})")
    return int(round_index)
