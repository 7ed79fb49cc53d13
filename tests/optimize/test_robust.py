"""Planning under imperfect channel knowledge: T_comm on per-sample channels, and the
robust plan against the naive one."""

from __future__ import annotations

import numpy as np
import pytest
from _builders import make_instance

from multispin.errors import ConfigError
from multispin.optimize.goodput import SAAObjective
from multispin.optimize.plan import plan
from multispin.optimize.reactive import t_comm_batch
from multispin.optimize.robust import plan_on_estimate
from multispin.system import World, get_preset
from multispin.system.channel_process import ChannelProcess


def _row_by_row(mask, inst, modes, split, mu, gu, gd):
    return np.array(
        [
            t_comm_batch(
                mask[m : m + 1],
                inst.replace(gain_ul=gu[m], gain_dl=gd[m]),
                modes,
                split,
                None if mu is None else mu[m : m + 1],
            )[0]
            for m in range(mask.shape[0])
        ]
    )


@pytest.mark.parametrize("modes", ["optimal", "all_ul", "all_dl", "random"])
@pytest.mark.parametrize("dl_bits", [None, 3.0])  # one codec, or S^dl ≠ S^ul (still uniform per link)
def test_per_row_channels_equal_one_instance_per_row(modes, dl_bits):
    rng = np.random.default_rng(7)
    k, m = 6, 300
    inst = make_instance(rng.exponential(1.0, k), rng.exponential(1.0, k), bits=2.0)
    if dl_bits is not None:
        inst = inst.replace(dl_payload_bits=np.full(k, dl_bits))
    mask = rng.random((m, k)) < 0.5
    gu, gd = rng.exponential(1.0, (m, k)), rng.exponential(1.0, (m, k))
    mu = rng.random((m, k)) if modes == "random" else None
    got = t_comm_batch(mask, inst, modes, "equal", mu, gains=(gu, gd))
    assert np.allclose(got, _row_by_row(mask, inst, modes, "equal", mu, gu, gd), rtol=1e-10, atol=0)
    # negative control: the instance's own channel gives other latencies
    assert not np.allclose(got, t_comm_batch(mask, inst, modes, "equal", mu), rtol=1e-3)


def test_per_row_channels_on_the_slow_paths_solve_each_row_on_its_channel():
    rng = np.random.default_rng(8)
    k, m = 4, 12
    inst = make_instance(rng.exponential(1.0, k), bits=2.0).replace(payload_bits=np.array([1.0, 2.0, 3.0, 2.0]))
    mask = rng.random((m, k)) < 0.6
    gu = gd = rng.exponential(1.0, (m, k))
    for split in ("equal", "optimized"):
        got = t_comm_batch(mask, inst, "optimal", split, gains=(gu, gd))
        assert np.allclose(got, _row_by_row(mask, inst, "optimal", split, None, gu, gd), rtol=1e-9)
    with pytest.raises(ConfigError, match="gains"):
        t_comm_batch(mask, inst, "optimal", gains=(gu[:2], gd))


def _round(speed_kmh, pilot_snr_db, seed=3, k=12, n_saa=300):
    """One round under the channel process: the estimate-based instance, the posterior draws, the
    uniforms and the true channel's instance."""
    sc = get_preset("paper-qwen").override(
        {
            "devices.count": k,
            "seed": seed,
            "optimizer.n_saa": n_saa,
            "channel.speed_kmh": speed_kmh,
            "channel.pilot_snr_db": pilot_snr_db,
        }
    )
    world = World(sc)
    proc = ChannelProcess(sc, world.drop.distance_m)
    now, est = proc.step(proc.initial(), 1, 0.05)
    inst = world.instance(0, est.naive())
    gains = est.posterior_gains(np.random.default_rng([seed, 10]), n_saa)
    return inst, gains, world.saa_uniforms(1), world.instance(1, proc.gains(now))


def test_with_static_perfect_knowledge_the_robust_plan_is_todays_plan():
    inst, gains, u, true_inst = _round(speed_kmh=0.0, pilot_snr_db=None)
    assert np.allclose(
        inst.gain_ul, true_inst.gain_ul, rtol=1e-12, atol=0
    )  # ρ = 1, no error: the estimate is the channel
    today = plan(inst, uniforms=u)
    robust = plan_on_estimate(inst, u, "robust", gains)
    assert np.array_equal(robust.draft_len, today.draft_len)
    assert robust.goodput_tokens_per_s == pytest.approx(today.goodput_tokens_per_s, rel=1e-12)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_with_large_error_robust_is_never_below_naive_on_the_posterior_samples(seed):
    inst, gains, u, _ = _round(speed_kmh=3.0, pilot_snr_db=-5.0, seed=seed)
    naive = plan_on_estimate(inst, u, "naive")
    robust = plan_on_estimate(inst, u, "robust", gains, naive=naive)
    post = SAAObjective(inst, u, channel_gains=gains)
    assert post.value(robust.draft_len) >= post.value(naive.draft_len) * (1 - 1e-12)
    assert robust.goodput_tokens_per_s == pytest.approx(post.value(robust.draft_len), rel=1e-12)


def test_robust_planning_uses_the_channel_samples():
    """Over a few rounds with large error the robust plan differs from the naive one and beats it on
    the posterior samples: a robust search that ignored the samples would tie everywhere."""
    gains_over_naive = []
    for seed in range(1, 5):
        inst, gains, u, _ = _round(speed_kmh=3.0, pilot_snr_db=-5.0, seed=seed)
        naive = plan_on_estimate(inst, u, "naive")
        robust = plan_on_estimate(inst, u, "robust", gains, naive=naive)
        post = SAAObjective(inst, u, channel_gains=gains)
        gains_over_naive.append(post.value(robust.draft_len) / post.value(naive.draft_len) - 1)
    assert max(gains_over_naive) > 0.01, gains_over_naive


def test_plan_refuses_enumerating_policies_with_channel_samples():
    inst, gains, u, _ = _round(speed_kmh=3.0, pilot_snr_db=0.0, k=3, n_saa=20)
    for policy in ("oracle", "certified"):
        with pytest.raises(ConfigError, match="policy"):
            plan(inst, uniforms=u, policy=policy, channel_gains=gains)
    with pytest.raises(ConfigError, match="planning"):
        plan_on_estimate(inst, u, "optimistic")
    with pytest.raises(ConfigError, match="posterior_gains"):
        plan_on_estimate(inst, u, "robust")
    with pytest.raises(ConfigError, match="channel_gains"):
        SAAObjective(inst, u, channel_gains=(gains[0][:5], gains[1]))
