"""Devices of one run bring drafts of different vocabularies (the tiny-cross pair: 'merged' over
its own synthetic tokenizer, 'close' over the target's), all verified in one batched pass: the
networked testbed's tokens equal the in-process loop's, every text equals the server's record,
and greedy output equals target-only greedy decoding.
"""

from __future__ import annotations

import pytest

from doubles import FixedDraftLengths
from multispin.models.hf import HFBatchedLM, draft_lm
from multispin.models.prompts import encode_prompt
from multispin.models.registry import resolve_pair
from multispin.runtime.net.launcher import DeviceSetup, run_local_testbed
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.round import roles
from multispin.runtime.round.engine import PolicyPair
from multispin.runtime.round.local import RandomMode, run_rounds
from multispin.runtime.round.session import GenerateConfig, generate
from multispin.runtime.wire import messages as P
from multispin.speculative.codecs import make_codec
from multispin.speculative.warp import SamplingParams

# real sockets, processes or models: `make test-fast` leaves these out
pytestmark = pytest.mark.integration

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
    server = roles.VerifierServer(HFBatchedLM(pair.target, pair.vocab_size), SamplingParams(), codec, codec, seed)
    devices = {
        k: roles.DraftDevice(
            k, draft_lm(pair, DRAFTS[k % 2]), SamplingParams(), codec, codec, seed, encode_prompt(pair, PROMPTS[k])
        )
        for k in range(n)
    }
    run_rounds(server, devices, PolicyPair(FixedDraftLengths(gammas), RandomMode(seed)), 20, pair.eos_token_ids)
    summary = run_local_testbed(
        pair,
        ServerConfig.make(max_new_tokens=20, seed=seed, round_timeout_s=60),
        DeviceSetup(n, drafts=DRAFTS, prompts=PROMPTS, runner="fork"),
        policy=PolicyPair(FixedDraftLengths(gammas), RandomMode(seed)),
        secret="test-secret-0123456789",
        timeout_s=300,
    )
    assert summary.server.stop_reason == "done" and summary.consistent
    assert summary.tokens() == {k: d.generated for k, d in devices.items()}
    for d, rec in summary.server.devices.items():
        assert summary.devices[d]["tokens"] == rec.tokens
        assert summary.devices[d]["digest"] == rec.digest == P.token_digest(rec.tokens).hex()
    merged = [r for k in (0, 2) for r in summary.server.devices[k].rounds]
    assert sum(r.num_accepted for r in merged) > 0  # the cross-vocabulary draft was accepted


@pytest.mark.parametrize("mode", ["ul", "dl"])
def test_greedy_equals_target_only(pair, mode):
    base = dict(
        pair="tiny-cross", devices=2, drafts=DRAFTS, mode=mode, temperature=0.0, max_new_tokens=24, prompts=PROMPTS[:2]
    )
    spec = generate(GenerateConfig(**base, draft_len=4), pair=pair)
    plain = generate(GenerateConfig(**base, draft_len=0), pair=pair)
    assert [d.tokens for d in spec.devices] == [d.tokens for d in plain.devices]
    assert [d.draft_name for d in spec.devices] == DRAFTS


def test_generate_command_on_the_cross_pair(multispin):
    import json

    res = multispin(
        "generate",
        "--pair",
        "tiny-cross",
        "--devices",
        "2",
        "--draft",
        "merged",
        "--draft",
        "close",
        "--max-new-tokens",
        "6",
        "--json",
    )
    assert res.code == 0, res.err
    out = json.loads(res.out)
    assert [d["draft"] for d in out["devices"]] == DRAFTS
    assert all(len(d["tokens"]) == 6 for d in out["devices"])
    bad = multispin("generate", "--pair", "tiny-cross", "--draft", "nope")
    assert bad.code == 2 and "merged, close" in bad.err and "Traceback" not in bad.err


def _cached(*names: str) -> bool:
    from multispin.models.acquire import model_dir

    return all((model_dir(n) / "multispin-manifest.json").exists() for n in names)


@pytest.mark.slow
@pytest.mark.parametrize("draft", ["smollm2-135m", "gemma3-270m"])
def test_real_cross_pair_greedy_equals_target_only(draft):
    """SmolLM2-135M (or Gemma 3 270M) drafting for Qwen2.5-Coder-0.5B: the speculative text is the
    target's own greedy text (one device corrects in UL mode, one in DL mode)."""
    if not _cached(draft, "qwen2.5-coder-0.5b"):
        pytest.skip(f"{draft} and qwen2.5-coder-0.5b are not both cached")
    real = resolve_pair(f"{draft}:qwen2.5-coder-0.5b")
    assert list(real.cross_drafts) == [draft]
    prompts = ["Write a Python function that reverses a string.", "What is a hash table?"]
    base = dict(pair=real.name, devices=2, temperature=0.0, max_new_tokens=12, prompts=prompts)
    for mode in ("ul", "dl"):
        spec = generate(GenerateConfig(**base, draft_len=4, mode=mode), pair=real)
        if mode == "ul":
            plain = generate(GenerateConfig(**base, draft_len=0, mode=mode), pair=real)
        assert [d.tokens for d in spec.devices] == [d.tokens for d in plain.devices]
        assert sum(d.stats.num_accepted_tokens for d in spec.devices) > 0


@pytest.mark.slow
@pytest.mark.skipif(
    not _cached("smollm2-135m", "qwen2.5-coder-0.5b"), reason="SmolLM2-135M and Qwen2.5-Coder-0.5B are not both cached"
)
def test_real_cross_pair_prompts_use_the_targets_chat_template():
    """The target of a DRAFT:TARGET pair named by its registered name is an instruct model: its
    prompts go through the chat template (without it Qwen answered HumanEval prompts with EOS)."""
    real = resolve_pair("smollm2-135m:qwen2.5-coder-0.5b")
    assert real.use_chat_template
    ids = encode_prompt(real, "hi")
    assert ids[0] == real.tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert real.tokenizer.decode(ids).endswith("<|im_start|>assistant\n")


def test_measure_scores_a_cross_vocabulary_draft_beside_a_same_vocabulary_one(pair):
    from multispin.experiments.acceptance import MeasureConfig, measure

    out = measure(
        MeasureConfig(pair="tiny-cross", drafts=DRAFTS, prompts=2, draft_len=2, max_new_tokens=8, source="builtin"),
        pair=pair,
    )
    assert set(out) == set(DRAFTS)
    for profile in out.values():
        assert 0.0 <= profile["alpha"] <= 1.0 and profile["num_tokens"] > 0
