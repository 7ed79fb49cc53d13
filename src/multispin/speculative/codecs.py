"""Codecs for one probability distribution over V tokens: real bytes, and the exact bit count
the optimiser plans with (docs/system-model.md §4).

Three families:

- ``dense-fp32`` / ``dense-fp16`` / ``dense-bf16``: all V values at 32 or 16 bits (fp16 values
  are scaled by a power of two first, which the decoder's renormalisation removes, so small
  probabilities are not flushed to fp16 subnormals or zero).
- ``sparse-v{V_eff}-q{Q}``: the V_eff largest entries as (index, value) pairs, ⌈log2 V⌉ + Q bits
  each (the paper's model: 1024 · (18 + 16) = 34,816 bits at V = 151,665).
- ``lattice-l{ℓ}`` (Quantize-Sample-and-Verify, arXiv 2507.00605): integer counts n_i ≥ 0 with
  Σ n_i = ℓ, sent as the rank of the count vector among all C(ℓ+V−1, V−1) compositions.

Rules every codec follows:

- ``len(encode(p)) == num_bytes(V) == ceil(bits(V) / 8)``, always, whatever p looks like.
- ``decode`` returns a fresh float64 row, non-negative, summing to 1. It is a pure function of
  the payload, so ``roundtrip(p)`` is bit-identical on every call and on both ends of the link.
- A row the codec can carry exactly comes back unchanged (bit for bit, as float64). The dense and
  sparse encoders say so with the sign bit of the first value slot (values are never negative, so
  that bit is otherwise always 0). Every other row is renormalised after decoding, dividing by
  its exactly rounded sum (as math.fsum gives it), so the result does not depend on summation
  order or platform.
  The lossless path returns the sender's own row, which sums to 1 only as well as that row did
  (a float32 softmax over 151k ids is off by up to ~4e-5).
- Encoding needs a probability row: 1-D, finite, non-negative, summing to 1 within
  ``PROB_SUM_TOL``.

Exactness (``Codec.exactness``): in UL mode every codec is exact because the device draws its
draft from the decoded q̂ and reports q̂(x). In DL mode a codec is exact only if it reproduces the
target row p bit for bit: dense-fp32 always (warp rows are float32), sparse with Q = 32 when the
sampling policy keeps at most V_eff tokens, and every codec under greedy sampling (a one-hot row
survives them all). Everything else is declared an approximation, with the reason.
"""

from __future__ import annotations

import abc
import math
import re
from functools import lru_cache
from typing import Any, Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from multispin.errors import ConfigError, ProtocolError, config_error_from_validation
from multispin.speculative.warp import SamplingParams
from multispin.vocabulary import LINK_MODES, LinkMode

PAPER_PAYLOAD_BITS = 34_816
PAPER_VOCAB = 151_665

# A row handed to `encode` must sum to 1 within this. A float32 softmax over 151,665 ids is off
# by up to ~4e-5 (measured); a row further off than 1e-3 is not a probability row.
PROB_SUM_TOL = 1e-3

_FP16_MAX_EXP = 15  # scale so that the largest value lands in [2^14, 2^15): far from fp16 overflow


class Exactness(NamedTuple):
    """Whether using a codec keeps the output law exactly the target's, and why (or why not)."""

    exact: bool
    reason: str


def exactness_by_mode(
    ul_codec: Codec,
    dl_codec: Codec,
    sampling: SamplingParams,
    vocab_size: int,
    modes: tuple[LinkMode, ...] = LINK_MODES,
) -> dict[str, Exactness]:
    """The verdict of each mode for the codec that moves its distribution (UL: q̂_j, DL: p_j)."""
    return {m: (ul_codec if m == "ul" else dl_codec).exactness(m, sampling, vocab_size) for m in modes}


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------


def _check_vocab(vocab_size: int) -> int:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
        raise ConfigError(f"vocab_size: must be an integer >= 1 (got {vocab_size!r})")
    return int(vocab_size)


