"""Unit conversions, Shannon rate/latency/power, payload bit counts, Instance validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from multispin.errors import ConfigError
from multispin.system import ComputeParams, Instance, RadioParams
from multispin.system.payload import PAPER_PAYLOAD_BITS, distribution_bits, draft_upload_bits_per_token, token_id_bits
from multispin.system.radio import (
    dbm_to_w,
    latency_s,
    noise_psd_w_per_hz,
    power_for_latency_w,
    rate_bps,
    w_to_dbm,
)


def test_conversions():
    assert dbm_to_w(10) == pytest.approx(0.01)
    assert dbm_to_w(30) == pytest.approx(1.0)
    assert w_to_dbm(0.04) == pytest.approx(16.0206, abs=1e-4)
    assert noise_psd_w_per_hz(-174, 0) == pytest.approx(3.981e-21, rel=1e-3)
    assert noise_psd_w_per_hz(-174, 10) == pytest.approx(10 * noise_psd_w_per_hz(-174, 0))


def test_rate_latency_power_are_consistent():
    b, p, h, n0 = 1e6, 0.01, 1e-12, 4e-21
    r = rate_bps(b, p, h, n0)
    assert r == pytest.approx(b * math.log2(1 + p * h / (n0 * b)))
    tau = latency_s(34_816, b, p, h, n0)
    assert tau == pytest.approx(34_816 / r)
    assert power_for_latency_w(34_816, tau, b, h, n0) == pytest.approx(p, rel=1e-12)
    taus = np.linspace(0.5 * tau, 3 * tau, 20)
    pw = power_for_latency_w(34_816, taus, b, h, n0)
    assert np.all(np.diff(pw) < 0)  # strictly decreasing in τ
    assert np.all(np.diff(power_for_latency_w(34_816, tau, np.linspace(1e5, 1e7, 20), h, n0)) < 0)  # and in B


def test_payload_bits():
    assert token_id_bits(151_665) == 18
    assert distribution_bits("sparse:v_eff=1024,q=16", 151_665) == 34_816 == PAPER_PAYLOAD_BITS
    assert distribution_bits("sparse-v1024-q16") == 34_816  # a codec's name, at the paper's V
    assert distribution_bits("dense-fp32", 151_665) == 151_665 * 32
    assert distribution_bits("dense-fp16", 1000) == 16_000
    assert distribution_bits("lattice:l=4", 5) == math.ceil(math.log2(math.comb(8, 4)))
    assert distribution_bits("lattice:l=1024", 151_665) == math.ceil(math.log2(math.comb(1024 + 151_664, 151_664)))
    assert distribution_bits("lattice", 151_665) == distribution_bits("lattice:l=1000", 151_665)  # one default
    assert draft_upload_bits_per_token(151_665) == 34
    with pytest.raises(ConfigError, match="codec"):
        distribution_bits("zip")


def _inst(**kw):
    base = dict(
        gain_ul=[1e-12, 2e-12],
        gain_dl=[1e-12, 2e-12],
        alpha=[0.9, 0.8],
        draft_latency_s=0.01,
        payload_bits=1000.0,
        radio=RadioParams(1e6, 0.01, 0.04, 4e-21),
        compute=ComputeParams(0.04, 0.01),
        gamma_max=5,
    )
    base.update(kw)
    return Instance(**base)


def test_instance_tables_and_validation():
    inst = _inst()
    assert inst.survival.shape == (2, 6)
    assert inst.expected_tokens[0, 3] == pytest.approx((1 - 0.9**4) / 0.1)
    per_pos = _inst(alpha=[[0.9, 0.8, 0.7, 0.6, 0.5], [0.5] * 5])
    assert per_pos.survival[0, 3] == pytest.approx(0.9 * 0.8 * 0.7)
    with pytest.raises(ConfigError, match="alpha"):
        _inst(alpha=[0.9, 1.2])
    with pytest.raises(ConfigError, match="gain_ul"):
        _inst(gain_ul=[0.0, 1e-12])
    with pytest.raises(ConfigError, match="gain_dl"):
        _inst(gain_dl=[1e-12])
    with pytest.raises(ConfigError, match=r"p_dl_w: must be in \[0, inf\) W"):
        RadioParams(1e6, 0.01, -0.1, 4e-21)
    with pytest.raises(ConfigError, match=r"bandwidth_hz: must be in \(0, inf\) Hz"):
        RadioParams(-1e6, 0.01, 0.1, 4e-21)
    with pytest.raises(ConfigError, match="t_ver1_s"):
        ComputeParams(0.04, -0.01)
    sub = _inst().subset([1])
    assert sub.num_devices == 1 and sub.alpha.tolist() == [0.8]


@pytest.mark.parametrize(
    "spec",
    [
        "sparse:v_eff=1024,q=16",
        "sparse:v_eff=64,q=32",
        "dense-fp32",
        "dense-fp16",
        "dense-bf16",
        "lattice:l=1000",
        "lattice:l=7",
    ],
)
@pytest.mark.parametrize("vocab", [49_152, 151_665])
def test_optimiser_bit_counts_equal_the_codecs_own(spec, vocab):
    """The optimiser plans with exactly the bits the engine's codecs put on the wire, and a
    scenario's payload names its codec as --ul-codec does."""
    from multispin.speculative.codecs import make_codec
    from multispin.system.scenario import get_preset

    assert distribution_bits(spec, vocab) == make_codec(spec).bits(vocab)
    sc = get_preset("paper-qwen").override({"payload.codec": spec, "payload.vocab_size": vocab})
    assert sc.payload.distribution_bits == make_codec(spec).bits(vocab)


def test_a_scenario_refuses_a_bad_codec_spec_naming_the_field():
    from multispin.system.scenario import get_preset

    for bad in ("sparse-topk", "zip", "sparse:v_eff=1024,q=8"):
        with pytest.raises(ConfigError, match="payload.codec"):
            get_preset("paper-qwen").override({"payload.codec": bad})
    with pytest.raises(ConfigError, match="payload.codec: v_eff"):
        get_preset("paper-qwen").override({"payload.codec": "sparse:v_eff=512,q=16", "payload.vocab_size": 100})
