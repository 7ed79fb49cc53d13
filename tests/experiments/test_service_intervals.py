"""Paired service-metric intervals: they agree with the summary's metrics, cover the truth on
synthetic rounds with a known answer, and a wrong truth is caught (negative control)."""

import numpy as np
import pytest

from multispin.errors import ConfigError
from multispin.experiments.paired import batches_per_seed
from multispin.experiments.service_intervals import (
    METRICS,
    ServiceLog,
    metric_functions,
    service_batches_per_seed,
    service_differences,
)

K = 4
P_A = np.array([0.9, 0.8, 0.7, 0.4])  # per-slot acceptance, policy a
P_B = np.array([0.95, 0.85, 0.6, 0.2])  # policy b: more to the near devices, less to the far one


def synthetic(rng, seeds, rounds, phi=0.7):
    """Two policies on common random numbers: an AR(φ) channel factor shared by both sets the round
    time, the same uniforms decide each slot's accepted tokens (up to 5). The channel starts in its
    stationary law, so a short run estimates what the long run that defines the truth measures."""
    c = np.zeros((seeds, rounds))
    e = rng.standard_normal((seeds, rounds))
    c[:, 0] = e[:, 0] / np.sqrt(1.0 - phi**2)
    for r in range(1, rounds):
        c[:, r] = phi * c[:, r - 1] + e[:, r]
    u = rng.random((seeds, rounds, K, 5))
    out = []
    for p, base in ((P_A, 0.08), (P_B, 0.06)):
        lat = base * np.exp(0.2 * c)
        tok = (u < p[None, None, :, None]).sum(axis=3).astype(float)
        joules = 0.5 * lat + 0.01 * tok.sum(axis=2)
        out.append(ServiceLog.of(tok, lat, joules))
    return out


def truth(phi):
    a, b = synthetic(np.random.default_rng(12345), 1, 400_000, phi)
    fa, fb = metric_functions(a, 1), metric_functions(b, 1)
    one = np.ones((1, 1))
    return {m: 100.0 * (fa[m](one)[0] / fb[m](one)[0] - 1.0) for m in METRICS}


def coverage(phi, shift_pct=0.0, reps=400, batches=None):
    true = truth(phi)
    rng = np.random.default_rng(7)
    hits = dict.fromkeys(METRICS, 0)
    for _ in range(reps):
        a, b = synthetic(rng, 3, 32, phi)
        for d in service_differences(a, b, batches=batches):
            hits[d.metric] += d.pct.low <= true[d.metric] + shift_pct <= d.pct.high
    return {m: h / reps for m, h in hits.items()}


def test_full_run_values_match_the_summary_definitions():
    a, _ = synthetic(np.random.default_rng(0), 2, 16)
    f = metric_functions(a, batches_per_seed(16))
    one = np.ones((1, 2 * batches_per_seed(16)))
    g = a.tokens.sum(axis=(0, 1)) / a.latency_s.sum()
    assert f["worst_device_goodput"](one)[0] == pytest.approx(g.min(), rel=1e-12)
    assert f["jain_index"](one)[0] == pytest.approx(g.sum() ** 2 / (K * (g**2).sum()), rel=1e-12)
    assert f["energy_per_token"](one)[0] == pytest.approx(a.joules.sum() / a.tokens.sum(), rel=1e-12)
    n = a.tokens.reshape(-1)
    t = np.repeat(a.latency_s.reshape(-1), K)
    assert f["tpot_p95"](one)[0] == pytest.approx(np.percentile(t[n > 0] / n[n > 0], 95), rel=1e-12)


def test_identical_runs_differ_by_nothing():
    a, _ = synthetic(np.random.default_rng(1), 2, 16)
    for d in service_differences(a, a):
        assert d.pct.estimate == pytest.approx(0.0, abs=1e-9) and not d.significant


@pytest.mark.parametrize("phi", [0.0, 0.7])
def test_coverage_on_synthetic_rounds_with_and_without_channel_memory(phi):
    cov = coverage(phi)
    # measured at 400 replications (docs/service.md): φ = 0: worst device 0.965, Jain 0.953, energy
    # per token 0.948, p95 TPOT 0.930; φ = 0.7: 0.965, 0.953, 0.940, 0.948. p95 TPOT is a quantile
    # jackknife, indicative only, and held to less.
    assert min(cov["worst_device_goodput"], cov["jain_index"], cov["energy_per_token"]) >= 0.93, cov
    assert cov["tpot_p95"] >= 0.85, cov
    assert METRICS["tpot_p95"][1] and not METRICS["jain_index"][1]


def test_batches_too_short_for_the_channel_memory_undercover_energy():
    # negative control: rounds taken as independent (one batch a round) under an AR(0.7) channel
    # cover energy per token, where the channel does not cancel, 0.88; without memory 0.955. (The
    # goodput comparison's 4-round batches fall between: 0.925 here, 0.905 on another stream.)
    naive = coverage(0.7, batches=32)
    assert naive["energy_per_token"] < 0.90, naive


def test_a_wrong_truth_is_caught():
    # negative control: a truth moved by 10% (30% for the wide worst-device ratio) is mostly missed
    wrong, far = coverage(0.7, shift_pct=10.0, reps=60), coverage(0.7, shift_pct=30.0, reps=60)
    assert max(wrong["jain_index"], wrong["energy_per_token"], far["worst_device_goodput"]) < 0.5, (wrong, far)


def test_batches_are_as_long_as_six_in_all_allow():
    assert service_batches_per_seed(3, 32) == 2 and service_batches_per_seed(2, 32) == 3
    assert service_batches_per_seed(1, 32) == 6 and service_batches_per_seed(1, 12) == batches_per_seed(12) == 3
    assert service_batches_per_seed(10, 32) == 2 and service_batches_per_seed(1, 1) == 1


def test_bad_input_names_the_field():
    a, b = synthetic(np.random.default_rng(2), 1, 8)
    with pytest.raises(ConfigError, match="unknown metric 'p99'"):
        service_differences(a, b, metrics=["p99"])
    with pytest.raises(ConfigError, match="same seeds"):
        service_differences(a, ServiceLog.of(b.tokens[:, :4], b.latency_s[:, :4]))
