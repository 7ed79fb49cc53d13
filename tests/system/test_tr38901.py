"""3GPP TR 38.901 large-scale channel (system/tr38901.py), whose coefficients come from tr3gpp:

- path loss and LOS probability equal the standard's formulas, typed here from TR 38.901
  Tables 7.4.1-1 and 7.4.2-1 independently of the package, to 1e-9 at several distances;
- the shadow fading has the table's standard deviation and the exponential correlation
  exp(−Δ/d_cor) over distance (statistical tests; negative control: i.i.d. shadowing, and a
  wrong σ, are rejected by the same tests);
- a scenario picks the law (radio.path_loss_model) and its gains follow it; out-of-range drops
  are refused in one line.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import multispin as ms
from multispin.errors import ConfigError
from multispin.system import tr38901 as t
from multispin.system.channel import World

C = 299_792_458.0
D2D = np.array([12.0, 35.0, 80.0, 150.0, 400.0, 1200.0, 3000.0])
FC = 3.5  # GHz


def _bp(h_bs, h_ut, fc):
    return 4 * (h_bs - 1) * (h_ut - 1) * fc * 1e9 / C


def standard_pl(env, d2d, fc, los, h_bs, h_ut=1.5):
    """TR 38.901 Table 7.4.1-1, written out."""
    d3d = math.hypot(d2d, h_bs - h_ut)
    lg = math.log10
    if env == "uma":
        bp = _bp(h_bs, h_ut, fc)
        pl1 = 28.0 + 22 * lg(d3d) + 20 * lg(fc)
        pl2 = 28.0 + 40 * lg(d3d) + 20 * lg(fc) - 9 * lg(bp**2 + (h_bs - h_ut) ** 2)
        pl_los = pl1 if d2d <= bp else pl2
        return pl_los if los else max(pl_los, 13.54 + 39.08 * lg(d3d) + 20 * lg(fc) - 0.6 * (h_ut - 1.5))
    if env == "umi":
        bp = _bp(h_bs, h_ut, fc)
        pl1 = 32.4 + 21 * lg(d3d) + 20 * lg(fc)
        pl2 = 32.4 + 40 * lg(d3d) + 20 * lg(fc) - 9.5 * lg(bp**2 + (h_bs - h_ut) ** 2)
        pl_los = pl1 if d2d <= bp else pl2
        return pl_los if los else max(pl_los, 35.3 * lg(d3d) + 22.4 + 21.3 * lg(fc) - 0.3 * (h_ut - 1.5))
    pl_los = 32.4 + 17.3 * lg(d3d) + 20 * lg(fc)
    return pl_los if los else max(pl_los, 38.3 * lg(d3d) + 17.30 + 24.9 * lg(fc))


def standard_los(env, d):
    """TR 38.901 Table 7.4.2-1 (h_UT ≤ 13 m), written out."""
    if env == "inh":  # mixed office
        if d <= 1.2:
            return 1.0
        return math.exp(-(d - 1.2) / 4.7) if d < 6.5 else math.exp(-(d - 6.5) / 32.6) * 0.32
    if d <= 18:
        return 1.0
    decay = 63 if env == "uma" else 36
    return 18 / d + math.exp(-d / decay) * (1 - 18 / d)


@pytest.mark.parametrize("env,h_bs", [("uma", 25.0), ("umi", 10.0), ("inh", 3.0)])
@pytest.mark.parametrize("los", [True, False])
def test_path_loss_is_the_standards_formula(env, h_bs, los):
    d = D2D[D2D <= 140] if env == "inh" else D2D
    for h_ut in (1.5, 7.0):
        got = t.path_loss_db(env, d, FC, np.full(d.size, los), h_bs, h_ut)
        want = [standard_pl(env, x, FC, los, h_bs, h_ut) for x in d]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    # the breakpoint is crossed where the standard has it (UMa at 3.5 GHz: ~2.6 km, UMi: ~0.9 km)
    if env != "inh":
        assert d.min() < t.breakpoint_m(FC, h_bs, 1.5) < d.max()


@pytest.mark.parametrize("env", ["uma", "umi", "inh"])
def test_los_probability_is_the_standards_formula(env):
    d = np.array([0.5, 1.2, 3.0, 6.5, 10.0, 18.0, 25.0, 60.0, 200.0, 1000.0])
    np.testing.assert_allclose(t.los_probability(env, d), [standard_los(env, x) for x in d], rtol=0, atol=1e-9)


def test_the_tables_come_from_tr3gpp_and_an_unknown_term_is_refused():
    from tr3gpp import tr38901

    entry = tr38901.section("7.4").pathloss(scenario="UMi-StreetCanyon", condition="NLOS")
    assert t.environment("umi").shadow_std_db["NLOS"] == entry.shadow_fading_std_db[0].value_db == 7.82
    assert t.environment("uma").correlation_m == {"LOS": 37.0, "NLOS": 50.0}
    with pytest.raises(ConfigError, match="cannot read the path-loss term"):
        t.parse_law(r"28.0 + 22\log_{10}(d_{3D}) + 3\sqrt{f_c}")


def _shadow_pairs(env, cond, spacing, reps, rng, iid=False):
    """Shadow fading (dB) of device pairs `spacing` m apart, drawn as the drop draws them."""
    e = t.environment(env)
    pos = np.array([[100.0, 0.0], [100.0 + spacing, 0.0]])
    out = np.empty((reps, 2))
    for i in range(reps):
        z = rng.standard_normal(2) if iid else t.correlated_normal(pos, e.correlation_m[cond], rng)
        out[i] = z * e.shadow_std_db[cond]
    return out


def shadowing_matches(samples, sigma, rho, reps) -> bool:
    """σ within 4 standard errors (of a normal sample's sd) and the correlation within 4 standard
    errors (Fisher z) of the stated values."""
    sd_ok = abs(samples.std(ddof=1) - sigma) < 4 * sigma / math.sqrt(2 * samples.size)
    r = np.corrcoef(samples[:, 0], samples[:, 1])[0, 1]
    rho_ok = abs(math.atanh(r) - math.atanh(rho)) < 4 / math.sqrt(reps - 3)
    return bool(sd_ok and rho_ok)


@pytest.mark.parametrize("env,cond", [("umi", "NLOS"), ("uma", "LOS")])
def test_shadow_fading_has_the_stated_std_and_correlation_over_distance(env, cond):
    e = t.environment(env)
    rng = np.random.default_rng(7)
    reps = 4000
    for spacing in (5.0, 20.0):
        rho = math.exp(-spacing / e.correlation_m[cond])
        assert shadowing_matches(_shadow_pairs(env, cond, spacing, reps, rng), e.shadow_std_db[cond], rho, reps)
    # negative controls: independent shadowing, and the right correlation with a wrong σ, fail
    spacing = 5.0
    rho = math.exp(-spacing / e.correlation_m[cond])
    iid = _shadow_pairs(env, cond, spacing, reps, rng, iid=True)
    assert not shadowing_matches(iid, e.shadow_std_db[cond], rho, reps)
    good = _shadow_pairs(env, cond, spacing, reps, rng)
    assert not shadowing_matches(good * 1.15, e.shadow_std_db[cond], rho, reps)


def test_a_scenario_takes_the_3gpp_law_and_refuses_a_drop_outside_its_range():
    sc = ms.scenario("paper-r1", devices=6, fields={"radio.path_loss_model": "3gpp-umi"})
    w = World(sc)
    # the gains are path loss + shadowing: within a few σ of the law at the drawn LOS state
    pl_db = -10 * np.log10(w.channel.path_loss)
    d = w.drop.distance_m
    bounds_los = t.path_loss_db("umi", d, 3.5, np.ones(d.size, bool))
    assert np.all(pl_db > bounds_los - 5 * 7.82)
    # the same seed draws the same large-scale channel; another law gives other gains
    assert np.array_equal(World(sc).channel.path_loss, w.channel.path_loss)
    paper_db = -10 * np.log10(World(ms.scenario("paper-r1", devices=6)).channel.path_loss)
    assert np.all(np.abs(paper_db - pl_db) > 1e-6)
    with pytest.raises(ConfigError, match=r"3gpp-inh holds for device distances in \[1, 150\] m"):
        ms.scenario("paper-r1", devices=6, fields={"radio.path_loss_model": "3gpp-inh"})
    off = ms.scenario("paper-r1", devices=6, fields={"radio.path_loss_model": "3gpp-umi", "radio.shadowing": False})
    los = t.path_loss_db("umi", d, 3.5, np.ones(d.size, bool))
    nlos = t.path_loss_db("umi", d, 3.5, np.zeros(d.size, bool))
    got = -10 * np.log10(World(off).channel.path_loss)
    assert np.all(np.isclose(got, los, atol=1e-9) | np.isclose(got, nlos, atol=1e-9))
