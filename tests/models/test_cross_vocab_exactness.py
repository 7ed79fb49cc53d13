"""Speculative decoding with a draft of ANOTHER vocabulary is exact for the target: chi-square
tests of the first emitted tokens of many independent devices, through the real round loop
(devices, batched server, UL and DL correction), against the target's law by enumeration.

The pair is two synthetic order-2 Markov models over two different synthetic tokenizers built
here: the target's pieces include tokens the draft cannot spell ("c", "bb", a special EOS) and
the draft's include tokens the target lacks ("ba", "a "). Negative control: a device whose q
over the target's ids is restricted to the shared tokens but not renormalised fails the same
test in both modes.
"""

from __future__ import annotations

import numpy as np
import pytest

import multispin.runtime.round.roles as roles
from doubles import FixedDraftLengths
from exactness_stats import exact_marginals as enumerate_marginals
from exactness_stats import min_p_value as chi_square_min_p
from multispin.models.cross_vocab import CrossVocabLM
from multispin.models.piece_tokenizer import PieceTokenizer
from multispin.models.synthetic import MarkovBatchedLM, MarkovSequenceLM, MarkovTable, make_tables
from multispin.models.vocab_map import VocabMap
from multispin.runtime.round.engine import PolicyPair
from multispin.runtime.round.local import FixedLink, run_rounds
from multispin.speculative.codecs import make_codec
from multispin.speculative.warp import SamplingParams, warp

TARGET_TOK = PieceTokenizer(["a", "b", "c", " ", "ab", "bb"], specials=["<eos>"], eos="<eos>")
DRAFT_TOK = PieceTokenizer(["a", "b", " ", "ab", "ba", "a "], specials=["<s>"])
V_T = len(TARGET_TOK)
TARGET, _ = make_tables(V_T, seed=5, scale=1.5)
VOCAB = VocabMap.build(DRAFT_TOK.token_table(), TARGET_TOK.token_table())


def _draft_table(noise: float, seed: int) -> MarkovTable:
    """The target's table read through the map (shared tokens), plus seeded noise everywhere:
    a draft that agrees with the target often but not always."""
    rng = np.random.default_rng(seed)
    v_d = len(DRAFT_TOK)
    ctx = np.append(VOCAB.draft_to_target, -1)  # draft context id (V_d = none) -> target id
    ctx = np.where(ctx < 0, V_T, ctx)
    logits = rng.normal(size=(v_d + 1, v_d + 1, v_d)) * 1.5
    shared = TARGET.logits[ctx[:, None], ctx[None, :]][..., VOCAB.shared_target]
    logits[..., VOCAB.shared_draft] = shared
    return MarkovTable((logits + rng.normal(size=logits.shape) * noise).astype(np.float32))


DRAFT = _draft_table(noise=0.8, seed=6)
PROMPT = TARGET_TOK.encode("ab a")
N_DEVICES = 3000
N_POSITIONS = 3
P_PASS = 1e-4  # a correct engine fails one test with this probability
T1 = SamplingParams()


def test_the_pair_exercises_tokens_outside_the_intersection():
    shared = {TARGET_TOK.piece(int(t)) for t in VOCAB.shared_target}
    assert shared == {b"a", b"b", b" ", b"ab"}
    assert VOCAB.target_to_draft[0] == -1  # the special EOS is never mapped


def cross_draft() -> CrossVocabLM:
    return CrossVocabLM(MarkovSequenceLM(DRAFT), DRAFT_TOK.token_table(), TARGET_TOK.token_table(), VOCAB)


def exact_marginals(sampling: SamplingParams) -> np.ndarray:
    """Law of emitted tokens 1..N_POSITIONS under the target alone, by enumeration."""
    return enumerate_marginals(TARGET, PROMPT, N_POSITIONS, sampling)


MARG_T1 = exact_marginals(T1)


