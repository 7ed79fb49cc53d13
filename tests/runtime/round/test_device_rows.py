"""The target's logits stay where the model computed them until the verdict.

`HFBatchedLM.extend_many_on_device` gives tensors on the model's device, equal to the numpy rows
of `extend_many`; the server's verify reads its rows through `models.base.device_rows`, keeps
p_j as a tensor for the correction, and gives the tokens of a model that only has numpy rows.
The control: the wrapped model really served the rounds on the tensor path (never numpy).
"""

from __future__ import annotations

import numpy as np
import torch

import multispin.runtime.round.roles as roles
from doubles import FixedDraftLengths
from multispin.models.base import device_rows
from multispin.models.hf import HFBatchedLM
from multispin.models.synthetic import MarkovBatchedLM, MarkovSequenceLM, make_tables
from multispin.models.tiny import load_tiny_pair
from multispin.runtime.round.engine import PolicyPair
from multispin.runtime.round.local import RandomMode, run_rounds
from multispin.speculative.codecs import make_codec
from multispin.speculative.warp import SamplingParams

TARGET, DRAFT = make_tables(64, seed=3, scale=1.5, draft_noise=1.2)


def test_hf_rows_on_device_equal_the_numpy_rows():
    pair = load_tiny_pair()
    tokens = {0: [5, 6, 7, 8], 1: [9, 10]}
    on_device, numpy_lm = HFBatchedLM(pair.target, pair.vocab_size), HFBatchedLM(pair.target, pair.vocab_size)
    for lm in (on_device, numpy_lm):
        lm.open(0), lm.open(1)
    got = device_rows(on_device, tokens)
    ref = numpy_lm.extend_many(tokens)
    device = next(pair.target.parameters()).device
    for s in tokens:
        assert torch.is_tensor(got[s]) and got[s].device == device and got[s].dtype == torch.float32
        assert np.array_equal(got[s].numpy(), ref[s])


def _score_tails(tokens: dict, last: dict):
    """The tiny target's rows for `tokens` asked with `last` and without, the caches after them,
    and the number of positions the output head ran on in each pass."""
    pair = load_tiny_pair()
    kept, full = HFBatchedLM(pair.target, pair.vocab_size), HFBatchedLM(pair.target, pair.vocab_size)
    for lm in (kept, full):
        for s in tokens:
            lm.open(s)
    head_rows = []
    hook = pair.target.lm_head.register_forward_hook(lambda _m, _i, out: head_rows.append(out.shape[1]))
    try:
        got, ref = kept.extend_many_on_device(tokens, last), full.extend_many_on_device(tokens)
    finally:
        hook.remove()
    return got, ref, (kept, full), head_rows


def test_hf_last_rows_are_the_tail_of_all_rows_and_the_head_computes_only_those():
    """A prefill asks for its last row only: the head runs on the last positions (logits_to_keep),
    the rows equal the tail of all rows, and the caches are the same."""
    tokens = {0: list(range(5, 25)), 1: [9, 10, 11, 12, 13, 14]}  # right-padded to 20 positions
    last = {0: 1, 1: 2}  # rows at position 19 and at 4..5
    got, ref, (kept, full), head_rows = _score_tails(tokens, last)
    assert head_rows == [16, 20]  # the first row wanted is at position 4
    for s in tokens:
        assert got[s].shape[0] == last[s] and ref[s].shape[0] == len(tokens[s])
        assert torch.allclose(got[s], ref[s][-last[s] :], atol=1e-5)
    step = {s: [7] for s in tokens}
    nxt, nxt_ref = kept.extend_many(step), full.extend_many(step)
    assert all(np.allclose(nxt[s], nxt_ref[s], atol=1e-5) for s in tokens)


def test_hf_last_rows_cover_the_batch_from_its_first_wanted_row():
    """Control: a sequence that wants its row at position 0 makes the head cover every position."""
    _, _, _, head_rows = _score_tails({0: list(range(5, 25)), 1: [3, 4, 5, 6, 7]}, {0: 1, 1: 5})
    assert head_rows == [20, 20]


class TensorOnlyLM(MarkovBatchedLM):
    """A target whose rows exist only as tensors: asking it for numpy rows is an error."""

    calls = 0

    def extend_many(self, new_tokens):
        raise AssertionError("the server asked for numpy rows")

    def extend_many_on_device(self, new_tokens, last=None):
        TensorOnlyLM.calls += 1
        rows = super().extend_many(new_tokens)
        return {s: torch.from_numpy(r[len(r) - (last or {}).get(s, len(r)) :]) for s, r in rows.items()}


def run(target, seed: int = 5) -> tuple[dict, roles.VerifierServer]:
    sampling, codec = SamplingParams(temperature=0.9), make_codec("dense-fp32")
    server = roles.VerifierServer(target, sampling, codec, codec, seed)
    devices = {k: roles.DraftDevice(k, MarkovSequenceLM(DRAFT), sampling, codec, codec, seed, [k]) for k in range(6)}
    run_rounds(
        server,
        devices,
        PolicyPair(FixedDraftLengths({k: 4 for k in devices}), RandomMode(seed)),
        max_new_tokens=24,
        eos_ids=(),
    )
    return {k: d.generated for k, d in devices.items()}, server


def test_server_reads_rows_on_device_and_gives_the_same_tokens():
    TensorOnlyLM.calls = 0
    on_device, _ = run(TensorOnlyLM(TARGET))
    assert TensorOnlyLM.calls > 0  # control: the rounds went through the tensor path
    assert on_device == run(MarkovBatchedLM(TARGET))[0]


def test_server_keeps_p_j_as_a_tensor():
    sampling, codec = SamplingParams(), make_codec("dense-fp32")
    server = roles.VerifierServer(TensorOnlyLM(TARGET), sampling, codec, codec, seed=1)
    for d in range(8):
        server.open(d, [d])
    # drafts of a token the target finds unlikely, claimed certain by the draft: rejected
    drafts = {d: roles.Draft([int(np.argmin(TARGET.next_logits([d])))], [1.0]) for d in range(8)}
    verdicts = server.verify(drafts)
    rejected = [d for d, v in verdicts.items() if v.rejected]
    assert rejected and all(torch.is_tensor(server._pending_p[d]) for d in rejected)
    payload = server.send_p(rejected[0])  # DL: the row leaves the device as the payload
    assert codec.decode(payload, TARGET.vocab_size).shape == (TARGET.vocab_size,)
