"""The channel-knowledge study (figure 8): how much of the adaptive gain survives channels
that are known only through noisy pilots of the previous round, and how much robust planning
recovers. One drop's numbers (the study's grid is in studies.py, with the others').

One drop (all policies on common random numbers):

1. the previous round: block ζ₀ of the drop's channel process, planned with the pilots of that
   block (the shipped planner, adaptive modes); its expected duration T_comp + E[T_comm] is the Δt
   over which the channel ages, ρ = J0(2π f_D Δt);
2. this round: ζ₁ = ρ·ζ₀ + √(1 − ρ²)·w, and the server's estimate ζ̂ = ζ₀ + e (pilots of the
   previous round's verdicts, pilot SNR);
3. for each mode rule (adaptive, all-UL, all-DL), three plans on the same SAA uniforms:
   *perfect* (on ζ₁, what the paper assumes), *naive* (on ζ̂ as if exact) and *robust* (every SAA
   sample on its own posterior draw of ζ₁ given ζ̂, started from the naive plan);
4. each plan's goodput on the true channel, the mode rule reacting on it (the pilots in the
   verdict). G is a ratio of expectations over what the planner does not know
   (docs/system-model.md §3): here the channel as well as the outcomes. So the naive and robust
   plans are scored over N_SAA held-out pairs (fresh outcome uniforms, a fresh draw of ζ₁ from its
   exact conditional law given the estimate), none of which any plan saw; the perfect plan,
   re-planned on each channel, over CSI_REPLICATES of those draws (ratio of sums). Scoring one
   realisation per drop would average ratios instead, the per-round goodput, which weighs a rare
   round stalled by a deep fade as one round among many rather than by its duration.

Caveat (docs/channel-knowledge.md): at the paper's SNRs a correction's airtime grows like 1/|h|², and
E[1/|h|²] is infinite under any Gaussian posterior with variance > 0, so E[T_comm] of any plan that
may reject a device whose channel is uncertain diverges (slowly, like the log of the sample
count). Every number here is the SAA estimate at N_SAA samples; an outage rule (a deadline on the
correction) is what would make the expectation finite.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from multispin.experiments.reproduce.long_form import column
from multispin.vocabulary import POLICY_TABLE, policies_in

# Rounds last 0.2-0.5 s: at 3.5 GHz the channel decorrelates within one round from about 0.3 km/h
# on (J0's first zero), hence the slow speeds next to the reported 3, 30 and 120 km/h.
SPEEDS_KMH_FULL = (0.0, 0.1, 0.3, 1.0, 3.0, 30.0, 120.0)
SPEEDS_KMH_QUICK = (3.0, 30.0, 120.0)
# the speed sweep's pilot SNR: a moderate estimate (error 10% of the mean fading power)
SPEED_SWEEP_PILOT_SNR_DB = 10.0
PILOT_SNR_DB_FULL = (-5.0, 0.0, 10.0, 20.0, 30.0)
PILOT_SNR_DB_QUICK = ()  # --quick: the speed sweep only
PILOT_SWEEP_SPEED_KMH = 0.0  # the pilot sweep isolates estimation error: a static channel
CARRIER_HZ = 3.5e9
CSI_DROPS_FULL = 12  # a drop plans 1 + 3·(CSI_REPLICATES + 2) times: fewer drops than the other studies
CSI_DROPS_QUICK = 2  # the fewest that give an interval: keeps `reproduce --quick` fast
CSI_REPLICATES = 4  # channel realisations the perfect-knowledge plan is re-planned on, per drop
# the policies the study compares, each a mode rule (vocabulary.POLICY_TABLE)
CSI_POLICIES = tuple(p.name for p in policies_in(kind="csi"))


def run_csi_drop(scenario: dict[str, Any], options: dict[str, Any]) -> dict[str, float]:
    """Every number of one drop of the channel-knowledge study (module doc); ``options["replicates"]``:
    the channel realisations the perfect plan is re-planned on."""
    from multispin.optimize.goodput import SAAObjective
    from multispin.optimize.plan import plan
    from multispin.optimize.robust import plan_on_estimate
    from multispin.system import World, scenario_from_dict
    from multispin.system.channel import ChannelState, stream
    from multispin.system.channel_process import ChannelProcess

    sc = scenario_from_dict(scenario)
    world = World(sc)
    proc = ChannelProcess(sc, world.drop.distance_m)
    prev, _ = proc.step(None, 0)
    before = plan(world.instance(0, proc.gains(prev)), uniforms=world.saa_uniforms(0))
    dt_s = before.goodput.t_comp_s + before.goodput.e_t_comm_s
    _, est = proc.step(prev, 1, dt_s)
    naive_inst = world.instance(1, est.naive())
    u = world.saa_uniforms(1)
    u_eval = stream(sc.seed, "montecarlo", 1).random(u.shape)
    recip = sc.radio.reciprocity
    posterior = est.posterior_gains(stream(sc.seed, "posterior", 1), u.shape[0], recip)
    # this round's channel given the estimate, drawn from its exact conditional law on a stream no
    # plan saw (tests/system/test_channel_process.py checks that law against the process itself):
    # one draw per evaluation sample for the naive and robust plans, and the first CSI_REPLICATES
    # draws for the perfect-knowledge plan, which is re-planned on each
    held_out = est.posterior_gains(stream(sc.seed, "montecarlo", 2), u.shape[0], recip)
    truths = [
        world.instance(1, ChannelState(held_out[0][r], held_out[1][r], proc.path_loss))
        for r in range(int(options["replicates"]))
    ]
    row: dict[str, float] = {"rho": est.rho, "round_ms": 1e3 * dt_s, "posterior_var": est.posterior_moments()[1]}
    for policy in CSI_POLICIES:
        modes = POLICY_TABLE[policy].rule
        naive = plan_on_estimate(naive_inst, u, "naive", modes=modes)
        robust = plan_on_estimate(naive_inst, u, "robust", posterior, modes=modes, naive=naive)
        unseen = SAAObjective(naive_inst, u_eval, modes, channel_gains=held_out)
        for name, p in (("naive", naive), ("robust", robust)):
            row[column("goodput", policy, name)] = unseen.value(p.draft_len)
            row[column("gamma", policy, name)] = float(np.mean(p.draft_len))
        tokens = time_s = 0.0
        for inst in truths:
            g = SAAObjective(inst, u_eval, modes).evaluate(plan(inst, uniforms=u, modes=modes).draft_len)
            tokens, time_s = tokens + g.expected_tokens, time_s + g.t_comp_s + g.e_t_comm_s
        row[column("goodput", policy, "perfect")] = tokens / time_s  # ratio of sums, as the clock counts
    return {k: float(v) for k, v in row.items()}
