"""The round loop on real (tiny, random-init) transformer models: greedy equivalence, seeds,
UL ≡ DL, γ = 0, EOS inside drafts, and KV caches that hold exactly the committed tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import multispin.runtime.round.roles as roles
from doubles import FixedDraftLengths
from multispin.errors import ConfigError, ProtocolError
from multispin.models.synthetic import MarkovBatchedLM, MarkovSequenceLM, make_tables
from multispin.models.tiny import load_tiny_pair
from multispin.runtime.round.engine import PolicyPair
from multispin.runtime.round.local import FixedLink, run_rounds
from multispin.runtime.round.session import GenerateConfig, generate
from multispin.speculative.codecs import make_codec
from multispin.speculative.warp import SamplingParams

PROMPTS = ["Hello edge server", "The channel is", "abc", "Speculative decoding at the edge"]


def _greedy_reference(pair, prompt_ids, n):
    ids = list(prompt_ids)
    with torch.no_grad():
        for _ in range(n):
            logits = pair.target(torch.tensor([ids])).logits[0, -1, : pair.vocab_size]
            ids.append(int(logits.to(torch.float32).argmax()))
            if ids[-1] in pair.eos_token_ids:
                break
    return ids[len(prompt_ids) :]


def _run(**kw):
    base = dict(pair="tiny", devices=4, draft_len=3, seed=5, max_new_tokens=20, prompts=PROMPTS)
    base.update(kw)
    return generate(GenerateConfig.make(**base))


def test_greedy_speculative_equals_target_greedy_with_mixed_draft_lengths():
    pair = load_tiny_pair()
    via_cli_path = _run(temperature=0, max_new_tokens=24, draft_len=2)
    # Different γ per device in one batch, γ = 0 included.
    sampling = SamplingParams(temperature=0)
    codec = make_codec("dense-fp32")
    from multispin.models.hf import HFBatchedLM, HFSequenceLM

    server = roles.VerifierServer(HFBatchedLM(pair.target, pair.vocab_size), sampling, codec, codec, 0)
    devices = {
        k: roles.DraftDevice(
            k, HFSequenceLM(pair.drafts["mid"], pair.vocab_size), sampling, codec, codec, 0, list(PROMPTS[k].encode())
        )
        for k in range(4)
    }
    gammas = {0: 0, 1: 1, 2: 4, 3: 7}
    run_rounds(server, devices, PolicyPair(FixedDraftLengths(gammas), FixedLink("dl")), 24, pair.eos_token_ids)
    for k in range(4):
        ref = _greedy_reference(pair, list(PROMPTS[k].encode()), 24)
        assert devices[k].generated == ref, f"device {k} (γ={gammas[k]})"
        assert via_cli_path.devices[k].tokens == ref


def test_greedy_control_wrong_rollback_breaks_equivalence(monkeypatch):
    """Negative control: a target cache that never rolls back rejected drafts breaks it."""
    from multispin.models.hf import HFBatchedLM

    pair = load_tiny_pair()
    rollback = HFBatchedLM.rollback  # drafts share HFBatchedLM too: break only the target's cache
    monkeypatch.setattr(
        HFBatchedLM,
        "rollback",
        lambda self, seq_id, length: None if self.model is pair.target else rollback(self, seq_id, length),
    )
    try:
        result = _run(temperature=0, max_new_tokens=24)
    except ProtocolError:
        return  # the stale cache was caught by the verifier's shape checks
    refs = [_greedy_reference(pair, list(p.encode()), 24) for p in PROMPTS]
    assert any(d.tokens != r for d, r in zip(result.devices, refs))


def test_same_seed_same_tokens_and_different_seed_differs():
    a, b, c = _run(seed=1), _run(seed=1), _run(seed=2)
    assert [d.tokens for d in a.devices] == [d.tokens for d in b.devices]
    assert [d.tokens for d in a.devices] != [d.tokens for d in c.devices]


def test_ul_and_dl_give_identical_tokens_for_same_randomness():
    ul, dl, coin = _run(mode="ul"), _run(mode="dl"), _run(mode="random")
    assert any(r.mode for d in ul.devices for r in d.rounds), "no rejection happened"
    assert [d.tokens for d in ul.devices] == [d.tokens for d in dl.devices]
    assert [d.tokens for d in ul.devices] == [d.tokens for d in coin.devices]
    assert {r.mode for d in coin.devices for r in d.rounds} >= {"ul", "dl"}


def test_draft_len_zero_is_target_only_and_gains_one_token_per_round():
    res = _run(draft_len=0, max_new_tokens=10)
    for d in res.devices:
        assert all(r.tokens_gained == 1 and r.mode is None for r in d.rounds)
        assert len(d.rounds) == len(d.tokens)


def test_kv_caches_hold_exactly_the_committed_tokens():
    """After many rejections, each target cache equals a fresh pass over the server's record,
    and each device's tokens equal the server's record (nothing lost or duplicated)."""
    pair = load_tiny_pair()
    codec = make_codec("dense-fp32")
    sampling = SamplingParams()
    from multispin.models.hf import HFBatchedLM, HFSequenceLM

    target = HFBatchedLM(pair.target, pair.vocab_size)
    server = roles.VerifierServer(target, sampling, codec, codec, 3)
    devices = {
        k: roles.DraftDevice(
            k, HFSequenceLM(pair.drafts["far"], pair.vocab_size), sampling, codec, codec, 3, list(PROMPTS[k].encode())
        )
        for k in range(3)
    }
    logs = run_rounds(
        server, devices, PolicyPair(FixedDraftLengths({k: 5 for k in devices}), FixedLink("ul")), 30, eos_ids=()
    )
    assert sum(r.rejection_position is not None for log in logs.values() for r in log) > 3
    for k, dev in devices.items():
        assert server.records[k] == dev.tokens
        cached = target.length(k)
        tail = target.extend_many({k: dev.tokens[cached:]})[k]
        with torch.no_grad():
            fresh = pair.target(torch.tensor([dev.tokens])).logits[0, cached:, : pair.vocab_size]
        np.testing.assert_allclose(tail, fresh.numpy(), atol=1e-4)


def test_eos_inside_a_draft_ends_the_device_and_drops_what_follows():
    target, draft = make_tables(6, seed=4, scale=1.0, draft_noise=0.3)
    eos = 5
    codec = make_codec("dense-fp32")
    sampling = SamplingParams()
    server = roles.VerifierServer(MarkovBatchedLM(target), sampling, codec, codec, 0)
    devices = {k: roles.DraftDevice(k, MarkovSequenceLM(draft), sampling, codec, codec, 0, [1]) for k in range(200)}
    logs = run_rounds(
        server, devices, PolicyPair(FixedDraftLengths({k: 6 for k in devices}), FixedLink("dl")), 40, eos_ids=(eos,)
    )
    clipped = 0
    for k, dev in devices.items():
        gen = dev.generated
        if eos in gen:
            assert gen.index(eos) == len(gen) - 1, "tokens after EOS were kept"
        assert server.records[k] == dev.tokens
        last = logs[k][-1]
        clipped += last.tokens_gained < last.num_accepted + 1
    assert clipped > 0, "no EOS landed inside an accepted draft"


@pytest.mark.parametrize(
    "kw,needle",
    [
        (dict(draft_len=21), "draft_len"),
        (dict(temperature=-1), "temperature"),
        (dict(top_p=1.5), "top_p"),
        (dict(mode="up"), "mode"),
        (dict(devices=0), "devices"),
    ],
)
def test_bad_generate_config_gives_one_clear_error(kw, needle):
    with pytest.raises(ConfigError) as err:
        GenerateConfig.make(**kw)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_unknown_draft_and_bad_codec_are_refused():
    with pytest.raises(ConfigError, match="drafts"):
        _run(drafts=["nope"])
    with pytest.raises(ConfigError):
        _run(ul_codec="sparse:v_eff=0,q=16")