def run_engine(
    mode: str,
    gamma: int,
    sampling: SamplingParams = T1,
    make_lm=cross_draft,
    seed: int = 11,
    n_devices: int = N_DEVICES,
) -> dict[int, roles.DraftDevice]:
    codec = make_codec("dense-fp32")
    server = roles.VerifierServer(MarkovBatchedLM(TARGET), sampling, codec, codec, seed)
    devices = {k: roles.DraftDevice(k, make_lm(), sampling, codec, codec, seed, PROMPT) for k in range(n_devices)}
    run_rounds(
        server,
        devices,
        PolicyPair(FixedDraftLengths({k: gamma for k in devices}), FixedLink(mode)),
        max_new_tokens=max(N_POSITIONS, gamma + 1),
        eos_ids=(),
    )
    for k, dev in devices.items():  # the device's record is the server's
        assert dev.generated == server.generated(k)
    return devices


def min_p_value(devices: dict[int, roles.DraftDevice], marginals: np.ndarray) -> float:
    return chi_square_min_p(np.array([d.generated[:N_POSITIONS] for d in devices.values()]), marginals)


# 3,000 devices' texts per run: γ = 1 stays in `make test-fast`; γ = 3, the warped policy and the
# negative controls (each 4–7 CPU-s) run in `make test` (CI), as the other statistical runs marked slow
@pytest.mark.parametrize("gamma", [1, pytest.param(3, marks=pytest.mark.slow)])
@pytest.mark.parametrize("mode", ["ul", "dl"])
def test_cross_vocabulary_output_law_is_target_law(mode, gamma):
    devices = run_engine(mode, gamma)
    # tokens outside I (the draft can never propose them) do come out, through corrections
    assert any(t in (0, 3, 6) for d in devices.values() for t in d.generated)
    assert min_p_value(devices, MARG_T1) > P_PASS


@pytest.mark.slow
def test_warped_policy_stays_exact():
    sampling = SamplingParams(temperature=0.8, top_k=3)
    assert min_p_value(run_engine("dl", 3, sampling), exact_marginals(sampling)) > P_PASS


# ---- negative control: q restricted to I but not renormalised ----


class UnrenormalisedLM(CrossVocabLM):
    """Records, for every row it gives, the draft's mass on I: a device that multiplies its q̂ by
    it holds the draft's probabilities restricted to I *without* renormalising."""

    def __init__(self):
        base = cross_draft()
        super().__init__(base.draft_lm, DRAFT_TOK.token_table(), TARGET_TOK.token_table(), VOCAB)
        self.masses: list[float] = []

    def extend_last(self, token_ids):
        logits = super().extend_last(token_ids)
        full = warp(self.draft_lm.table.next_logits(self.context.draft), T1)
        self.masses.append(float(full[VOCAB.shared_draft].sum()))
        return logits


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ul", "dl"])
def test_control_unrenormalised_q_fails(monkeypatch, mode):
    real = roles.DraftDevice.drafting  # the draft step by step (draft_all drives it)

    def leaky(self, gamma, rule="standard"):
        out = yield from real(self, gamma, rule)
        masses = self.lm.masses[-gamma:] if gamma else []
        assert max(masses, default=0.0) < 1.0  # the draft does put mass outside I
        self._q_hat = [q * m for q, m in zip(self._q_hat, masses)]
        return roles.Draft(out.tokens, [x * m for x, m in zip(out.q_at_tokens, masses)])

    monkeypatch.setattr(roles.DraftDevice, "drafting", leaky)
    assert min_p_value(run_engine(mode, 3, make_lm=UnrenormalisedLM), MARG_T1) < 1e-6


# ---- greedy: the output is the target's own greedy decoding ----


def target_greedy(n: int) -> list[int]:
    seq = list(PROMPT)
    for _ in range(n):
        seq.append(int(np.argmax(TARGET.next_logits(seq))))
    return seq[len(PROMPT) :]


@pytest.mark.parametrize("mode", ["ul", "dl"])
def test_greedy_equals_target_greedy(mode):
    greedy = SamplingParams(temperature=0.0)
    codec = make_codec("dense-fp32")
    server = roles.VerifierServer(MarkovBatchedLM(TARGET), greedy, codec, codec, 0)
    devices = {0: roles.DraftDevice(0, cross_draft(), greedy, codec, codec, 0, PROMPT)}
    logs = run_rounds(
        server, devices, PolicyPair(FixedDraftLengths({0: 4}), FixedLink(mode)), max_new_tokens=40, eos_ids=()
    )
    assert devices[0].generated[:40] == target_greedy(40)
    assert sum(r.num_accepted for r in logs[0]) > 0  # the draft did get tokens accepted