def _as_prob_row(probs) -> np.ndarray:
    """Validate a probability row; returns it as float64 (an exact widening of float16/32 input)."""
    p = np.asarray(probs)
    if p.ndim != 1 or p.shape[0] < 1:
        raise ConfigError(f"probs: need a 1-D row of V >= 1 probabilities (got shape {p.shape})")
    if not (np.issubdtype(p.dtype, np.floating) or np.issubdtype(p.dtype, np.integer)):
        raise ConfigError(f"probs: need a real-valued row (got dtype {p.dtype})")
    p64 = p.astype(np.float64)
    if not np.all(np.isfinite(p64)):
        raise ConfigError("probs: every entry must be finite (got NaN or inf)")
    if np.any(p64 < 0):
        raise ConfigError(f"probs: every entry must be >= 0 (got min {p64.min()!r})")
    total = float(p64.sum())  # a sanity bound, not part of any result: pairwise sum is enough
    if abs(total - 1.0) > PROB_SUM_TOL:
        raise ConfigError(f"probs: must sum to 1 within {PROB_SUM_TOL:g} (got {total!r})")
    return p64


def _exact_sum(v: np.ndarray) -> float:
    """The exactly rounded sum of non-negative float64 values (independent of order)."""
    if v.size < (1 << 22) and np.all(v < 65536.0):
        units = v * 2.0**24  # exact power-of-two scaling
        as_int = units.astype(np.int64)
        if np.array_equal(as_int, units):  # fp16 values: integer units, exact in int64
            return float(int(as_int.sum())) / 2.0**24
    return math.fsum(v[v > 0].tolist())


def _renormalise(values: np.ndarray) -> np.ndarray:
    """values / (exactly rounded sum): order-independent, so bit-identical everywhere."""
    v = values.astype(np.float64)
    total = _exact_sum(v)
    if not total > 0:
        raise ProtocolError("payload: carries no probability mass (all values are zero)")
    return v / total


