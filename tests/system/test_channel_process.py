"""The time-correlated, imperfectly known channel: Jakes' correlation, the Gauss–Markov
process's autocorrelation and marginal, the pilot error's variance and the posterior, each with a
negative control (a broken implementation fails the same check)."""

from __future__ import annotations

import numpy as np
import pytest

from multispin.errors import ConfigError
from multispin.system import channel_process as cp
from multispin.system import get_preset
from multispin.system.channel_process import ChannelProcess, doppler_hz, time_correlation

K = 4000  # devices per draw: the statistics below average over devices and rounds
ROUNDS = 6
DT_S = 0.05


def _scenario(**channel):
    sc = get_preset("paper-qwen").override({"devices.count": K})
    return sc.override({f"channel.{k}": v for k, v in channel.items()})


def _z_score(estimate: float, expected: float, std_error: float) -> float:
    return abs(estimate - expected) / std_error


def _process_statistics(speed_kmh: float) -> dict[str, float]:
    """Lag-1 statistics of ROUNDS steps of DT_S over K devices: the complex autocorrelation
    E[ζ_r ζ*_{r−1}], the power autocorrelation corr(|ζ_r|², |ζ_{r−1}|²) and the mean power."""
    proc = ChannelProcess(_scenario(speed_kmh=speed_kmh))
    z = [proc.initial()]
    for r in range(1, ROUNDS + 1):
        z.append(proc.advance(z[-1], r, DT_S))
    ul = np.array([s.z[0] for s in z])  # (ROUNDS + 1, K)
    lag = (ul[1:] * np.conj(ul[:-1])).real.ravel()
    p = np.abs(ul) ** 2
    return {
        "rho_hat": float(lag.mean()),
        "rho_se": float(lag.std() / np.sqrt(lag.size)),
        "power_corr": float(np.corrcoef(p[1:].ravel(), p[:-1].ravel())[0, 1]),
        "mean_power": float(p.mean()),
        "n": float(lag.size),
        "rho": proc.rho(DT_S),
    }


def _process_ok(st: dict[str, float]) -> bool:
    """The check every process must pass: lag-1 correlation ρ, power correlation ρ² (Rayleigh) and a
    CN(0, 1) marginal, each within 5 standard errors."""
    rho, n = st["rho"], st["n"]
    return (
        _z_score(st["rho_hat"], rho, st["rho_se"]) < 5
        and _z_score(st["power_corr"], rho * rho, (1 - rho**4) / np.sqrt(n) + 1e-3) < 5
        and _z_score(st["mean_power"], 1.0, 1.0 / np.sqrt(n)) < 5
    )


def test_doppler_and_jakes_correlation_match_known_values():
    # 120 km/h at 3.5 GHz: f_D = 33.33 m/s · 3.5e9 / c = 389.16 Hz
    assert doppler_hz(120, 3.5e9) == pytest.approx(389.158, abs=0.001)
    assert time_correlation(389.17, 0.0) == 1.0
    first_zero = 2.404825557695773 / (2 * np.pi * 100.0)  # J0's first zero, at f_D = 100 Hz
    assert abs(time_correlation(100.0, first_zero)) < 1e-12
    x = 2 * np.pi * 10.0 * 1e-3  # small argument: J0(x) ≈ 1 − x²/4 + x⁴/64
    assert time_correlation(10.0, 1e-3) == pytest.approx(1 - x * x / 4 + x**4 / 64, rel=1e-9)
    with pytest.raises(ConfigError, match="dt_s"):
        time_correlation(10.0, -1.0)


@pytest.mark.parametrize("speed_kmh", [3.0, 10.0, 120.0])
def test_process_autocorrelation_and_marginal_match_the_parameters(speed_kmh):
    st = _process_statistics(speed_kmh)
    assert _process_ok(st), st


def test_negative_control_broken_processes_fail_the_same_check(monkeypatch):
    # (1 − ρ) instead of √(1 − ρ²): the right correlation sign but a marginal that shrinks
    monkeypatch.setattr(cp, "gauss_markov_step", lambda z, rho, w: rho * z + (1 - rho) * w)
    assert not _process_ok(_process_statistics(3.0))
    # ρ² used where ρ belongs: the right marginal, the wrong memory
    monkeypatch.setattr(cp, "gauss_markov_step", lambda z, rho, w: rho**2 * z + np.sqrt(1 - rho**4) * w)
    assert not _process_ok(_process_statistics(3.0))


def test_no_speed_means_independent_blocks_and_static_devices_keep_theirs():
    free = ChannelProcess(_scenario(pilot_snr_db=20.0))
    assert free.rho(0.1) == 0.0
    a, _ = free.step(None, 0)
    b, est = free.step(a, 1, 0.1)
    assert abs(np.mean(b.z[0] * np.conj(a.z[0]))) < 5 / np.sqrt(K)
    assert est.rho == 1.0  # the paper's timing: the block is estimated from its own pilots
    still = ChannelProcess(_scenario(speed_kmh=0.0))
    c, est = still.step(a, 1, 0.1)
    assert np.allclose(c.z, a.z) and est.rho == 1.0


