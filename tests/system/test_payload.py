"""The running system's bit counts (WirePayload): one count per message, from the codecs in use."""

from __future__ import annotations

import pytest

from multispin.errors import ConfigError
from multispin.speculative.codecs import make_codec
from multispin.system.payload import Q_SCALAR_BITS, RoundBits, WirePayload, position_bits


def _wire(ul="dense-fp16", dl="sparse:v_eff=1024,q=32", vocab=49_152, gamma_max=20):
    return WirePayload.from_codecs(make_codec(ul), make_codec(dl), vocab, gamma_max)


def test_bits_come_from_the_codecs_and_the_vocabulary():
    w = _wire()
    assert w.ul_distribution_bits == make_codec("dense-fp16").bits(49_152) == 49_152 * 16
    assert w.dl_distribution_bits == make_codec("sparse:v_eff=1024,q=32").bits(49_152) == 1024 * (16 + 32)
    assert (w.ul_codec, w.dl_codec) == ("dense-fp16", "sparse-v1024-q32")
    assert w.id_bits == 16 and w.position_bits == position_bits(20) == 5
    assert w.draft_bits_per_token == 16 + Q_SCALAR_BITS == 80
    assert w.correction_bits("ul") == 49_152 * 16 + 16
    assert w.correction_bits("dl") == 1024 * 48 + 16


def test_round_bits_of_each_outcome():
    w = _wire(vocab=256)  # ids: 8 bits
    drafts = 3 * (8 + 64)
    assert w.round_bits(3, None) == RoundBits(drafts, 8, 0, 0)  # accepted: bonus id down
    s_ul, s_dl = w.ul_distribution_bits, w.dl_distribution_bits
    # UL: q_j up; rejection position and correction id down
    assert w.round_bits(3, "ul") == RoundBits(drafts + s_ul, 5 + 8, s_ul, s_ul + 8)
    # DL: correction id up; rejection position and p_j down
    assert w.round_bits(3, "dl") == RoundBits(drafts + 8, 5 + s_dl, s_dl, s_dl + 8)
    assert w.round_bits(0, None) == RoundBits(0, 8, 0, 0)


def test_bad_mode_and_gamma_max():
    with pytest.raises(ConfigError, match="mode"):
        _wire().correction_bits("sideways")
    with pytest.raises(ConfigError, match="gamma_max"):
        position_bits(-1)
