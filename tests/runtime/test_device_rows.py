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
from multispin.models.base import device_rows
from multispin.models.hf import HFBatchedLM
from multispin.models.synthetic import MarkovBatchedLM, MarkovSequenceLM, make_tables
from multispin.models.tiny import load_tiny_pair
from multispin.runtime.round.local import FixedDraftLengths, RandomMode, run_rounds
from multispin.runtime.round.engine import PolicyPair
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


class TensorOnlyLM(MarkovBatchedLM):
    """A target whose rows exist only as tensors: asking it for numpy rows is an error."""

    calls = 0

    def extend_many(self, new_tokens):
        raise AssertionError("the server asked for numpy rows")

    def extend_many_on_device(self, new_tokens):
        TensorOnlyLM.calls += 1
        return {s: torch.from_numpy(r) for s, r in super().extend_many(new_tokens).items()}


def run(target, seed: int = 5) -> tuple[dict, roles.VerifierServer]:
    sampling, codec = SamplingParams(temperature=0.9), make_codec("dense-fp32")
    server = roles.VerifierServer(target, sampling, codec, codec, seed)
    devices = {k: roles.DraftDevice(k, MarkovSequenceLM(DRAFT), sampling, codec, codec, seed, [k])
               for k in range(6)}
    run_rounds(server, devices, PolicyPair(FixedDraftLengths({k: 4 for k in devices}), RandomMode(seed)),
               max_new_tokens=24, eos_ids=())
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

