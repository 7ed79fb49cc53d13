"""Devices of one run bring drafts of different vocabularies (the tiny-cross pair: 'merged' over
its own synthetic tokenizer, 'close' over the target's), all verified in one batched pass: the
networked testbed's tokens equal the in-process loop's, every text equals the server's record,
and greedy output equals target-only greedy decoding.
"""

from __future__ import annotations

import pytest

from multispin.models.hf import HFBatchedLM, draft_lm
from multispin.models.registry import resolve_pair
from multispin.runtime import protocol as P
from multispin.runtime import roles
from multispin.runtime.launcher import run_local_testbed
from multispin.runtime.local import FixedDraftLengths, RandomMode, run_rounds
from multispin.runtime.round import PolicyPair
from multispin.runtime.session import GenerateConfig, encode_prompt, generate
from multispin.speculative.codecs import make_codec
from multispin.speculative.warp import SamplingParams

PROMPTS = ["the cat and the dog", "in the rain", "answer: the", "an edge server"]
DRAFTS = ["merged", "close"]


@pytest.fixture(scope="module")
def pair():
    return resolve_pair("tiny-cross")


def test_the_pair_mixes_families(pair):
    assert list(pair.cross_drafts) == ["merged"] and set(pair.drafts) == set(DRAFTS)
    assert type(draft_lm(pair, "merged")).__name__ == "CrossVocabLM"
    assert draft_lm(pair, "merged").vocab_size == draft_lm(pair, "close").vocab_size == pair.vocab_size


def test_networked_mixed_family_devices_match_in_process_and_the_server_record(pair, tmp_path):
    gammas, seed, n = {0: 3, 1: 4, 2: 2, 3: 3}, 5, 4
    codec = make_codec("dense-fp32")
    server = roles.VerifierServer(HFBatchedLM(pair.target, pair.vocab_size), SamplingParams(),
                                  codec, codec, seed)
    devices = {k: roles.DraftDevice(k, draft_lm(pair, DRAFTS[k % 2]), SamplingParams(), codec, codec,
                                    seed, encode_prompt(pair, PROMPTS[k])) for k in range(n)}
    run_rounds(server, devices, PolicyPair(FixedDraftLengths(gammas), RandomMode(seed)), 20,
               pair.eos_token_ids)
    summary = run_local_testbed(
        pair, n, max_new_tokens=20, draft_lengths=FixedDraftLengths(gammas), modes=RandomMode(seed),
        secret="test-secret-0123456789", seed=seed, prompts=PROMPTS, drafts=DRAFTS,
        device_runner="fork", round_timeout_s=60, timeout_s=300)
    assert summary.server.stop_reason == "done" and summary.consistent
    assert summary.tokens() == {k: d.generated for k, d in devices.items()}
    for d, rec in summary.server.devices.items():
        assert summary.devices[d]["tokens"] == rec.tokens
        assert summary.devices[d]["digest"] == rec.digest == P.token_digest(rec.tokens).hex()
    merged = [r for k in (0, 2) for r in summary.server.devices[k].rounds]
    assert sum(r.num_accepted for r in merged) > 0  # the cross-vocabulary draft was accepted


@pytest.mark.parametrize("mode", ["ul", "dl"])
def test_greedy_equals_target_only(pair, mode):
    base = dict(pair="tiny-cross", devices=2, drafts=DRAFTS, mode=mode, temperature=0.0,
                max_new_tokens=24, prompts=PROMPTS[:2])
    spec = generate(GenerateConfig(**base, draft_len=4), pair=pair)
    plain = generate(GenerateConfig(**base, draft_len=0), pair=pair)
    assert [d.tokens for d in spec.devices] == [d.tokens for d in plain.devices]
    assert [d.draft_name for d in spec.devices] == DRAFTS
