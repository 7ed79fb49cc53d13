"""Batched drafting (`roles.draft_all`): devices whose draft models are sequences of one shared
`BatchedLM` draft each step in one forward pass. It must change nothing but the number of passes:

- the output law is still the target's (the chi-square test of test_exactness, Markov models),
  and the tokens are those of every device drafting alone on its own model, with a negative
  control that mixes up the rows of a batch;
- on the tiny pair (float64, so padding changes no token) the tokens and round records equal
  those of every device drafting alone on its own `HFSequenceLM`, sampled and greedy, with
  devices of different drafts in one run, and the shared drafts really run batched.
"""

from __future__ import annotations

import numpy as np
import pytest

import multispin.runtime.round.roles as roles
from doubles import FixedDraftLengths
from exactness_engine import (
    DRAFT,
    MARG_T1,
    N_DEVICES,
    N_POSITIONS,
    P_PASS,
    PROMPT,
    T1,
    TARGET,
    run_engine,
    run_first_tokens,
)
from exactness_stats import min_p_value
from multispin.models.base import BatchedSequence
from multispin.models.hf import HFBatchedLM, HFSequenceLM
from multispin.models.prompts import encode_prompt
from multispin.models.synthetic import MarkovBatchedLM
from multispin.models.tiny import load_tiny_pair
from multispin.runtime.round.engine import PolicyPair
from multispin.runtime.round.local import FixedLink, RandomMode, run_rounds
from multispin.speculative.codecs import make_codec
from multispin.speculative.warp import SamplingParams


def run_batched_engine(mode: str, gamma: int, n_devices: int = N_DEVICES, seed: int = 11) -> np.ndarray:
    """exactness_engine.run_engine with every device drafting on one shared MarkovBatchedLM."""
    codec = make_codec("dense-fp32")
    server = roles.VerifierServer(MarkovBatchedLM(TARGET), T1, codec, codec, seed)
    shared = MarkovBatchedLM(DRAFT)
    devices = {
        k: roles.DraftDevice(k, BatchedSequence(shared, k), T1, codec, codec, seed, PROMPT) for k in range(n_devices)
    }
    run_first_tokens(
        server, devices, PolicyPair(FixedDraftLengths({k: gamma for k in devices}), FixedLink(mode)), gamma
    )
    return np.array([devices[k].generated[:N_POSITIONS] for k in devices])


@pytest.mark.parametrize("mode,gamma", [("ul", 3), ("dl", 5)])
def test_batched_drafting_output_law_is_target_law(mode, gamma):
    assert min_p_value(run_batched_engine(mode, gamma), MARG_T1) > P_PASS


def test_control_always_accept_fails_with_batched_drafting(monkeypatch):
    """The law test has its power in the batched configuration too."""
    real = roles.verify
    monkeypatch.setattr(roles, "verify", lambda d, t, a, b, **kw: real(d, t, np.zeros_like(a), b, **kw))
    assert min_p_value(run_batched_engine("ul", 3), MARG_T1) < 1e-6


@pytest.mark.parametrize("mode,gamma", [("ul", 3), ("dl", 5)])
def test_batched_drafting_gives_the_tokens_of_drafting_alone_markov(mode, gamma):
    assert np.array_equal(run_batched_engine(mode, gamma, n_devices=300), run_engine(mode, gamma, T1, n_devices=300))


def _rotate_batch_rows(monkeypatch) -> None:
    """Plug in a batching bug: each device of a batch gets its neighbour's logits row."""
    real = roles._forward

    def rotated(devices, group, step):
        rows = real(devices, group, step)
        return {d: rows[group[(i + 1) % len(group)]] for i, d in enumerate(group)}

    monkeypatch.setattr(roles, "_forward", rotated)


def test_control_batch_rows_given_to_the_wrong_device_changes_tokens(monkeypatch):
    """Negative control for the token comparison. (Not for the law: speculative sampling is exact
    for any draft distribution, so wrong rows only cost acceptance; the law test cannot see them,
    which is why batched drafting is also compared token for token with drafting alone.)"""
    alone = run_engine("ul", 3, T1, n_devices=300)
    _rotate_batch_rows(monkeypatch)
    assert not np.array_equal(run_batched_engine("ul", 3, n_devices=300), alone)


# ---- the tiny pair: batched drafting gives the very tokens of drafting alone ----

PROMPTS = ["Hello edge server", "The channel is", "abc", "Speculative decoding at the edge", "xyz", "radio"]
DRAFT_OF = ["close", "mid", "close", "far", "mid", "close"]  # three drafts, two of them shared
GAMMAS = {0: 3, 1: 5, 2: 0, 3: 2, 4: 4, 5: 6}  # device 2 drafts nothing


class CountingBatchedLM(HFBatchedLM):
    """Records the batch size of every forward pass."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batch_sizes: list[int] = []

    def _extend_batch(self, new_tokens, last):
        self.batch_sizes.append(len(new_tokens))
        return super()._extend_batch(new_tokens, last)


def _run_tiny(sampling: SamplingParams, batched: bool, seed: int = 5):
    pair = load_tiny_pair()
    ul, dl = make_codec("dense-fp32"), make_codec("dense-fp32")
    server = roles.VerifierServer(HFBatchedLM(pair.target, pair.vocab_size), sampling, ul, dl, seed)
    shared = {name: CountingBatchedLM(pair.drafts[name], pair.vocab_size) for name in set(DRAFT_OF)}
    devices = {}
    for k, name in enumerate(DRAFT_OF):
        lm = BatchedSequence(shared[name], k) if batched else HFSequenceLM(pair.drafts[name], pair.vocab_size)
        devices[k] = roles.DraftDevice(k, lm, sampling, ul, dl, seed, encode_prompt(pair, PROMPTS[k]))
    logs = run_rounds(server, devices, PolicyPair(FixedDraftLengths(GAMMAS), RandomMode(seed)), 20, pair.eos_token_ids)
    result = {k: (devices[k].generated, [(r.draft_len, r.num_accepted, r.mode) for r in logs[k]]) for k in devices}
    return result, {name: lm.batch_sizes for name, lm in shared.items()}


@pytest.mark.parametrize(
    "sampling", [SamplingParams(temperature=1.0), SamplingParams(temperature=0.0)], ids=["sampled", "greedy"]
)
def test_batched_drafting_gives_the_tokens_of_drafting_alone(sampling):
    alone, _ = _run_tiny(sampling, batched=False)
    together, passes = _run_tiny(sampling, batched=True)
    assert together == alone
    assert all(len(toks) == 20 or toks[-1] == 2 for toks, _ in together.values())
    # The shared drafts ran batched (2 drafting devices of "close", 2 of "mid"); "far" alone.
    assert max(passes["close"]) == 2 and max(passes["mid"]) == 2 and max(passes["far"]) == 1


def test_greedy_batched_drafting_gives_the_targets_greedy_tokens():
    """Greedy speculative decoding emits the target's own greedy continuation."""
    pair = load_tiny_pair()
    together, _ = _run_tiny(SamplingParams(temperature=0.0), batched=True)
    for k, (tokens, _) in together.items():
        target = HFSequenceLM(pair.target, pair.vocab_size)
        ids = encode_prompt(pair, PROMPTS[k])
        expected, row = [], target.extend(ids)[-1]
        while len(expected) < len(tokens):
            expected.append(int(np.argmax(row)))
            row = target.extend([expected[-1]])[-1]
        assert tokens == expected
