"""Drafter invariance of the coupled rule: for one seed the text is the target's Gumbel-max decoding
with the session's noise, whatever the draft model, γ, batch or the device's own noise. Exactness
becomes an equality test. Negative control: noise keyed by round instead of by position breaks it.
A device with the wrong noise key still gets the reference text, at the independent-draft
acceptance rate."""

from __future__ import annotations

import numpy as np
import pytest

import multispin.runtime.round.roles as roles
from doubles import FixedDraftLengths
from multispin.models.synthetic import MarkovBatchedLM, MarkovSequenceLM, make_tables
from multispin.runtime.round.engine import PolicyPair
from multispin.runtime.round.local import NoCorrection, run_rounds
from multispin.speculative.codecs import make_codec
from multispin.speculative.coupled import NoiseStream, gumbel_argmax, session_key
from multispin.speculative.warp import SamplingParams, warp

VOCAB = 16
SEED = 4
MAX_NEW = 24
TARGET, DRAFT_A = make_tables(VOCAB, seed=8, scale=1.5, draft_noise=0.6)
_, DRAFT_B = make_tables(VOCAB, seed=8, scale=1.5, draft_noise=2.0)  # the same target, a worse draft
SAMPLING = SamplingParams(temperature=0.9)
PROMPTS = [list(np.random.default_rng(p).integers(0, VOCAB, 1 + p % 4)) for p in range(120)]


def reference(prompt: list[int], device_id: int, n: int = MAX_NEW) -> list[int]:
    """Plain target decoding with the session's noise: x_i = argmax(log p_i + G_i), no draft."""
    noise, ids = NoiseStream(session_key(SEED, device_id)), [int(t) for t in prompt]
    for _ in range(n):
        p = warp(TARGET.next_logits(ids), SAMPLING)
        ids.append(int(gumbel_argmax(p, noise.gumbel(len(ids), VOCAB))))
    return ids[len(prompt) :]


def run(draft, gammas, device_noise=None) -> tuple[dict[int, list[int]], dict[int, list]]:
    codec = make_codec("dense-fp32")
    server = roles.VerifierServer(MarkovBatchedLM(TARGET), SAMPLING, codec, codec, SEED)
    devices = {
        k: roles.DraftDevice(k, MarkovSequenceLM(draft), SAMPLING, codec, codec, SEED, p) for k, p in enumerate(PROMPTS)
    }
    if device_noise is not None:
        for k, dev in devices.items():
            dev._noise[k] = device_noise(k)
    gam = {k: gammas[k % len(gammas)] for k in devices}
    logs = run_rounds(server, devices, PolicyPair(FixedDraftLengths(gam), NoCorrection(), True), MAX_NEW, ())
    return {k: d.generated for k, d in devices.items()}, logs


REFERENCE = {k: reference(p, k) for k, p in enumerate(PROMPTS)}


@pytest.mark.parametrize(("draft", "gammas"), [(DRAFT_A, [1]), (DRAFT_A, [8]), (DRAFT_B, [4]), (DRAFT_B, [0, 8, 3])])
def test_coupled_text_is_target_decoding_with_the_same_noise(draft, gammas):
    texts, logs = run(draft, gammas)
    assert texts == REFERENCE
    assert sum(r.num_accepted for log in logs.values() for r in log) > 0  # drafts were accepted


def test_control_noise_keyed_by_round_breaks_invariance(monkeypatch):
    """The server draws G from (round, offset) instead of the absolute position: the text then
    depends on where rounds start, so γ = 1 and γ = 8 disagree, and both leave the reference."""
    real = roles.verify_coupled

    def by_round(drafts, target, noises, starts, **kw):
        by_round.calls += 1
        return real(drafts, target, noises, [1000 * by_round.calls] * len(starts), **kw)

    by_round.calls = 0
    monkeypatch.setattr(roles, "verify_coupled", by_round)
    short, _ = run(DRAFT_A, [1])
    by_round.calls = 0
    long, _ = run(DRAFT_A, [8])
    assert short != long and short != REFERENCE and long != REFERENCE


def _rates(logs) -> float:
    drafted = sum(r.draft_len for log in logs.values() for r in log)
    return sum(r.num_accepted for log in logs.values() for r in log) / drafted


def test_a_device_with_the_wrong_key_gets_the_reference_text_at_the_independent_rate():
    coupled_texts, coupled_logs = run(DRAFT_A, [1])
    wrong_texts, wrong_logs = run(DRAFT_A, [1], device_noise=lambda k: NoiseStream(b"not the session key"))
    assert wrong_texts == coupled_texts == REFERENCE  # only the server's noise sets the output
    # γ = 1: each round tests one draft token, matched with Σ_x p(x) q(x) when the noises are
    # independent (coupled: Σ_x 1 / Σ_y max(p_y/p_x, q_y/q_x), higher)
    expected, matched, n = 0.0, 0, 0
    for k, log in wrong_logs.items():
        ids = list(PROMPTS[k])
        for r in log:
            p, q = warp(TARGET.next_logits(ids), SAMPLING), warp(DRAFT_A.next_logits(ids), SAMPLING)
            expected += float(np.dot(p, q))
            matched += r.num_accepted
            n += r.draft_len
            ids += wrong_texts[k][len(ids) - len(PROMPTS[k]) :][: r.tokens_gained]
    sd = np.sqrt(expected * (1 - expected / n))
    assert abs(matched - expected) < 4 * sd, (matched, expected, n)
    assert _rates(wrong_logs) < _rates(coupled_logs) - 0.1, (_rates(wrong_logs), _rates(coupled_logs))


# ---- the tiny transformer pair through `generate` (real models, random init, no download) ----


def _generate(**kw):
    from multispin.runtime.round.session import GenerateConfig, generate

    prompts = [f"prompt {i}: {'abc' * (i % 5)} edge" for i in range(100)]
    base = dict(pair="tiny", devices=100, mode="coupled", seed=3, max_new_tokens=12, prompts=prompts)
    return [d.text for d in generate(GenerateConfig.make(**{**base, **kw})).devices]


@pytest.mark.slow
def test_generate_coupled_texts_do_not_depend_on_draft_or_gamma():
    target_only = _generate(draft_len=0)
    for drafts, gamma in ((["close"], 1), (["close"], 8), (["far"], 8), (["mid", "far"], 3)):
        assert _generate(drafts=drafts, draft_len=gamma) == target_only, (drafts, gamma)


@pytest.mark.slow
def test_greedy_coupled_is_exact_match_with_target_greedy():
    greedy = _generate(temperature=0, draft_len=4, mode="ul")
    assert _generate(temperature=0, draft_len=4) == greedy  # the degenerate case: arg-max against arg-max


@pytest.mark.slow
def test_a_draft_of_another_vocabulary_is_coupled_over_the_targets_ids():
    """Cross-vocabulary drafts reach the engine as q over the target's ids (−∞ outside the shared
    tokens): the coupled rule runs on them unchanged, and the text is still the target's."""
    assert _generate(pair="tiny-cross", drafts=["merged"], draft_len=3) == _generate(draft_len=0)
