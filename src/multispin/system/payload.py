"""Bit counts of what moves over the air (docs/system-model.md §4), as the optimiser sees them.

A distribution's size is its codec's: `distribution_bits` is `speculative.codecs`' ``bits(V)``
of the codec a spec names, so the optimiser plans with exactly the bits the engine puts on the
wire, and the scenario file names its codec in the same words as ``--ul-codec``.

Two uses: the scenario's payload *model* (`distribution_bits`, one codec for both links,
for optimisation studies), and the running system's `WirePayload` (the bits of what a
round actually moves, from the UL and DL codecs and the pair's vocabulary).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from multispin.errors import ConfigError
from multispin.speculative.codecs import PAPER_PAYLOAD_BITS, PAPER_VOCAB, make_codec  # noqa: F401 (re-exported)
from multispin.vocabulary import COUPLED, STANDARD


def token_id_bits(vocab_size: int) -> int:
    """Bits of one token id: ⌈log2 V⌉."""
    if vocab_size < 2:
        raise ConfigError(f"vocab_size: must be in [2, inf) (got {vocab_size})")
    return int(math.ceil(math.log2(vocab_size)))


def distribution_bits(spec: str, vocab_size: int = PAPER_VOCAB) -> int:
    """Size S in bits of one distribution (q_j in UL mode, p_j in DL mode) encoded by the codec
    ``spec`` names (`multispin.speculative.codecs.make_codec`: ``sparse:v_eff=1024,q=16``, the
    paper's 34,816 bits at V = 151,665; ``dense-fp32``; ``lattice:l=1000``; …)."""
    return int(make_codec(spec).bits(vocab_size))


def draft_upload_bits_per_token(vocab_size: int, prob_bits: int = 16) -> int:
    """Uplink bits per drafted token: its id and the scalar q_i(x_i) (⌈log2 V⌉ + 16)."""
    return token_id_bits(vocab_size) + prob_bits


# --------------------------------------------------------------------------- the running system

# q̂_i(x_i) travels as a float64 (runtime/wire/messages.py DRAFT): the server must test exactly the
# value the device drew with, and a decoded q̂ row is float64 in general.
Q_SCALAR_BITS = 64


def position_bits(gamma_max: int) -> int:
    """Bits of a rejection position in 0..γ_max: ⌈log2(γ_max + 1)⌉."""
    if gamma_max < 0:
        raise ConfigError(f"gamma_max: must be in [0, inf) (got {gamma_max})")
    return int(math.ceil(math.log2(gamma_max + 1)))


@dataclass(frozen=True)
class RoundBits:
    """What one device moved in one round, in bits.

    ``correction`` is the correction phase of a rejected device: the one distribution plus the
    correction id that answers it (q_j up and the id down in UL mode, p_j down and the id up in
    DL mode); 0 for a device that was not rejected. It is what the clock charges at the rate of
    the mode's link (the id rides on that link's rate: a simplification worth ⌈log2 V⌉ bits).
    """

    uplink: int
    downlink: int
    distribution: int
    correction: int


@dataclass(frozen=True)
class WirePayload:
    """Bit counts of everything a round moves, from the codecs and the vocabulary in use.

    The one source of the running system's bits (docs/system-model.md §4): the in-process loop and the
    networked server log them per device and round, and the planner plans and charges with them.
    A scenario's ``payload`` section is a payload *model* for optimisation studies; a running
    system takes this instead (`from_codecs`).
    """

    vocab_size: int
    ul_distribution_bits: int  # S^ul: q_j by the UL codec
    dl_distribution_bits: int  # S^dl: p_j by the DL codec
    gamma_max: int
    ul_codec: str = "?"
    dl_codec: str = "?"
    q_scalar_bits: int = Q_SCALAR_BITS
    # round_bits is asked once per device and round with a handful of (γ, mode) pairs: each is
    # computed once per payload (RoundBits is frozen, so one shared instance is safe). Kept on the
    # instance so that the memo dies with it, unlike a class-level lru_cache holding every payload.
    _round_bits_memo: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    @classmethod
    def from_codecs(cls, ul_codec, dl_codec, vocab_size: int, gamma_max: int) -> WirePayload:
        """From two codecs (anything with ``name`` and ``bits(vocab_size)``) and the pair's V."""
        return cls(
            vocab_size,
            int(ul_codec.bits(vocab_size)),
            int(dl_codec.bits(vocab_size)),
            gamma_max,
            ul_codec.name,
            dl_codec.name,
        )

    @property
    def id_bits(self) -> int:
        return token_id_bits(self.vocab_size)

    @property
    def position_bits(self) -> int:
        return position_bits(self.gamma_max)

    @property
    def draft_bits_per_token(self) -> int:
        """UL bits per drafted token: its id and its q̂ scalar."""
        return self.id_bits + self.q_scalar_bits

    def correction_bits(self, mode: str) -> int:
        """Correction-phase bits of a device rejected in ``mode`` (distribution + correction id)."""
        if mode == "ul":
            return self.ul_distribution_bits + self.id_bits
        if mode == "dl":
            return self.dl_distribution_bits + self.id_bits
        raise ConfigError(f"mode: must be 'ul' or 'dl' (got {mode!r})")

    def round_bits(self, draft_len: int, mode: str | None, rule: str = STANDARD) -> RoundBits:
        """Bits of one device's round: ``mode`` is None when it was not rejected (bonus token) and
        under the coupled rule, whose round moves token ids only (`coupled_round_bits`)."""
        key = (draft_len, mode, rule)
        bits = self._round_bits_memo.get(key)
        if bits is None:
            bits = self._round_bits_memo[key] = self._count_round_bits(draft_len, mode, rule)
        return bits

    def coupled_round_bits(self, draft_len: int) -> RoundBits:
        """A coupled device's round: γ token ids up (no q̂ scalars: the server never reads q), the
        accepted count and the committed x* down; no distribution, nothing to correct."""
        return RoundBits(draft_len * self.id_bits, self.position_bits + self.id_bits, 0, 0)

    def _count_round_bits(self, draft_len: int, mode: str | None, rule: str = STANDARD) -> RoundBits:
        if rule == COUPLED:
            if mode is not None:
                raise ConfigError(f"mode: a coupled device is never corrected (got {mode!r})")
            return self.coupled_round_bits(draft_len)
        up = draft_len * self.draft_bits_per_token
        if mode is None:
            return RoundBits(up, self.id_bits, 0, 0)  # the bonus id goes down
        corr = self.correction_bits(mode)
        if mode == "ul":  # q_j up; rejection position and correction id down
            return RoundBits(
                up + self.ul_distribution_bits, self.position_bits + self.id_bits, self.ul_distribution_bits, corr
            )
        # DL: rejection position and p_j down; correction id up
        return RoundBits(
            up + self.id_bits, self.position_bits + self.dl_distribution_bits, self.dl_distribution_bits, corr
        )

    def to_dict(self) -> dict:
        return {
            "vocab_size": self.vocab_size,
            "ul_codec": self.ul_codec,
            "dl_codec": self.dl_codec,
            "ul_distribution_bits": self.ul_distribution_bits,
            "dl_distribution_bits": self.dl_distribution_bits,
            "ul_correction_bits": self.correction_bits("ul"),
            "dl_correction_bits": self.correction_bits("dl"),
            "draft_bits_per_token": self.draft_bits_per_token,
            "id_bits": self.id_bits,
            "position_bits": self.position_bits,
        }
