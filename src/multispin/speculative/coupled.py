"""Coupled verification: device and server share Gumbel noise per absolute token position, the
device drafts y_i = argmax(log q_i + G_i), the server commits x*_i = argmax(log p_i + G_i)
(docs/system-model.md, "Coupled verification").

The noise stream. For a session key (bytes, `session_key`) and an absolute token position i
(the index the token will have in the device's record, prompt included), G_i is a vector of V
standard Gumbel values defined as follows:

- the 128-bit Philox key is the first 16 bytes of blake2b(session key), read as two
  little-endian uint64 words (k0, k1);
- word w (0-based) of position i is word w mod 4 of the block Philox4x64-10((k0, k1),
  counter (w div 4 + 1, i, 0, 0)) (Salmon et al., "Parallel random numbers: as easy as 1, 2,
  3", SC 2011): exactly what numpy's `Philox(key=(k0, k1), counter=(0, i, 0, 0)).random_raw(V)`
  returns (numpy increments the first counter word before each block); the test suite checks
  those words against a pure-Python Philox4x64-10;
- each raw word x becomes the uniform u = ((x >> 12) + 0.5) · 2^-52, which is exact in float64
  and lies strictly inside (0, 1) (with x >> 11 the + 0.5 needs 54 bits, and a word near 2^64
  would round to u = 1, an infinite Gumbel value), then G = −log(−log u).

So the stream is fixed by Philox's specification and this conversion, not by numpy's
`Generator` methods (whose algorithms numpy may change between versions), and every position is
a fresh counter block range: G_i depends on (key, i) only, never on the round, the batch, γ or
how many positions were drawn before it. Two processes or hosts that hold the same key derive the
same raw words; the two float64 logarithms are IEEE operations that libm implementations round
to within an ulp, so on another platform a device's G_i may differ in the last bit, which can
change a draft only at an exact tie of log q + G. That is harmless: exactness depends on the
server's noise alone (the server commits x* itself; a device's noise only sets how often its
draft matches), and one server replays its own run bit for bit.

Greedy decoding (T = 0) is the degenerate case: the warped rows are one-hot, log p is −∞ off the
arg-max, so x* is the target's arg-max whatever G, and a greedy draft matches where the two
arg-maxes agree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from multispin.errors import ProtocolError
from multispin.speculative.target_rows import WarpedRows
from multispin.speculative.verify import DEFAULT_GAMMA_MAX, RaggedDrafts

_KEY_DOMAIN = b"multispin/coupled-noise/v1"
_SHIFT = np.uint64(12)
_SCALE = 2.0**-52


def session_key(seed: int, device_id: int) -> bytes:
    """The noise key of one device's session, from what both ends already hold: the run seed
    (the server sends it in WELCOME, over the authenticated channel) and the device id (the
    job id in a steady-state run). A device never needs to be told anything else."""
    if seed < 0 or device_id < 0:
        raise ProtocolError(f"session key: seed and device id must be >= 0 (got {seed}, {device_id})")
    return _KEY_DOMAIN + seed.to_bytes(8, "little") + device_id.to_bytes(8, "little")


def philox_key(key: bytes) -> np.ndarray:
    """The 128-bit Philox key of a session key: blake2b's first 16 bytes, two little-endian words."""
    digest = hashlib.blake2b(key, digest_size=16).digest()
    return np.frombuffer(digest, dtype="<u8").astype(np.uint64)


class NoiseStream:
    """G_i for every absolute position i of one session (see the module docstring)."""

    def __init__(self, key: bytes):
        self.key = bytes(key)
        self._philox_key = philox_key(self.key)

    def raw(self, position: int, vocab_size: int) -> np.ndarray:
        """The V raw 64-bit words of position `position`."""
        if position < 0:
            raise ProtocolError(f"noise position: must be >= 0 (got {position})")
        counter = np.array([0, position, 0, 0], dtype=np.uint64)
        return np.random.Philox(key=self._philox_key, counter=counter).random_raw(vocab_size)

    def uniforms(self, position: int, vocab_size: int) -> np.ndarray:
        """u = ((x >> 12) + 0.5) · 2^-52 for each raw word x: float64 strictly inside (0, 1)."""
        return ((self.raw(position, vocab_size) >> _SHIFT).astype(np.float64) + 0.5) * _SCALE

    def gumbel(self, position: int, vocab_size: int) -> np.ndarray:
        """G_position: V standard Gumbel values, float64, all finite."""
        return _to_gumbel(self.raw(position, vocab_size))

    def gumbel_at(self, position: int, ids: np.ndarray) -> np.ndarray:
        """G_position at the ascending token ids `ids` only: the same values as
        ``gumbel(position, V)[ids]`` (the raw words are drawn up to the last id; the two
        logarithms, most of the cost, run on the ids alone)."""
        if ids.size == 0:
            return np.zeros(0, dtype=np.float64)
        return _to_gumbel(self.raw(position, int(ids[-1]) + 1)[ids])


def _to_gumbel(raw: np.ndarray) -> np.ndarray:
    """Raw words → uniforms ((x >> 12) + 0.5) · 2^-52 → standard Gumbel −log(−log u)."""
    return -np.log(-np.log(((raw >> _SHIFT).astype(np.float64) + 0.5) * _SCALE))


