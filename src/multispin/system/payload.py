"""Bit counts of what moves over the air (SYSTEM_MODEL.md §4), as the optimiser sees them.

These are the exact sizes of the encodings; the codecs themselves (encode/decode, exactness per
mode) live in ``multispin.spec``. Keeping the counts here lets the optimiser stay pure numpy.
"""

from __future__ import annotations

import math

from multispin.errors import ConfigError

CODECS = ("sparse-topk", "dense-fp32", "dense-fp16", "lattice")


def token_id_bits(vocab_size: int) -> int:
    """Bits of one token id: ⌈log2 V⌉."""
    if vocab_size < 2:
        raise ConfigError(f"vocab_size: must be in [2, inf) (got {vocab_size})")
    return int(math.ceil(math.log2(vocab_size)))


def distribution_bits(
    codec: str,
    vocab_size: int = 151_665,
    v_eff: int = 1024,
    value_bits: int = 16,
    lattice_resolution: int = 1024,
) -> int:
    """Size S in bits of one encoded distribution (q_j in UL mode, p_j in DL mode).

    - ``sparse-topk``: V_eff (index, value) pairs, ⌈log2 V⌉ + Q bits each (the paper: 34,816 bits);
    - ``dense-fp32`` / ``dense-fp16``: V values at 32 / 16 bits;
    - ``lattice``: integer counts summing to ℓ over V cells, ⌈log2 C(ℓ+V−1, V−1)⌉ bits.
    """
    if codec == "sparse-topk":
        if not 1 <= v_eff <= vocab_size:
            raise ConfigError(f"payload.v_eff: must be in [1, vocab_size={vocab_size}] (got {v_eff})")
        return int(v_eff * (token_id_bits(vocab_size) + value_bits))
    if codec == "dense-fp32":
        return int(vocab_size * 32)
    if codec == "dense-fp16":
        return int(vocab_size * 16)
    if codec == "lattice":
        if lattice_resolution < 1:
            raise ConfigError(f"payload.lattice_resolution: must be in [1, inf) (got {lattice_resolution})")
        # Exact integer arithmetic: the bits to index C(ℓ+V−1, V−1) count vectors (no float rounding).
        return (math.comb(lattice_resolution + vocab_size - 1, lattice_resolution) - 1).bit_length()
    raise ConfigError(f"payload.codec: unknown codec {codec!r} (allowed: {', '.join(CODECS)})")


def draft_upload_bits_per_token(vocab_size: int, prob_bits: int = 16) -> int:
    """Uplink bits per drafted token: its id and the scalar q_i(x_i) (⌈log2 V⌉ + 16)."""
    return token_id_bits(vocab_size) + prob_bits
