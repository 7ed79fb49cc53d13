"""Reactive modes and powers (§5.1): hand-solved instances, oracles, monotonicity, a convex solver."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _builders import make_instance, random_preset_instances

from multispin.errors import ConfigError
from multispin.optimize.reactive import (
    brute_force_oracle,
    dl_latency_s,
    dl_power_equalisation,
    fixed_modes_latency_s,
    optimal_modes_batch,
    reactive,
    t_comm_batch,
)
from multispin.system.radio import latency_s
from multispin.vocabulary import CODE_LINK, LINK_MODES, LinkCode
from oracles import linear_scan_oracle

# ----------------------------------------------------------------------------- hand-solved


def test_hand_solved_three_devices():
    """N0 = 1 W/Hz, B = 3 Hz (1 Hz each), S = 1 bit, P^ul = 1 W, P^dl = 3 W; h = (3, 1, 7).

    UL latencies 1/log2(1+h): A 1/2, B 1, C 1/3. Candidates (UL = n fastest):
    n=0 DL{C,A,B}: 2^{1/τ} − 1 = 3/(1/7+1/3+1) → τ = 0.6248; n=1 DL{A,B}: 2^{1/τ} = 1 + 3/(4/3) → τ = 0.5881;
    n=2 DL{B}: τ = 1/log2(4) = 0.5 = τ_A^ul → T = 0.5 (the optimum, a tie of UL and DL); n=3: T = 1.
    """
    inst = make_instance([3.0, 1.0, 7.0], bandwidth_hz=3.0, p_dl_w=3.0)
    d = reactive([0, 1, 2], inst)
    assert d.comm_latency_s == pytest.approx(0.5, rel=1e-12)
    assert d.mode.tolist() == [LinkCode.UL, LinkCode.DL, LinkCode.UL]
    assert d.power_w.tolist() == pytest.approx([1.0, 3.0, 1.0])  # UL at max power, Σ p^dl = P^dl
    assert d.bandwidth_hz.tolist() == pytest.approx([1.0, 1.0, 1.0])
    assert d.latency_s.tolist() == pytest.approx([0.5, 0.5, 1 / 3])
    # the other candidates, for the record
    assert 1 / math.log2(1 + 3 / (1 / 7 + 1 / 3 + 1)) == pytest.approx(0.6248, abs=1e-4)
    assert 1 / math.log2(1 + 3 / (4 / 3)) == pytest.approx(0.5881, abs=1e-4)
    bf = brute_force_oracle([[True, True, True]], inst)
    assert bf.latency_s[0] == pytest.approx(0.5)


def test_hand_solved_two_devices_all_dl_equalised():
    """Weak UL (P^ul = 0.1 W): both go DL. Σ (1/h_k)(2^{1/τ} − 1) = 3 with h = (3, 1):
    2^{1/τ} = 3.25, τ = 1/log2(3.25); p = (0.75, 2.25)."""
    inst = make_instance([3.0, 1.0], bandwidth_hz=2.0, p_ul_w=0.1, p_dl_w=3.0)
    d = reactive(np.array([True, True]), inst)
    assert d.mode.tolist() == [LinkCode.DL, LinkCode.DL]
    tau = 1 / math.log2(3.25)
    assert d.comm_latency_s == pytest.approx(tau, rel=1e-12)
    assert d.latency_s.tolist() == pytest.approx([tau, tau], rel=1e-12)  # equalised
    assert d.power_w.tolist() == pytest.approx([0.75, 2.25], rel=1e-12)
    assert d.dl_power_total_w == pytest.approx(3.0, rel=1e-12)


def test_no_rejection_and_single_device():
    inst = make_instance([3.0, 1.0], bandwidth_hz=2.0)
    d = reactive([], inst)
    assert d.comm_latency_s == 0 and d.mode.tolist() == [LinkCode.NONE, LinkCode.NONE]
    one = reactive([1], inst)
    # alone on B = 2 Hz: UL 1/(2 log2(1 + 1/2)) vs DL 1/(2 log2(1 + 3/2)): DL wins
    assert one.mode.tolist() == [LinkCode.NONE, LinkCode.DL]
    assert one.comm_latency_s == pytest.approx(1 / (2 * math.log2(2.5)))


# ----------------------------------------------------------------------------- realistic scale


def test_reactive_constraints_on_the_preset(qwen_world):
    inst = qwen_world.instance(0)
    rng = np.random.default_rng(0)
    for _ in range(50):
        rej = rng.random(inst.num_devices) < 0.5
        d = reactive(rej, inst)
        ul, dl = d.is_ul, d.is_dl
        assert np.array_equal(ul | dl, rej)
        assert np.allclose(d.power_w[ul], inst.p_ul_w[ul])  # UL at max power
        if dl.any():
            assert d.dl_power_total_w == pytest.approx(inst.radio.p_dl_w, rel=1e-9)  # Σ p = P^dl
            assert np.ptp(d.latency_s[dl]) <= 1e-9 * d.latency_s[dl].max()  # equalised
        # the latencies are those of the powers and bandwidths it returns
        gain = np.where(ul, inst.gain_ul, inst.gain_dl)
        lat = latency_s(inst.payload_bits, d.bandwidth_hz, d.power_w, gain, inst.radio.noise_psd_w_per_hz)
        assert np.allclose(lat[rej], d.latency_s[rej], rtol=1e-9)
        assert d.comm_latency_s == pytest.approx(optimal_modes_batch(rej[None], inst).latency_s[0], rel=1e-12)


def test_dl_root_closed_form_brent_and_bisection_agree(qwen_world):
    inst = qwen_world.instance(1)
    rng = np.random.default_rng(1)
    for _ in range(30):
        d = rng.random(inst.num_devices) < 0.4
        if not d.any():
            continue
        b = inst.radio.bandwidth_hz / d.sum()
        closed = dl_latency_s(d[None], inst, b)[0]
        brent = dl_power_equalisation(
            inst.gain_dl[d], inst.payload_bits[d], b, inst.radio.p_dl_w, inst.radio.noise_psd_w_per_hz
        )
        assert brent.latency_s == pytest.approx(closed, rel=1e-10)
        assert brent.power_w.sum() <= inst.radio.p_dl_w * (1 + 1e-12)
        assert brent.power_w.sum() == pytest.approx(inst.radio.p_dl_w, rel=1e-9)
    # unequal payloads: vectorised bisection vs Brent
    het = inst.replace(payload_bits=rng.uniform(1e4, 1e5, inst.num_devices))
    masks = rng.random((40, inst.num_devices)) < 0.4
    masks[:, 0] = True
    b = inst.radio.bandwidth_hz / masks.sum(axis=1)
    vec = dl_latency_s(masks, het, b)
    for m, bb, v in zip(masks, b, vec):
        brent = dl_power_equalisation(
            het.gain_dl[m], het.payload_bits[m], bb, het.radio.p_dl_w, het.radio.noise_psd_w_per_hz
        )
        assert v == pytest.approx(brent.latency_s, rel=1e-9)


# ----------------------------------------------------------------------------- oracles


def _masks_with_up_to(k: int, rng, n: int, max_rejected: int = 10) -> np.ndarray:
    masks = np.zeros((n, k), dtype=bool)
    for i in range(n):
        m = int(rng.integers(1, min(k, max_rejected) + 1))
        masks[i, rng.choice(k, size=m, replace=False)] = True
    return masks


def test_mode_selection_equals_brute_force_on_1000_instances():
    """|R| ≤ 10, drawn from the presets' distributions (Rayleigh deep fades and forced 10^-5..10^-2 fades,
    both model pairs, P^dl/P^ul ∈ {1, 4, 16, 64}, reciprocal or not)."""
    rng = np.random.default_rng(42)
    checked = ul_and_dl = 0
    for inst in random_preset_instances(250, seed=7, max_devices=14):
        masks = _masks_with_up_to(inst.num_devices, rng, 4)
        bf = brute_force_oracle(masks, inst)
        for method in ("fast", "bisection", "scan"):
            got = optimal_modes_batch(masks, inst, method=method, return_modes=True)
            assert np.allclose(got.latency_s, bf.latency_s, rtol=1e-9, atol=0), method
            # the returned modes achieve the latency
            assert np.allclose(fixed_modes_latency_s(masks, got.is_ul, inst), bf.latency_s, rtol=1e-9)
        checked += masks.shape[0]
        ul_and_dl += int(np.sum(bf.is_ul.any(axis=1) & (masks & ~bf.is_ul).any(axis=1)))
    assert checked >= 1000
    assert ul_and_dl > 200  # mixed UL/DL optima are common, so the test is not vacuous


def test_bisection_equals_brute_force_with_unequal_payloads():
    rng = np.random.default_rng(3)
    for inst in random_preset_instances(40, seed=11, max_devices=8):
        het = inst.replace(payload_bits=rng.uniform(5e3, 2e5, inst.num_devices))
        masks = _masks_with_up_to(het.num_devices, rng, 3, max_rejected=8)
        bf = brute_force_oracle(masks, het)
        for method in ("bisection", "scan"):
            got = optimal_modes_batch(masks, het, method=method, return_modes=True)
            assert np.allclose(got.latency_s, bf.latency_s, rtol=1e-8), method
    with pytest.raises(ConfigError, match="fast"):
        optimal_modes_batch(masks, het, method="fast")


def _split_payloads(inst, rng):
    """S^ul ≠ S^dl: per link uniform (two codecs, every device alike) or per device (heterogeneous),
    with ratios S^ul/S^dl from 1/40 to 40 (e.g. lattice up, dense down, and the reverse)."""
    k = inst.num_devices
    if rng.random() < 0.5:
        ul, dl = rng.uniform(2e3, 2e5), rng.uniform(2e3, 2e5)
        return inst.replace(payload_bits=np.full(k, ul), dl_payload_bits=np.full(k, dl))
    return inst.replace(payload_bits=rng.uniform(2e3, 2e5, k), dl_payload_bits=rng.uniform(2e3, 2e5, k))


def test_unequal_ul_and_dl_payloads_equal_brute_force_on_1000_instances():
    """S^ul ≠ S^dl (the running system's UL and DL codecs differ): the prefix structure in the order
    of τ_k^ul still gives the optimum. Every method against all 2^|R| splits."""
    rng = np.random.default_rng(2024)
    checked = ul_and_dl = 0
    for inst in random_preset_instances(1000, seed=13, max_devices=10):
        inst = _split_payloads(inst, rng)
        assert not inst.same_payload_both_links
        masks = _masks_with_up_to(inst.num_devices, rng, 1, max_rejected=10)
        bf = brute_force_oracle(masks, inst)
        methods = ("fast", "bisection", "scan") if inst.uniform_payload else ("bisection", "scan")
        for method in methods:
            got = optimal_modes_batch(masks, inst, method=method, return_modes=True)
            assert np.allclose(got.latency_s, bf.latency_s, rtol=1e-9, atol=0), method
            assert np.allclose(fixed_modes_latency_s(masks, got.is_ul, inst), bf.latency_s, rtol=1e-9)
        checked += masks.shape[0]
        ul_and_dl += int(np.sum(bf.is_ul.any(axis=1) & (masks & ~bf.is_ul).any(axis=1)))
    assert checked == 1000  # 1,000 instances, one rejected set each
    assert ul_and_dl > 150  # mixed optima are common: the comparison is not vacuous


def test_unequal_payloads_control_one_payload_for_both_links_is_caught():
    """Negative control: a solver that moves S^ul on both links (the old single-payload model)
    misses the brute-force optimum of the true instance, so the test above has teeth."""
    rng = np.random.default_rng(2024)
    wrong = total = 0
    for inst in random_preset_instances(60, seed=13, max_devices=10):
        inst = _split_payloads(inst, rng)
        masks = _masks_with_up_to(inst.num_devices, rng, 4, max_rejected=10)
        bf = brute_force_oracle(masks, inst)
        one_payload = optimal_modes_batch(masks, inst.replace(dl_payload_bits=None), return_modes=True)
        charged = fixed_modes_latency_s(masks, one_payload.is_ul, inst)  # its modes, the true bits
        wrong += int(np.sum(~np.isclose(one_payload.latency_s, bf.latency_s, rtol=1e-6)))
        assert np.all(charged >= bf.latency_s * (1 - 1e-9))
        total += masks.shape[0]
    assert wrong > 0.5 * total


def test_unequal_payloads_at_extreme_snr_and_ratio():
    """S^ul/S^dl = 40 at an SNR of ~1e8: the UL-equivalent x of the DL set overflows to inf, yet the
    fast path returns the finite all-DL latency of brute force, not 0."""
    inst = make_instance([1e8, 2e8, 4e8], bandwidth_hz=3.0, p_ul_w=1e-6, p_dl_w=3.0)
    inst = inst.replace(payload_bits=40.0, dl_payload_bits=1.0)
    masks = np.array([[True, True, True], [True, False, True]])
    bf = brute_force_oracle(masks, inst)
    fast = optimal_modes_batch(masks, inst, method="fast")
    assert np.all(bf.latency_s > 0) and not bf.is_ul.any()
    assert np.allclose(fast.latency_s, bf.latency_s, rtol=1e-9)


def test_reactive_latencies_use_each_links_payload(qwen_world):
    """One round's decision: UL devices are charged S^ul, DL devices S^dl, at the returned powers."""
    inst = qwen_world.instance(2)
    rng = np.random.default_rng(9)
    inst = inst.replace(
        payload_bits=np.full(inst.num_devices, 8_686.0), dl_payload_bits=np.full(inst.num_devices, 49_168.0)
    )
    for _ in range(30):
        rej = rng.random(inst.num_devices) < 0.5
        d = reactive(rej, inst)
        ul = d.is_ul
        bits = np.where(ul, inst.payload_bits, inst.payload_bits_dl)
        gain = np.where(ul, inst.gain_ul, inst.gain_dl)
        lat = latency_s(bits, d.bandwidth_hz, d.power_w, gain, inst.radio.noise_psd_w_per_hz)
        assert np.allclose(lat[rej], d.latency_s[rej], rtol=1e-9)
        assert d.comm_latency_s == pytest.approx(optimal_modes_batch(rej[None], inst).latency_s[0], rel=1e-9)


def test_linear_scan_oracle_matches(qwen_world):
    inst = qwen_world.instance(4)
    masks = np.random.default_rng(5).random((200, inst.num_devices)) < 0.3
    assert np.allclose(
        linear_scan_oracle(masks, inst).latency_s, optimal_modes_batch(masks, inst).latency_s, rtol=1e-12
    )


def test_zero_dl_power_means_all_ul(qwen_world):
    inst = qwen_world.instance(0).with_radio(p_dl_w=0.0)
    masks = np.random.default_rng(0).random((100, inst.num_devices)) < 0.5
    d = optimal_modes_batch(masks, inst, return_modes=True)
    assert np.array_equal(d.is_ul, masks)
    assert np.all(np.isfinite(d.latency_s))


# ----------------------------------------------------------------------------- monotonicity


def test_more_dl_power_never_raises_t_comm():
    rng = np.random.default_rng(8)
    strict = total = 0
    for inst in random_preset_instances(60, seed=21, max_devices=20):
        masks = rng.random((20, inst.num_devices)) < rng.uniform(0.2, 0.9)
        prev = None
        for p_dl in np.geomspace(1e-4, 10.0, 12):
            t = t_comm_batch(masks, inst.with_radio(p_dl_w=float(p_dl)))
            if prev is not None:
                assert np.all(t <= prev * (1 + 1e-12))
                strict += int(np.sum(t < prev * (1 - 1e-9)))
                total += t.size
            prev = t
    assert strict > 0.3 * total  # more power usually helps: the check has teeth


def test_adding_a_rejected_device_never_lowers_t_comm():
    """With the equal split B/|R| every device's share shrinks when one joins; T* still cannot fall
    (restricting the larger instance's optimal modes to R is feasible and faster)."""
    rng = np.random.default_rng(9)
    strict = total = 0
    for inst in random_preset_instances(80, seed=31, max_devices=20):
        k = inst.num_devices
        if k < 2:
            continue
        masks = rng.random((30, k)) < rng.uniform(0.1, 0.8)
        base = t_comm_batch(masks, inst)
        for j in range(k):
            grown = masks.copy()
            grown[:, j] = True
            t = t_comm_batch(grown, inst)
            new = ~masks[:, j]
            assert np.all(t[new] >= base[new] * (1 - 1e-12))
            strict += int(np.sum(t[new] > base[new] * (1 + 1e-9)))
            total += int(new.sum())
    assert strict > 0.9 * total  # adding a device (and shrinking every share) almost always costs time


def test_adding_a_device_at_fixed_bandwidth_would_differ():
    """Negative control for the test above: it is the equal split (shares shrink) that makes adding a
    device costly; with the share held at B/|R_old| the added device could not slow UL devices."""
    inst = make_instance([3.0, 1.0, 7.0], bandwidth_hz=2.0, p_dl_w=3.0)
    small = t_comm_batch([[True, False, True]], inst)[0]
    big = t_comm_batch([[True, True, True]], inst)[0]
    assert big > small
    # C alone in UL at B/2 would still finish in 1/(log2(1 + 7)) = 1/3 s; T grows because shares shrink
    assert small < 0.5


# ----------------------------------------------------------------------------- convex solver


def test_dl_power_allocation_matches_a_convex_solver(qwen_world):
    """max t s.t. b·log(1 + p_k h_k/(N0 b)) ≥ S·ln2·t, Σ p ≤ P^dl (exponential cone, cvxpy)."""
    cp = pytest.importorskip("cvxpy")
    inst = qwen_world.instance(2)
    rng = np.random.default_rng(2)
    for _ in range(5):
        d = rng.random(inst.num_devices) < 0.5
        d[0] = True
        m = int(d.sum())
        b = inst.radio.bandwidth_hz / m
        h = inst.gain_dl[d]
        snr_per_w = h / (inst.radio.noise_psd_w_per_hz * b)  # 1/W
        scale = inst.radio.p_dl_w
        x = cp.Variable(m, nonneg=True)  # p / P^dl
        t = cp.Variable()  # rate in units of S/b nats: latency = 1/(b/S · t ...)
        cons = [cp.log(1 + cp.multiply(snr_per_w * scale, x)) >= t, cp.sum(x) <= 1]
        cp.Problem(cp.Maximize(t), cons).solve(solver=cp.CLARABEL)
        tau_cvx = inst.payload_bits[0] * math.log(2) / (b * t.value)
        ours = dl_power_equalisation(h, inst.payload_bits[0], b, inst.radio.p_dl_w, inst.radio.noise_psd_w_per_hz)
        assert ours.latency_s == pytest.approx(tau_cvx, rel=1e-5)
        assert np.allclose(ours.power_w, x.value * scale, rtol=1e-3, atol=1e-6 * scale)


def test_bad_arguments():
    inst = make_instance([1.0, 2.0])
    with pytest.raises(ConfigError, match="modes"):
        t_comm_batch([[True, True]], inst, modes="sometimes")
    with pytest.raises(ConfigError, match="split"):
        t_comm_batch([[True, True]], inst, split="unequal")
    with pytest.raises(ConfigError, match="columns"):
        t_comm_batch([[True, True, True]], inst)
    with pytest.raises(ConfigError, match="mode_uniforms"):
        t_comm_batch([[True, True]], inst, modes="random")
    with pytest.raises(ConfigError, match="device indices"):
        reactive([5], inst)
    with pytest.raises(ConfigError, match="p_dl_w"):
        dl_power_equalisation([1.0], 1.0, 1.0, -1.0, 1.0)


def test_link_codes_name_the_links_of_the_vocabulary():
    """A decision's int8 codes and the link names are one table: each rejected device's code
    names its link (`link`, `mode_names`); a device not rejected has none."""
    assert set(CODE_LINK) == set(LinkCode) and {v for v in CODE_LINK.values() if v} == set(LINK_MODES)
    inst = make_instance([1.0, 2.0, 3.0])
    for rule, code, link in (("all_ul", LinkCode.UL, "ul"), ("all_dl", LinkCode.DL, "dl")):
        d = reactive([0, 2], inst, modes=rule)
        assert d.mode.tolist() == [code, LinkCode.NONE, code]
        assert (d.link(0), d.link(2)) == (link, link) and d.mode_names() == [link, "-", link]
    with pytest.raises(ConfigError, match="index 1 was not rejected"):  # a device with no link
        d.link(1)