def _top_indices(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest entries of x >= 0 (ties: lowest index first), sorted ascending.

    O(V): a partition over the positive entries only (a row that is mostly zeros, such as a
    top-k warped row, would otherwise make the partition crawl through one huge tie)."""
    n = x.shape[0]
    if k >= n:
        return np.arange(n, dtype=np.int64)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    positive = np.flatnonzero(x > 0)
    if positive.size <= k:  # every positive entry, then the lowest-index zeros
        zeros = np.flatnonzero(x <= 0)[: k - positive.size]
        return np.sort(np.concatenate([positive, zeros])).astype(np.int64)
    vals = x[positive]
    m = vals.shape[0]
    kth = np.partition(vals, m - k)[m - k]  # the k-th largest value
    greater = positive[vals > kth]
    tied = positive[vals == kth][: k - greater.size]
    return np.sort(np.concatenate([greater, tied])).astype(np.int64)


def _index_bits(vocab_size: int) -> int:
    """⌈log2 V⌉ (0 for V = 1)."""
    return (vocab_size - 1).bit_length()


# Float formats: (numpy dtype of the raw bits, numpy float dtype, sign-bit mask)
_RAW: dict[int, tuple[np.dtype, np.dtype, Any]] = {
    32: (np.dtype("<u4"), np.dtype("<f4"), np.uint32(0x8000_0000)),
    16: (np.dtype("<u2"), np.dtype("<f2"), np.uint16(0x8000)),
}


def _bf16_bits(p64: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns of float32(p): round-to-nearest-even of the top 16 bits."""
    u = p64.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    return rounded.astype(np.uint16)


def _bf16_values(bits16: np.ndarray) -> np.ndarray:
    return (bits16.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


def _fp16_scale(values: np.ndarray) -> float:
    """A power of two that puts the largest value in [2^14, 2^15) before the fp16 cast.

    The decoder renormalises, which removes any common factor, so the scale is never sent; it
    only keeps small probabilities out of the fp16 subnormal range (below 6.1e-5)."""
    top = float(values.max()) if values.size else 0.0
    if top <= 0:
        return 1.0
    _, exp = math.frexp(top)  # top = m * 2^exp, m in [0.5, 1)
    return math.ldexp(1.0, _FP16_MAX_EXP - exp)


def _quantise_values(values: np.ndarray, q: int, *, complete: bool) -> np.ndarray:
    """Raw bit patterns (uint16 / uint32) of Q-bit float values.

    If `complete` (the values are the whole row) and every value is exactly representable, the
    values are sent as they are and the sign bit of slot 0 is set: the decoder then returns them
    without renormalising. Otherwise fp16 values are first scaled by a power of two (see
    `_fp16_scale`; exact, and removed by the decoder's renormalisation)."""
    raw_dtype, float_dtype, sign = _RAW[q]
    if q == 32:
        cast = values.astype(float_dtype)
        verbatim = complete and np.array_equal(cast.astype(np.float64), values)
    else:
        scaled = values * _fp16_scale(values)
        cast = scaled.astype(float_dtype)
        verbatim = False
        # Exact at the scale implies nothing about 1x, but inexact at the scale rules it out
        # (scaling up never loses precision), so the second cast runs only on rare rows.
        if complete and np.array_equal(cast.astype(np.float64), scaled):
            unscaled = values.astype(float_dtype)
            if np.array_equal(unscaled.astype(np.float64), values):
                cast, verbatim = unscaled, True
    raw = cast.view(raw_dtype).copy()
    if verbatim and raw.size:
        raw[0] |= sign
    return raw


def _dequantise_values(raw: np.ndarray, q: int, what: str) -> tuple[np.ndarray, bool]:
    """Float64 values and the verbatim flag from raw bit patterns; rejects negatives, NaN, inf."""
    raw_dtype, float_dtype, sign = _RAW[q]
    raw = raw.astype(raw_dtype, copy=True)
    verbatim = bool(raw.size and raw[0] & sign)
    if raw.size:
        raw[0] &= ~sign
    if np.any(raw & sign):
        raise ProtocolError(f"{what}: negative value in payload (values must be >= 0)")
    vals = raw.view(float_dtype).astype(np.float64)
    if not np.all(np.isfinite(vals)):
        raise ProtocolError(f"{what}: NaN or inf value in payload")
    return vals, verbatim


# --------------------------------------------------------------------------------------------
# The codec interface
# --------------------------------------------------------------------------------------------


class Codec(abc.ABC):
    """Encodes one distribution over V tokens to exactly `num_bytes(V)` bytes and back."""

    name: str
    lossless: bool

    @abc.abstractmethod
    def bits(self, vocab_size: int) -> int:
        """Exact payload size in bits of one distribution over `vocab_size` tokens."""

    def num_bytes(self, vocab_size: int) -> int:
        """ceil(bits / 8): the length of every payload `encode` returns."""
        return (self.bits(vocab_size) + 7) // 8

    @abc.abstractmethod
    def encode(self, probs: np.ndarray) -> bytes:
        """Payload of exactly `num_bytes(len(probs))` bytes."""

    @abc.abstractmethod
    def decode(self, payload: bytes, vocab_size: int) -> np.ndarray:
        """Decoded row: float64, non-negative, sums to 1 (see the module docstring)."""

    def roundtrip(self, probs: np.ndarray) -> np.ndarray:
        """decode(encode(probs)): the row the receiver sees; bit-identical on every call."""
        p = np.asarray(probs)
        return self.decode(self.encode(p), int(p.shape[-1]) if p.ndim else 0)

    def exactness(self, mode: LinkMode, sampling: SamplingParams, vocab_size: int) -> Exactness:
        """Whether moving a row with this codec keeps the output law exactly the target's."""
        if mode not in LINK_MODES:
            raise ConfigError(f"mode: must be one of {', '.join(LINK_MODES)} (got {mode!r})")
        if not isinstance(sampling, SamplingParams):
            raise ConfigError(f"sampling: need a SamplingParams (got {type(sampling).__name__})")
        vocab = _check_vocab(vocab_size)
        unusable = self._unusable(vocab)
        if unusable:
            return Exactness(False, unusable)
        if mode == "ul":
            return Exactness(
                True,
                (
                    f"UL: the device draws its draft from the decoded q̂ = {self.name} roundtrip of q "
                    "and reports q̂(x); server and device use the same q̂"
                ),
            )
        if self.lossless:
            return Exactness(True, f"DL: {self.name} carries the float32 target row p bit for bit")
        if sampling.greedy:
            return Exactness(True, (f"DL, greedy: the one-hot target row is reproduced exactly by {self.name}"))
        return self._dl_exactness(sampling, vocab)

    @abc.abstractmethod
    def _dl_exactness(self, sampling: SamplingParams, vocab_size: int) -> Exactness:
        """DL mode, non-greedy sampling, lossy codec."""

    def _unusable(self, vocab_size: int) -> str | None:
        """Why this codec cannot carry a row over `vocab_size` tokens (None if it can)."""
        return None

    def _check_payload(self, payload: bytes, vocab_size: int) -> tuple[bytes, int]:
        vocab = _check_vocab(vocab_size)
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise ProtocolError(f"payload: need bytes (got {type(payload).__name__})")
        payload = bytes(payload)
        need = self.num_bytes(vocab)
        if len(payload) != need:
            raise ConfigError(f"payload: {self.name} needs {need} bytes for vocab_size {vocab} (got {len(payload)})")
        return payload, vocab

    def __repr__(self) -> str:
        return f"<Codec {self.name}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Codec) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


# --------------------------------------------------------------------------------------------
# Dense
# --------------------------------------------------------------------------------------------

_DENSE_FORMATS = ("fp32", "fp16", "bf16")


class DenseCodec(Codec):
    """All V values at 32 (fp32) or 16 (fp16, bf16) bits, little-endian.

    fp32 is lossless for float32 rows. fp16 scales the row by a power of two (so small
    probabilities stay normal numbers), rounds to nearest even and renormalises after decoding;
    bf16 rounds float32(p) to nearest even on its top 16 bits and renormalises.
    """

    def __init__(self, fmt: str = "fp32"):
        if fmt not in _DENSE_FORMATS:
            raise ConfigError(f"dense format: must be one of {', '.join(_DENSE_FORMATS)} (got {fmt!r})")
        self.fmt = fmt
        self.name = f"dense-{fmt}"
        self.lossless = fmt == "fp32"
        self._value_bits = 32 if fmt == "fp32" else 16

    def bits(self, vocab_size: int) -> int:
        return _check_vocab(vocab_size) * self._value_bits

    def encode(self, probs: np.ndarray) -> bytes:
        p = _as_prob_row(probs)
        if self.fmt == "bf16":
            raw = _bf16_bits(p)
            if np.array_equal(_bf16_values(raw), p):
                raw[0] |= np.uint16(0x8000)
            return raw.astype("<u2").tobytes()
        return _quantise_values(p, self._value_bits, complete=True).tobytes()

    def decode(self, payload: bytes, vocab_size: int) -> np.ndarray:
        payload, vocab = self._check_payload(payload, vocab_size)
        raw_dtype = _RAW[self._value_bits][0]
        raw = np.frombuffer(payload, dtype=raw_dtype)
        if self.fmt == "bf16":
            raw = raw.copy()
            verbatim = bool(raw[0] & 0x8000)
            raw[0] &= np.uint16(0x7FFF)
            if np.any(raw & np.uint16(0x8000)):
                raise ProtocolError(f"{self.name}: negative value in payload (values must be >= 0)")
            vals = _bf16_values(raw)
            if not np.all(np.isfinite(vals)):
                raise ProtocolError(f"{self.name}: NaN or inf value in payload")
        else:
            vals, verbatim = _dequantise_values(raw, self._value_bits, self.name)
        if verbatim:
            if not np.any(vals > 0):
                raise ProtocolError("payload: carries no probability mass (all values are zero)")
            return vals
        return _renormalise(vals)

    def _dl_exactness(self, sampling: SamplingParams, vocab_size: int) -> Exactness:
        sig = 11 if self.fmt == "fp16" else 8
        return Exactness(
            False,
            (
                f"DL: {self.name} rounds each p_i to {sig} significant bits and renormalises, so the "
                "device's residual uses p̂ ≠ p and the output law only approximates the target "
                "(exact only for greedy sampling or with dense-fp32)"
            ),
        )


# --------------------------------------------------------------------------------------------
# Sparse top-V_eff
# --------------------------------------------------------------------------------------------


class _SparseParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    v_eff: int = Field(1024, ge=1, description="number of (index, value) pairs sent")
    q: Literal[16, 32] = Field(16, description="bits per value: 16 = float16, 32 = float32")


class SparseCodec(Codec):
    """The V_eff largest entries (ties: lowest index) as (index, value) pairs.

    Each pair is ⌈log2 V⌉ index bits (big-endian) then Q value bits (float16 or float32 bit
    pattern, big-endian), pairs in increasing index order, bit-packed; zero bits pad the last
    byte. A row with fewer than V_eff nonzero entries is padded with zero-valued pairs (the
    lowest unused indices), so the size never changes. Decoding scatters the values and
    renormalises, unless the payload is flagged verbatim (every nonzero entry sent exactly).
    """

    def __init__(self, v_eff: int = 1024, q: int = 16):
        try:
            params = _SparseParams(v_eff=v_eff, q=q)
        except ValidationError as exc:
            raise config_error_from_validation(exc, prefix="sparse") from None
        self.v_eff = params.v_eff
        self.q = params.q
        self.name = f"sparse-v{self.v_eff}-q{self.q}"
        self.lossless = False

    def bits(self, vocab_size: int) -> int:
        return self.v_eff * (_index_bits(_check_vocab(vocab_size)) + self.q)

    def _unusable(self, vocab_size: int) -> str | None:
        if self.v_eff > vocab_size:
            return (
                f"sparse.v_eff: must be <= vocab_size {vocab_size} "
                f"(got {self.v_eff}); {self.name} cannot carry this row"
            )
        return None

    def _check_fits(self, vocab_size: int) -> None:
        unusable = self._unusable(vocab_size)
        if unusable:
            raise ConfigError(unusable)

    def encode(self, probs: np.ndarray) -> bytes:
        p = _as_prob_row(probs)
        vocab = p.shape[0]
        self._check_fits(vocab)
        idx = _top_indices(p, self.v_eff)
        vals = p[idx]
        complete = bool(np.count_nonzero(p) == np.count_nonzero(vals))
        raw = _quantise_values(vals, self.q, complete=complete)
        w = _index_bits(vocab)
        idx_bits = (idx[:, None] >> np.arange(w - 1, -1, -1, dtype=np.int64)) & 1
        val_bits = (raw.astype(np.uint64)[:, None] >> np.arange(self.q - 1, -1, -1, dtype=np.uint64)) & np.uint64(1)
        matrix = np.concatenate([idx_bits.astype(np.uint8), val_bits.astype(np.uint8)], axis=1)
        return np.packbits(matrix.ravel()).tobytes()

    def decode(self, payload: bytes, vocab_size: int) -> np.ndarray:
        payload, vocab = self._check_payload(payload, vocab_size)
        self._check_fits(vocab)
        w = _index_bits(vocab)
        nbits = self.v_eff * (w + self.q)
        stream = np.unpackbits(np.frombuffer(payload, dtype=np.uint8))
        if np.any(stream[nbits:]):
            raise ProtocolError(f"{self.name}: nonzero padding bits after the last pair")
        matrix = stream[:nbits].reshape(self.v_eff, w + self.q).astype(np.uint64)
        idx_weights = np.uint64(1) << np.arange(w - 1, -1, -1, dtype=np.uint64)
        val_weights = np.uint64(1) << np.arange(self.q - 1, -1, -1, dtype=np.uint64)
        idx = (matrix[:, :w] * idx_weights).sum(axis=1).astype(np.int64)
        raw = (matrix[:, w:] * val_weights).sum(axis=1)
        if np.any(idx >= vocab):
            raise ProtocolError(f"{self.name}: token index out of range 0..{vocab - 1}")
        if np.any(np.diff(idx) <= 0):
            raise ProtocolError(f"{self.name}: pair indices must be distinct and increasing")
        vals, verbatim = _dequantise_values(raw, self.q, self.name)
        out = np.zeros(vocab, dtype=np.float64)
        out[idx] = vals
        if verbatim:
            if not np.any(vals > 0):
                raise ProtocolError("payload: carries no probability mass (all values are zero)")
            return out
        return _renormalise(out)

    def _dl_exactness(self, sampling: SamplingParams, vocab_size: int) -> Exactness:
        support = sampling.support_size(vocab_size)
        fits = support <= self.v_eff
        if fits and self.q == 32:
            return Exactness(
                True,
                (
                    f"DL: the policy keeps at most {support} tokens <= V_eff = {self.v_eff}, so every "
                    f"nonzero p_i travels as its float32 value and {self.name} returns p unchanged"
                ),
            )
        why = []
        if not fits:
            why.append(
                f"the policy can put mass on {support} tokens > V_eff = {self.v_eff}, "
                "so the tail is dropped and p̂ is renormalised"
            )
        if self.q == 16:
            why.append("values are rounded to float16 (11 significant bits)")
        return Exactness(
            False,
            (
                f"DL: {self.name} is an approximation: {'; '.join(why)}; the device's residual uses "
                "p̂ ≠ p (exact with q=32 and top_k <= V_eff, or greedy sampling)"
            ),
        )


# --------------------------------------------------------------------------------------------
# Lattice (Quantize-Sample-and-Verify)
# --------------------------------------------------------------------------------------------


class _LatticeParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    l: int = Field(1000, ge=1, description="lattice resolution ℓ: counts sum to ℓ")  # noqa: E741


@lru_cache(maxsize=64)
def _num_compositions(resolution: int, vocab_size: int) -> int:
    """C(ℓ+V−1, V−1): count vectors n ≥ 0 over V bins with Σ n = ℓ."""
    return math.comb(resolution + vocab_size - 1, resolution)


def lattice_counts(probs: np.ndarray, resolution: int) -> np.ndarray:
    """Integer counts n ≥ 0, Σ n = ℓ, nearest to ℓ·p: floor, then the remaining units to the
    largest remainders (ties: lowest index)."""
    p = _as_prob_row(probs)
    p = p / math.fsum(p.tolist())
    scaled = resolution * p
    counts = np.floor(scaled).astype(np.int64)
    # Σ floor(ℓ p_i) <= ℓ: the float row sums to 1 within a few ulps, far less than one unit.
    deficit = resolution - int(counts.sum())
    if deficit > 0:
        counts[_top_indices(scaled - counts, deficit)] += 1
    return counts


def _step_limit(k: int) -> int:
    """Up to this many one-slot steps (a small multiply-divide of the big binomial each) are
    cheaper than one math.comb(n, k) at V ~ 1e5; measured: ~k/16 on CPython 3.11."""
    return 16 + k // 16


def lattice_rank(counts: np.ndarray) -> int:
    """Rank of a count vector among all compositions of Σ n into V parts (0 .. C(ℓ+V−1,V−1)−1).

    Stars and bars: star s (0-based, in bin order) sits at slot c_s = s + bin(s) among
    ℓ + V − 1 slots; the combinatorial number system gives rank = Σ_s C(c_s, s+1). Only the ℓ
    stars are visited: each term follows from the previous one by a few small multiply-divides
    (one per slot skipped), or by one math.comb when the skip is long, so no O(V) big-int work
    is done for a peaked row.
    """
    n = np.asarray(counts, dtype=np.int64)
    ell = int(n.sum())
    if ell == 0:
        return 0
    slots = (np.repeat(np.arange(n.shape[0], dtype=np.int64), n) + np.arange(ell, dtype=np.int64)).tolist()
    term = slots[0]  # C(c_0, 1)
    rank = term
    for s in range(1, ell):
        k, top, c = s + 1, slots[s - 1] + 1, slots[s]
        term = term * top // k  # C(c_{s-1} + 1, s + 1) from C(c_{s-1}, s)
        if c - top > _step_limit(k):
            term = math.comb(c, k)
        else:
            while top < c:  # C(top + 1, k) from C(top, k)
                top += 1
                term = 1 if top == k else term * top // (top - k)
        rank += term
    return rank


def _largest_c(rank: int, k: int, hi: int) -> tuple[int, int]:
    """Largest c in [k, hi] with C(c, k) <= rank (rank >= 1), and C(c, k).

    A float search on lgamma finds the candidate; exact integer steps correct it."""
    log_rank = math.log(rank)
    lg_k = math.lgamma(k + 1)
    lo, up = k, hi
    while lo < up:  # largest c with log C(c, k) <= log rank (approximately)
        mid = (lo + up + 1) // 2
        if math.lgamma(mid + 1) - lg_k - math.lgamma(mid - k + 1) <= log_rank:
            lo = mid
        else:
            up = mid - 1
    c = lo
    value = math.comb(c, k)
    while value > rank:  # C(c-1, k) = C(c, k) * (c-k) / c; stops at c = k since C(k,k) = 1
        value = value * (c - k) // c
        c -= 1
    while c < hi:
        nxt = value * (c + 1) // (c + 1 - k)  # C(c+1, k)
        if nxt > rank:
            break
        c, value = c + 1, nxt
    return c, value


def lattice_unrank(rank: int, resolution: int, vocab_size: int) -> np.ndarray:
    """Count vector (int64, length V, sums to ℓ) with the given rank; inverse of lattice_rank.

    Stars are placed from the top: star s takes the highest free slot c with C(c, s+1) <= the
    remaining rank. Stepping down one slot from the previous star is a small multiply-divide;
    after `_step_limit` such steps a float (lgamma) search plus one math.comb finishes the job.
    """
    total = _num_compositions(resolution, vocab_size)
    if not 0 <= rank < total:
        raise ProtocolError(f"lattice: rank out of range 0..C(ℓ+V−1, V−1)−1 (ℓ={resolution}, V={vocab_size})")
    slots = np.empty(resolution, dtype=np.int64)
    remaining = rank
    # Virtual star above the top one: slot ℓ+V−1 with term C(ℓ+V−1, ℓ+1), so that stepping down
    # gives C(ℓ+V−2, ℓ) for the top star.
    prev_c = resolution + vocab_size - 1
    prev_term = total * (vocab_size - 1) // (resolution + 1)  # C(N, ℓ+1) = C(N, ℓ)(N−ℓ)/(ℓ+1)
    for s in range(resolution - 1, -1, -1):
        k = s + 1
        if remaining == 0:  # every lower star is packed at the front: bin 0
            slots[: s + 1] = np.arange(s + 1)
            break
        c = prev_c - 1
        term = prev_term * (k + 1) // prev_c  # C(c, k) = C(c+1, k+1) (k+1) / (c+1)
        steps = _step_limit(k)
        while term > remaining and steps:  # C(c-1, k) = C(c, k) (c-k) / c
            term = term * (c - k) // c
            c -= 1
            steps -= 1
        if term > remaining:
            c, term = _largest_c(remaining, k, c - 1)
        slots[s] = c
        remaining -= term
        prev_c, prev_term = c, term
    bins = slots - np.arange(resolution, dtype=np.int64)
    return np.bincount(bins, minlength=vocab_size).astype(np.int64)


class LatticeCodec(Codec):
    """q̂ = n/ℓ with integer counts n (Σ n = ℓ), sent as the big-endian rank of n among all
    C(ℓ+V−1, V−1) compositions in exactly ⌈log2 C(ℓ+V−1, V−1)⌉ bits (zero bits pad the first
    byte). At V = 151,665 and ℓ = 1000 that is 8,686 bits."""

    def __init__(self, resolution: int = 1000):
        try:
            params = _LatticeParams(l=resolution)
        except ValidationError as exc:
            raise config_error_from_validation(exc, prefix="lattice") from None
        self.resolution = params.l
        self.name = f"lattice-l{self.resolution}"
        self.lossless = False

    def bits(self, vocab_size: int) -> int:
        return (_num_compositions(self.resolution, _check_vocab(vocab_size)) - 1).bit_length()

    def counts(self, probs: np.ndarray) -> np.ndarray:
        """The lattice point n (Σ n = ℓ) that `encode` sends for this row."""
        return lattice_counts(probs, self.resolution)

    def encode(self, probs: np.ndarray) -> bytes:
        counts = self.counts(probs)
        return lattice_rank(counts).to_bytes(self.num_bytes(counts.shape[0]), "big")

    def decode(self, payload: bytes, vocab_size: int) -> np.ndarray:
        payload, vocab = self._check_payload(payload, vocab_size)
        counts = lattice_unrank(int.from_bytes(payload, "big"), self.resolution, vocab)
        return counts / float(self.resolution)

    def _dl_exactness(self, sampling: SamplingParams, vocab_size: int) -> Exactness:
        return Exactness(
            False,
            (
                f"DL: {self.name} rounds p to multiples of 1/{self.resolution}, so the device's "
                "residual uses p̂ ≠ p and the output law only approximates the target "
                "(exact only for greedy sampling)"
            ),
        )


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------

_SPEC_FORMS = [
    "dense-fp32",
    "dense-fp16",
    "dense-bf16",
    "sparse:v_eff=N,q=16|32",
    "lattice:l=N",
]


def _unknown(spec: object) -> ConfigError:
    return ConfigError(f"codec: unknown {spec!r}; expected one of {', '.join(_SPEC_FORMS)}")


def _parse_kv(family: str, text: str) -> dict:
    out: dict = {}
    for item in text.split(","):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            raise ConfigError(f"{family}: expected key=value items separated by commas (got {item.strip()!r})")
        if key in out:
            raise ConfigError(f"{family}.{key}: given twice")
        out[key] = int(value) if re.fullmatch(r"[+-]?\d+", value) else value
    return out


def _build(family: str, kwargs: dict) -> Codec:
    try:
        if family == "sparse":
            sparse = _SparseParams(**kwargs)
            return SparseCodec(sparse.v_eff, sparse.q)
        return LatticeCodec(_LatticeParams(**kwargs).l)
    except ValidationError as exc:
        raise config_error_from_validation(exc, prefix=family) from None


def make_codec(spec: str) -> Codec:
    """Codec from a spec string: "dense-fp32", "dense-fp16", "dense-bf16",
    "sparse:v_eff=1024,q=16", "lattice:l=1000", or a codec's `name`."""
    if not isinstance(spec, str):
        raise _unknown(spec)
    text = spec.strip().lower()
    m = re.fullmatch(r"dense-(\w+)", text)
    if m:
        if m.group(1) not in _DENSE_FORMATS:
            raise _unknown(spec)
        return DenseCodec(m.group(1))
    m = re.fullmatch(r"sparse-v([+-]?\d+)-q([+-]?\d+)", text)
    if m:
        return _build("sparse", {"v_eff": int(m.group(1)), "q": int(m.group(2))})
    m = re.fullmatch(r"lattice-l([+-]?\d+)", text)
    if m:
        return _build("lattice", {"l": int(m.group(1))})
    m = re.fullmatch(r"(sparse|lattice)(?::(.*))?", text)
    if m:
        family, rest = m.group(1), m.group(2)
        return _build(family, _parse_kv(family, rest) if rest and rest.strip() else {})
    raise _unknown(spec)