def coupled_argmax(probs: np.ndarray, noise: NoiseStream, position: int) -> int:
    """argmax_x (log probs(x) + G_position(x)) for one row: equal to `gumbel_argmax` of the row
    and the full G_position (a token of zero mass scores −∞ and never wins; ties go to the lowest
    id either way), computed on the row's support only: under top-k the logarithms run on k ids."""
    p = np.asarray(probs, dtype=np.float64)
    support = np.flatnonzero(p > 0)
    if support.size == 0:
        raise ProtocolError("coupled rule: a warped row with no mass")
    scores = np.log(p[support]) + noise.gumbel_at(position, support)
    return int(support[int(np.argmax(scores))])


def gumbel_argmax(probs: np.ndarray, gumbel: np.ndarray) -> np.ndarray | int:
    """argmax_x (log probs(x) + gumbel(x)) per row (shape (V,) or (N, V)); log 0 = −∞, so a token
    of zero probability is never chosen. Ties go to the lowest index (numpy's argmax)."""
    p = np.asarray(probs, dtype=np.float64)
    with np.errstate(divide="ignore"):
        scores = np.log(p) + gumbel
    idx = np.argmax(scores, axis=-1)
    return int(idx) if p.ndim == 1 else idx


def coupled_draft_token(q: np.ndarray, noise: NoiseStream, position: int) -> int:
    """The device's draft at absolute position `position`: argmax(log q + G_position), a valid
    sample of q (Gumbel-max), coupled with the server's x* through the shared G."""
    return coupled_argmax(q, noise, position)


@dataclass(frozen=True)
class CoupledResult:
    """Per-device verdicts of one round under the coupled rule."""

    num_accepted: np.ndarray  # (K,) draft tokens equal to x* before the first mismatch
    committed_token: np.ndarray  # (K,) x* at the first mismatch, or the bonus x*_{γ+1}
    matched: np.ndarray  # (Σγ,) bool: y_i == x*_i (False past a device's first mismatch)
    draft_lens: np.ndarray  # (K,) γ_k

    @property
    def mismatched(self) -> np.ndarray:
        """Devices whose draft stopped before its end (they still commit x*: no correction)."""
        return self.num_accepted < self.draft_lens


def tokens_only(tokens: Sequence[Sequence[int]]) -> RaggedDrafts:
    """The ragged layout of coupled drafts: token ids only (q scalars have no meaning here; the
    layout's slot holds ones, which nothing reads)."""
    lens = np.array([len(t) for t in tokens], dtype=np.int64)
    flat = np.array([x for t in tokens for x in t], dtype=np.int64)
    return RaggedDrafts(lens, flat, np.ones(flat.shape[0], dtype=np.float64))


def verify_coupled(
    drafts: RaggedDrafts,
    target_probs: WarpedRows,
    noises: Sequence[NoiseStream],
    start_positions: Sequence[int] | np.ndarray,
    gamma_max: int = DEFAULT_GAMMA_MAX,
) -> CoupledResult:
    """The coupled rule for every device at once, in the flattened layout of `verify`.

    Device k's draft token j sits at absolute position start_positions[k] + j and is scored by its
    target row `target_row_start[k] + j`; position by position over the devices still matching,
    x* = argmax(log p + G) with G from the device's own noise stream; a device stops at its first
    mismatch (committing x* there) or after its γ_k tokens (committing the bonus x*_{γ+1}; γ_k = 0
    commits x*_1 alone). One Gumbel vector per row read, none past a device's stop."""
    k_dev = drafts.num_devices
    drafts.validate(target_probs.vocab_size, gamma_max)
    n = int(drafts.draft_lens.sum())
    if target_probs.num_rows != n + k_dev:
        raise ProtocolError(f"target_probs: need Σγ + K = {n + k_dev} rows (got {target_probs.num_rows})")
    if len(noises) != k_dev or len(start_positions) != k_dev:
        raise ValueError(f"noise: need one stream and one start position per device ({k_dev})")
    num_accepted = np.zeros(k_dev, dtype=np.int64)
    committed = np.full(k_dev, -1, dtype=np.int64)
    matched = np.zeros(n, dtype=bool)
    going = np.ones(k_dev, dtype=bool)
    for j in range(int(drafts.draft_lens.max(initial=0)) + 1):
        devs = np.flatnonzero(going)
        if devs.size == 0:
            break
        rows = target_probs.warped(drafts.target_row_start[devs] + j).cpu().numpy()
        ks = devs.tolist()
        x_star = [coupled_argmax(row, noises[k], int(start_positions[k]) + j) for row, k in zip(rows, ks)]
        for k, x in zip(ks, x_star):
            flat = int(drafts.cu[k]) + j
            if j < drafts.draft_lens[k] and int(drafts.token_ids[flat]) == x:
                matched[flat] = True
                num_accepted[k] += 1
                continue
            committed[k] = x  # first mismatch, or the bonus after γ_k matches
            going[k] = False
    return CoupledResult(num_accepted, committed, matched, drafts.draft_lens)