def _pilot_error_ok(proc: ChannelProcess, snr_db: float) -> bool:
    """E|ζ̂ − ζ|² = 10^(−SNR/10) (within 5 standard errors) and the error uncorrelated with ζ."""
    state = proc.initial()
    est = proc.estimate(state, 1, 1.0)
    e = (est.z_hat - state.z)[0]
    var = 10 ** (-snr_db / 10)
    cross = np.mean(e * np.conj(state.z[0]))
    return _z_score(float(np.mean(np.abs(e) ** 2)), var, var / np.sqrt(K)) < 5 and abs(cross) < 5 * np.sqrt(var / K)


@pytest.mark.parametrize("snr_db", [0.0, 10.0, 25.0])
def test_estimation_error_variance_matches_the_pilot_snr(snr_db):
    assert _pilot_error_ok(ChannelProcess(_scenario(pilot_snr_db=snr_db)), snr_db)


def test_negative_control_amplitude_for_variance_fails(monkeypatch):
    # the error's standard deviation taken for its variance
    monkeypatch.setattr(cp, "error_variance", lambda snr: 0.0 if snr is None else 10 ** (-snr / 20))
    assert not _pilot_error_ok(ChannelProcess(_scenario(pilot_snr_db=10.0)), 10.0)


def _posterior_ok(est_of, snr_db: float = 0.0, speed_kmh: float = 1.0) -> bool:
    """The posterior's moments against the process itself: this round's ζ minus the posterior mean
    has the posterior variance and is uncorrelated with the estimate (5 standard errors)."""
    proc = ChannelProcess(_scenario(speed_kmh=speed_kmh, pilot_snr_db=snr_db))
    prev = proc.initial()
    now, est = proc.step(prev, 1, DT_S)
    mean, var = est_of(est)
    resid = (now.z - mean)[0]
    v_hat = float(np.mean(np.abs(resid) ** 2))
    cross = np.mean(resid * np.conj(est.z_hat[0]))
    return _z_score(v_hat, var, var / np.sqrt(K) + 1e-12) < 5 and abs(cross) < 5 * np.sqrt(2 * var / K) + 1e-12


def test_posterior_moments_match_the_process():
    assert _posterior_ok(lambda e: e.posterior_moments())
    assert _posterior_ok(lambda e: e.posterior_moments(), snr_db=-5.0, speed_kmh=10.0)


def test_negative_control_unshrunk_posterior_fails():
    # ρ·ζ̂ with variance 1 − ρ²: right without estimation error, wrong with it
    assert not _posterior_ok(lambda e: (e.rho * e.z_hat, 1 - e.rho**2))


def test_posterior_draws_have_the_posterior_moments():
    proc = ChannelProcess(_scenario(speed_kmh=3.0, pilot_snr_db=5.0))
    _, est = proc.step(proc.initial(), 1, DT_S)
    gu, gd = est.posterior_gains(np.random.default_rng(0), 400)
    mean, var = est.posterior_moments()
    p = gu / proc.path_loss  # |ζ|² draws: E = |m|² + v
    assert np.array_equal(gu, gd)  # reciprocity: one draw for both links
    expected = np.abs(mean[0]) ** 2 + var
    assert abs(np.mean(p / expected) - 1) < 5 * np.sqrt(1 / (400 * K)) * 2


def test_perfect_static_knowledge_posterior_is_the_estimate():
    proc = ChannelProcess(_scenario(speed_kmh=0.0))
    _, est = proc.step(proc.initial(), 1, DT_S)
    gu, _ = est.posterior_gains(np.random.default_rng(1), 3)
    assert np.allclose(gu, est.naive().gain_ul[None, :], rtol=1e-12, atol=0)


def test_same_seed_same_channel():
    a = ChannelProcess(_scenario(speed_kmh=30.0, pilot_snr_db=10.0))
    b = ChannelProcess(_scenario(speed_kmh=30.0, pilot_snr_db=10.0))
    sa, ea = a.step(a.initial(), 1, 0.02)
    sb, eb = b.step(b.initial(), 1, 0.02)
    assert np.array_equal(sa.z, sb.z) and np.array_equal(ea.z_hat, eb.z_hat)


def test_scenario_fields_default_to_the_paper_and_reject_bad_values():
    sc = get_preset("paper-qwen")
    assert sc.channel.speed_kmh is None and sc.channel.pilot_snr_db is None and sc.channel.planning == "naive"
    assert not cp.uses_channel_process(sc) and cp.uses_channel_process(sc.override({"channel.speed_kmh": 3}))
    with pytest.raises(ConfigError, match="channel.speed_kmh"):
        sc.override({"channel.speed_kmh": -1})
    with pytest.raises(ConfigError, match="channel.planning"):
        sc.override({"channel.planning": "pessimistic"})
    with pytest.raises(ConfigError, match="rayleigh"):
        sc.override({"channel.speed_kmh": 3, "radio.fading": "none"})
