"""Codecs: real bytes, exact bit counts, round trips, determinism, exactness table, errors."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from multispin.errors import ConfigError, ProtocolError
from multispin.speculative.codecs import (
    PAPER_PAYLOAD_BITS,
    PAPER_VOCAB,
    Codec,
    DenseCodec,
    Exactness,
    LatticeCodec,
    SparseCodec,
    lattice_counts,
    lattice_rank,
    lattice_unrank,
    make_codec,
)
from multispin.speculative.warp import SamplingParams

SPECS = [
    "dense-fp32",
    "dense-fp16",
    "dense-bf16",
    "sparse:v_eff=4,q=16",
    "sparse:v_eff=4,q=32",
    "sparse:v_eff=8,q=16",
    "sparse:v_eff=8,q=32",
    "lattice:l=1",
    "lattice:l=7",
    "lattice:l=1000",
]
VOCABS = [8, 32, 1000]


def dirichlet_row(vocab: int, seed: int, alpha: float = 0.3, dtype=np.float32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(vocab, alpha)).astype(dtype)


def peaked_row(vocab: int, seed: int = 0, scale: float = 5.0) -> np.ndarray:
    """softmax(scale · N(0, 1)) as float32: one or a few dominant tokens and a long tail."""
    x = np.random.default_rng(seed).standard_normal(vocab) * scale
    p = np.exp(x - x.max())
    return (p / p.sum()).astype(np.float32)


def tv(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).sum())


# ------------------------------------------------------------------------------------------
# Round trips and sizes
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("vocab", VOCABS)
def test_roundtrip_sizes_and_decoded_row(spec: str, vocab: int):
    codec = make_codec(spec)
    for seed in range(3):
        p = dirichlet_row(vocab, seed)
        payload = codec.encode(p)
        assert isinstance(payload, bytes)
        assert len(payload) == codec.num_bytes(vocab) == math.ceil(codec.bits(vocab) / 8)
        q = codec.decode(payload, vocab)
        assert q.dtype == np.float64 and q.shape == (vocab,)
        assert np.all(q >= 0)
        assert abs(q.sum() - 1.0) < 1e-6
        again = codec.roundtrip(p)
        assert again.tobytes() == q.tobytes()  # deterministic, bit-identical
        assert codec.encode(p) == payload


@pytest.mark.parametrize("vocab", VOCABS)
def test_roundtrip_accuracy(vocab: int):
    p = dirichlet_row(vocab, 11)
    assert np.array_equal(make_codec("dense-fp32").roundtrip(p), p.astype(np.float64))
    assert tv(make_codec("dense-fp16").roundtrip(p), p) < 1e-3
    assert tv(make_codec("dense-bf16").roundtrip(p), p) < 5e-3
    # lattice: |q̂ - p| per entry <= 1/ℓ, so TV <= V/(2ℓ), and much less in practice
    lat = make_codec("lattice:l=1000").roundtrip(p)
    assert np.max(np.abs(lat - p)) <= 1 / 1000 + 1e-9
    # sparse keeps exactly the top V_eff and renormalises
    codec = make_codec("sparse:v_eff=8,q=32")
    q = codec.roundtrip(p)
    top = np.argsort(-p, kind="stable")[:8]
    assert set(np.flatnonzero(q)) <= set(top.tolist())
    np.testing.assert_allclose(q[top], p[top] / p[top].sum(dtype=np.float64), rtol=1e-6)


def test_float64_rows_are_accepted_and_renormalised():
    p = dirichlet_row(32, 5, dtype=np.float64)
    for spec in SPECS:
        q = make_codec(spec).roundtrip(p)
        assert abs(q.sum() - 1.0) < 1e-12


def test_dense_fp32_is_identity_on_float32_rows():
    p = peaked_row(1000)
    q = make_codec("dense-fp32").roundtrip(p)
    assert np.array_equal(q, p.astype(np.float64))


def test_fp16_keeps_small_probabilities():
    # Entries far below the fp16 normal range (6.1e-5) survive thanks to the power-of-two scale.
    p = np.full(1000, 1e-7, dtype=np.float64)
    p[0] = 1.0 - p[1:].sum()
    q = make_codec("dense-fp16").roundtrip(p)
    np.testing.assert_allclose(q, p, rtol=1e-3)


def test_bf16_rounds_to_nearest_even():
    from multispin.speculative.codecs import _bf16_bits

    vals = np.array(
        [
            np.uint32(0x3F80_8000),  # exactly halfway, even below: stays 0x3F80
            np.uint32(0x3F81_8000),  # exactly halfway, odd below: rounds up to 0x3F82
            np.uint32(0x3F80_8001),  # above halfway: up
            np.uint32(0x3F80_7FFF),  # below halfway: down
        ],
        dtype=np.uint32,
    ).view(np.float32)
    assert _bf16_bits(vals.astype(np.float64)).tolist() == [0x3F80, 0x3F82, 0x3F81, 0x3F80]


# ------------------------------------------------------------------------------------------
# Sparse
# ------------------------------------------------------------------------------------------


def test_paper_payload_bits():
    codec = make_codec("sparse:v_eff=1024,q=16")
    assert codec.bits(PAPER_VOCAB) == PAPER_PAYLOAD_BITS == 34_816
    assert codec.num_bytes(PAPER_VOCAB) == 4352
    assert make_codec("sparse") == codec  # paper defaults
    assert make_codec("sparse:v_eff=1024,q=32").bits(PAPER_VOCAB) == 1024 * (18 + 32)


@pytest.mark.parametrize("vocab,width", [(1, 0), (2, 1), (8, 3), (9, 4), (1000, 10), (1024, 10), (1025, 11)])
def test_sparse_index_width(vocab: int, width: int):
    assert SparseCodec(1, 16).bits(vocab) == width + 16


def test_sparse_ties_pick_lowest_index_and_padding():
    codec = SparseCodec(v_eff=3, q=32)
    p = np.array([0.1, 0.2, 0.2, 0.2, 0.3, 0.0], dtype=np.float32)
    q = codec.roundtrip(p)
    assert np.flatnonzero(q).tolist() == [1, 2, 4]  # 0.3, then the first two of the tied 0.2s
    # fewer nonzero entries than V_eff: padded, same size, row returned unchanged
    codec = SparseCodec(v_eff=5, q=16)
    p = np.array([0, 0.5, 0, 0, 0.25, 0.25, 0, 0], dtype=np.float32)
    payload = codec.encode(p)
    assert len(payload) == codec.num_bytes(8)
    assert np.array_equal(codec.decode(payload, 8), p.astype(np.float64))


def test_sparse_q32_reproduces_topk_rows_exactly():
    from multispin.speculative.warp import warp

    logits = np.random.default_rng(3).standard_normal((4, 1000)).astype(np.float32) * 2
    rows = warp(logits, SamplingParams(top_k=16))
    codec = make_codec("sparse:v_eff=16,q=32")
    for row in rows:
        assert np.array_equal(codec.roundtrip(row), row.astype(np.float64))


def test_sparse_bit_layout_is_packed():
    # V = 8: 3 index bits + 16 value bits per pair, pairs in increasing index order.
    codec = SparseCodec(v_eff=2, q=16)
    p = np.zeros(8, dtype=np.float32)
    p[5], p[2] = 0.5, 0.5
    payload = codec.encode(p)
    assert len(payload) == 5  # 38 bits
    bits = np.unpackbits(np.frombuffer(payload, np.uint8))
    assert bits[:3].tolist() == [0, 1, 0]  # index 2
    assert bits[19:22].tolist() == [1, 0, 1]  # index 5
    assert not bits[38:].any()


# ------------------------------------------------------------------------------------------
# Lattice
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("vocab,ell", [(1, 1), (1, 5), (2, 3), (4, 3), (5, 1), (151_665, 1000)])
def test_lattice_bits_formula(vocab: int, ell: int):
    total = math.comb(ell + vocab - 1, vocab - 1)
    expected = math.ceil(math.log2(total)) if total > 1 else 0
    if total > 1:  # guard the float formula at exact powers of two with the integer one
        expected = (total - 1).bit_length()
    assert LatticeCodec(ell).bits(vocab) == expected
    assert 2 ** LatticeCodec(ell).bits(vocab) >= total


def test_lattice_paper_size():
    assert LatticeCodec(1000).bits(PAPER_VOCAB) == 8686


@pytest.mark.parametrize("vocab,ell", [(4, 3), (3, 5), (5, 4), (1, 3), (6, 1)])
def test_lattice_rank_is_a_bijection(vocab: int, ell: int):
    total = math.comb(ell + vocab - 1, vocab - 1)
    comps = [c for c in itertools.product(range(ell + 1), repeat=vocab) if sum(c) == ell]
    assert len(comps) == total
    ranks = [lattice_rank(np.array(c)) for c in comps]
    assert sorted(ranks) == list(range(total))
    for c, r in zip(comps, ranks):
        assert lattice_unrank(r, ell, vocab).tolist() == list(c)
    codec = LatticeCodec(ell)
    for c in comps:  # every lattice point is its own round trip through real bytes
        p = np.array(c, dtype=np.float64) / ell
        assert codec.counts(p).tolist() == list(c)
        assert np.array_equal(codec.roundtrip(p), p)


def test_lattice_counts_sum_and_rounding():
    for seed, vocab in itertools.product(range(5), VOCABS):
        p = dirichlet_row(vocab, seed)
        for ell in (1, 3, 100, 1000):
            n = lattice_counts(p, ell)
            assert n.dtype == np.int64 and n.sum() == ell and n.min() >= 0
            # largest remainder: every count is floor or ceil of ℓ·p
            scaled = ell * p.astype(np.float64) / p.astype(np.float64).sum()
            assert np.all((n == np.floor(scaled)) | (n == np.floor(scaled) + 1))
    # ties: the remaining units go to the lowest indices
    assert lattice_counts(np.full(4, 0.25), 2).tolist() == [1, 1, 0, 0]
    assert lattice_counts(np.array([0.2, 0.3, 0.2, 0.3]), 1).tolist() == [0, 1, 0, 0]


def test_lattice_rank_random_large():
    rng = np.random.default_rng(7)
    for vocab, ell in [(1000, 50), (50, 1000), (2, 10_000)]:
        for _ in range(5):
            n = np.bincount(rng.integers(0, vocab, size=ell), minlength=vocab)
            r = lattice_rank(n)
            assert 0 <= r < math.comb(ell + vocab - 1, ell)
            assert np.array_equal(lattice_unrank(r, ell, vocab), n)
    # the extremes: all mass in the first / last bin
    for vocab, ell in [(1000, 50), (7, 3)]:
        first = np.zeros(vocab, np.int64)
        first[0] = ell
        last = np.zeros(vocab, np.int64)
        last[-1] = ell
        assert lattice_rank(first) == 0
        assert lattice_rank(last) == math.comb(ell + vocab - 1, ell) - 1
        assert np.array_equal(lattice_unrank(lattice_rank(last), ell, vocab), last)


# ------------------------------------------------------------------------------------------
# Greedy rows and the exactness table
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS + ["sparse:v_eff=1,q=16", "lattice:l=1"])
@pytest.mark.parametrize("vocab", [8, 1000])
def test_one_hot_survives_every_codec(spec: str, vocab: int):
    codec = make_codec(spec)
    for hot in (0, 3, vocab - 1):
        for dtype in (np.float32, np.float64):
            p = np.zeros(vocab, dtype=dtype)
            p[hot] = 1.0
            q = codec.roundtrip(p)
            assert np.array_equal(q, p.astype(np.float64)), (spec, hot)


def test_one_hot_from_greedy_warp_survives():
    from multispin.speculative.warp import warp

    logits = np.random.default_rng(0).standard_normal((3, 1000)).astype(np.float32)
    rows = warp(logits, SamplingParams(temperature=0.0))
    for spec in SPECS:
        codec = make_codec(spec)
        for row in rows:
            assert np.array_equal(codec.roundtrip(row), row.astype(np.float64))


GREEDY = SamplingParams(temperature=0.0)
FULL = SamplingParams()
TOP16 = SamplingParams(top_k=16)
TOP2000 = SamplingParams(top_k=2000)
NUCLEUS = SamplingParams(top_p=0.9)


@pytest.mark.parametrize(
    "spec,sampling,exact",
    [
        ("dense-fp32", FULL, True),
        ("dense-fp32", NUCLEUS, True),
        ("dense-fp16", FULL, False),
        ("dense-fp16", GREEDY, True),
        ("dense-bf16", TOP16, False),
        ("dense-bf16", GREEDY, True),
        ("sparse:v_eff=1024,q=32", TOP16, True),
        ("sparse:v_eff=1024,q=32", SamplingParams(top_k=1024), True),
        ("sparse:v_eff=1024,q=32", TOP2000, False),
        ("sparse:v_eff=1024,q=32", FULL, False),
        ("sparse:v_eff=1024,q=32", NUCLEUS, False),  # nucleus support is not bounded in advance
        ("sparse:v_eff=1024,q=32", SamplingParams(top_k=16, top_p=0.5), True),
        ("sparse:v_eff=1024,q=16", TOP16, False),
        ("sparse:v_eff=1024,q=16", GREEDY, True),
        ("sparse:v_eff=1,q=32", GREEDY, True),
        ("lattice:l=1000", TOP16, False),
        ("lattice:l=1000", GREEDY, True),
    ],
)
def test_exactness_table(spec: str, sampling: SamplingParams, exact: bool):
    codec = make_codec(spec)
    ul = codec.exactness("ul", sampling, PAPER_VOCAB)
    assert isinstance(ul, Exactness) and ul.exact and "UL" in ul.reason
    dl = codec.exactness("dl", sampling, PAPER_VOCAB)
    assert dl.exact is exact
    assert dl.reason and "\n" not in dl.reason
    if not exact:
        assert "approximat" in dl.reason


def test_exactness_when_sparse_cannot_fit():
    res = make_codec("sparse").exactness("dl", GREEDY, 8)
    assert not res.exact and "v_eff" in res.reason


def test_exactness_is_honest_on_real_rows():
    """Whatever the table calls exact in DL mode really reproduces the warped row bit for bit."""
    from multispin.speculative.warp import warp

    vocab = 1000
    logits = np.random.default_rng(4).standard_normal((2, vocab)).astype(np.float32) * 3
    for sampling in (GREEDY, FULL, TOP16, NUCLEUS, SamplingParams(top_k=64, temperature=0.7)):
        rows = warp(logits, sampling)
        for spec in SPECS + ["sparse:v_eff=64,q=32", "sparse:v_eff=64,q=16"]:
            codec = make_codec(spec)
            if codec.exactness("dl", sampling, vocab).exact:
                for row in rows:
                    assert np.array_equal(codec.roundtrip(row), row.astype(np.float64)), (spec, sampling)


# ------------------------------------------------------------------------------------------
# Parsing and errors
# ------------------------------------------------------------------------------------------


def test_make_codec_forms_and_names():
    assert make_codec("dense-fp32").name == "dense-fp32"
    assert make_codec(" Dense-BF16 ").name == "dense-bf16"
    assert make_codec("sparse:v_eff=1024,q=16").name == "sparse-v1024-q16"
    assert make_codec("sparse: q=32 , v_eff=64").name == "sparse-v64-q32"
    assert make_codec("lattice:l=1000").name == "lattice-l1000"
    assert make_codec("lattice").name == "lattice-l1000"
    for spec in SPECS:
        codec = make_codec(spec)
        assert isinstance(codec, Codec)
        assert make_codec(codec.name) == codec  # names parse back
    assert make_codec("dense-fp32").lossless and not make_codec("dense-fp16").lossless
    assert not make_codec("sparse").lossless and not make_codec("lattice").lossless


@pytest.mark.parametrize(
    "spec,needle",
    [
        ("dense-fp8", "codec: unknown"),
        ("gzip", "codec: unknown"),
        ("", "codec: unknown"),
        ("sparse:v_eff=0,q=16", "sparse.v_eff"),
        ("sparse:v_eff=-3", "sparse.v_eff"),
        ("sparse-v0-q16", "sparse.v_eff"),
        ("sparse:v_eff=abc", "sparse.v_eff"),
        ("sparse:v_eff=1024,q=8", "sparse.q"),
        ("sparse:v_eff=1024,q=64", "16 or 32"),
        ("sparse:v_eff=1024,foo=1", "sparse.foo"),
        ("sparse:v_eff", "key=value"),
        ("sparse:q=16,q=32", "given twice"),
        ("lattice:l=0", "lattice.l"),
        ("lattice-l0", "lattice.l"),
        ("lattice:ell=5", "lattice.ell"),
    ],
)
def test_bad_specs(spec: str, needle: str):
    with pytest.raises(ConfigError) as info:
        make_codec(spec)
    msg = str(info.value)
    assert needle in msg and "\n" not in msg


def test_unknown_spec_lists_the_accepted_forms():
    with pytest.raises(ConfigError, match="dense-fp32.*sparse:v_eff=N,q=16\\|32.*lattice:l=N"):
        make_codec("nope")
    with pytest.raises(ConfigError):
        make_codec(123)  # type: ignore[arg-type]


def test_bad_constructor_arguments():
    with pytest.raises(ConfigError, match="sparse.v_eff"):
        SparseCodec(v_eff=0)
    with pytest.raises(ConfigError, match="sparse.q.*16 or 32"):
        SparseCodec(q=24)
    with pytest.raises(ConfigError, match="lattice.l"):
        LatticeCodec(0)
    with pytest.raises(ConfigError, match="dense format"):
        DenseCodec("fp64")


def test_v_eff_larger_than_vocab():
    codec = make_codec("sparse:v_eff=16,q=16")
    with pytest.raises(ConfigError, match="v_eff.*vocab_size 8"):
        codec.encode(dirichlet_row(8, 0))
    with pytest.raises(ConfigError, match="v_eff"):
        codec.decode(bytes(codec.num_bytes(8)), 8)


@pytest.mark.parametrize("spec", SPECS)
def test_wrong_payload_length(spec: str):
    codec = make_codec(spec)
    payload = codec.encode(dirichlet_row(32, 1))
    for bad in (payload[:-1], payload + b"\0", b""):
        with pytest.raises(ConfigError, match=r"payload: .* needs \d+ bytes for vocab_size 32"):
            codec.decode(bad, 32)
    if codec.num_bytes(33) != len(payload):
        with pytest.raises(ConfigError, match="vocab_size 33"):
            codec.decode(payload, 33)


def test_bad_vocab_size():
    for spec in ("dense-fp32", "sparse", "lattice"):
        codec = make_codec(spec)
        for bad in (0, -5, 2.5):
            with pytest.raises(ConfigError, match="vocab_size"):
                codec.bits(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="mode"):
        make_codec("dense-fp32").exactness("up", FULL, 8)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad,needle",
    [
        (np.array([0.5, np.nan, 0.5]), "finite"),
        (np.array([0.5, np.inf, 0.5]), "finite"),
        (np.array([0.6, -0.1, 0.5]), ">= 0"),
        (np.array([0.5, 0.6, 0.5]), "sum to 1"),
        (np.zeros(4), "sum to 1"),
        (np.zeros((2, 4)), "1-D"),
        (np.zeros(0), "1-D"),
        (np.array(["a", "b"]), "real-valued"),
    ],
)
def test_bad_probability_rows(bad, needle: str):
    for spec in ("dense-fp32", "dense-fp16", "dense-bf16", "sparse:v_eff=1,q=16", "lattice:l=3"):
        with pytest.raises(ConfigError, match=needle):
            make_codec(spec).encode(bad)


def test_malformed_payloads():
    # dense: negative value, NaN, all zero
    codec = make_codec("dense-fp32")
    neg = np.array([0.5, -0.5, 1.0], dtype="<f4").tobytes()
    with pytest.raises(ProtocolError, match="negative"):
        codec.decode(neg, 3)
    with pytest.raises(ProtocolError, match="NaN"):
        codec.decode(np.array([0.5, np.nan, 0.5], dtype="<f4").tobytes(), 3)
    with pytest.raises(ProtocolError, match="no probability mass"):
        codec.decode(bytes(12), 3)
    with pytest.raises(ProtocolError, match="negative"):
        make_codec("dense-bf16").decode(np.array([0x3F00, 0xBF00], dtype="<u2").tobytes(), 2)
    with pytest.raises(ProtocolError, match="NaN"):
        make_codec("dense-fp16").decode(np.array([0x3800, 0x7E00], dtype="<u2").tobytes(), 2)
    # sparse: index out of range, repeated index, padding bits
    sparse = SparseCodec(v_eff=2, q=16)  # V = 5: 3 index bits + 16 value bits = 38 bits
    good = sparse.encode(np.array([0.5, 0, 0, 0.5, 0]))
    bits = np.unpackbits(np.frombuffer(good, np.uint8))
    out_of_range = bits.copy()
    out_of_range[19:22] = [1, 1, 1]  # second index = 7 >= 5
    with pytest.raises(ProtocolError, match="out of range"):
        sparse.decode(np.packbits(out_of_range).tobytes(), 5)
    repeated = bits.copy()
    repeated[19:22] = bits[0:3]
    with pytest.raises(ProtocolError, match="distinct"):
        sparse.decode(np.packbits(repeated).tobytes(), 5)
    padded = bits.copy()
    padded[-1] = 1
    with pytest.raises(ProtocolError, match="padding"):
        sparse.decode(np.packbits(padded).tobytes(), 5)
    # lattice: rank beyond the number of compositions
    lattice = LatticeCodec(3)
    with pytest.raises(ProtocolError, match="rank out of range"):
        lattice.decode(b"\xff" * lattice.num_bytes(4), 4)
    with pytest.raises(ProtocolError):
        lattice.decode("abc", 4)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------
# The paper's vocabulary
# ------------------------------------------------------------------------------------------


def test_paper_vocab_sparse_and_lattice():
    p = peaked_row(PAPER_VOCAB, seed=1)
    sparse = make_codec("sparse:v_eff=1024,q=16")
    payload = sparse.encode(p)
    assert len(payload) == 4352
    q = sparse.decode(payload, PAPER_VOCAB)
    assert np.count_nonzero(q) <= 1024 and abs(q.sum() - 1) < 1e-12
    assert tv(q, p) < 0.05

    lattice = make_codec("lattice:l=1000")  # its speed at this V: benchmarks/bench_codecs.py
    payload = lattice.encode(p)
    q = lattice.decode(payload, PAPER_VOCAB)
    assert len(payload) == lattice.num_bytes(PAPER_VOCAB) == 1086
    assert np.array_equal(q, lattice.counts(p) / 1000.0)
    assert np.array_equal(lattice.roundtrip(p), q)
