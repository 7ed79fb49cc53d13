"""The coupled rule's output law is exactly the target's: the chi-square test of the UL/DL exactness
tests (`test_exactness.py`) on coupled rounds through the real round loop, with several γ, ragged
batches (mixed γ, γ = 0 included, standard devices beside coupled ones) and EOS; negative
controls plug known-biased rules into the same loop and must fail the same test."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import multispin.runtime.round.roles as roles
from doubles import FixedDraftLengths
from exactness_engine import DRAFT, MARG_T1, N_DEVICES, N_POSITIONS, P_PASS, PROMPT, T1, TARGET, run_first_tokens
from exactness_stats import min_p_value
from multispin.models.synthetic import MarkovBatchedLM, MarkovSequenceLM
from multispin.runtime.round.engine import PlannedRound, PolicyPair
from multispin.runtime.round.local import FixedLink, NoCorrection, run_rounds
from multispin.speculative.codecs import make_codec
from multispin.speculative.coupled import CoupledResult, NoiseStream
from multispin.speculative.warp import SamplingParams, warp


class MixedRules(PolicyPair):
    """Given γ per device; the devices in ``coupled_ids`` coupled, the rest standard (UL)."""

    def __init__(self, gammas: dict[int, int], coupled_ids: set[int]):
        super().__init__(FixedDraftLengths(gammas), FixedLink("ul"))
        self.coupled_ids = coupled_ids

    def plan(self, round_idx, active, caps=None):
        gammas = self.draft_lengths(round_idx, list(active))
        return PlannedRound(round_idx, gammas, coupled={d: d in self.coupled_ids for d in active})


def _fleet(n: int, sampling: SamplingParams, seed: int = 11):
    codec = make_codec("dense-fp32")
    server = roles.VerifierServer(MarkovBatchedLM(TARGET), sampling, codec, codec, seed)
    devices = {k: roles.DraftDevice(k, MarkovSequenceLM(DRAFT), sampling, codec, codec, seed, PROMPT) for k in range(n)}
    return server, devices


def run_coupled(gammas, sampling=T1, coupled_ids=None, n_devices=N_DEVICES) -> np.ndarray:
    server, devices = _fleet(n_devices, sampling)
    gam = {k: gammas[k % len(gammas)] for k in devices}
    ids = set(devices) if coupled_ids is None else coupled_ids
    policy = (
        MixedRules(gam, ids) if coupled_ids is not None else PolicyPair(FixedDraftLengths(gam), NoCorrection(), True)
    )
    run_first_tokens(server, devices, policy, max(gammas))
    return np.array([devices[k].generated[:N_POSITIONS] for k in devices])


@pytest.mark.parametrize("gammas", [[1], [7], [0, 2, 5, 1]])
def test_coupled_output_law_is_target_law(gammas):
    assert min_p_value(run_coupled(gammas), MARG_T1) > P_PASS


def test_coupled_beside_standard_devices_in_one_batch():
    tokens = run_coupled([3, 0, 4], coupled_ids=set(range(0, N_DEVICES, 2)))
    assert min_p_value(tokens[0::2], MARG_T1) > P_PASS and min_p_value(tokens[1::2], MARG_T1) > P_PASS


def test_coupled_under_a_warped_policy():
    sampling = SamplingParams(temperature=0.7, top_k=5)
    from exactness_engine import exact_marginals

    assert min_p_value(run_coupled([3], sampling), exact_marginals(sampling)) > P_PASS


# ---- EOS: the law of the first tokens with an absorbing end token ----

EOS = 2
PAD = TARGET.vocab_size  # stands for "after EOS"


def _marginals_with_eos(sampling: SamplingParams) -> np.ndarray:
    vocab = TARGET.vocab_size
    marg = np.zeros((N_POSITIONS, vocab + 1))
    for seq in itertools.product(range(vocab), repeat=N_POSITIONS):
        prob, prefix, shown = 1.0, list(PROMPT), []
        for tok in seq:
            if shown and shown[-1] in (EOS, PAD):
                shown.append(PAD)
                continue
            prob *= float(warp(TARGET.next_logits(prefix), sampling)[tok])
            prefix.append(tok)
            shown.append(tok)
        if prob == 0.0:
            continue
        weight = prob / vocab ** sum(t == PAD for t in shown)  # PAD positions enumerate every token
        for i, tok in enumerate(shown):
            marg[i, tok] += weight
    return marg


@pytest.mark.parametrize("gamma", [4])
def test_coupled_output_law_with_eos(gamma):
    server, devices = _fleet(N_DEVICES, T1)
    policy = PolicyPair(FixedDraftLengths(dict.fromkeys(devices, gamma)), NoCorrection(), True)
    run_rounds(server, devices, policy, N_POSITIONS, (EOS,))
    tokens = np.array([(devices[k].generated + [PAD] * N_POSITIONS)[:N_POSITIONS] for k in devices])
    assert (tokens == EOS).any() and (tokens == PAD).any()  # EOS does end some sequences early
    assert min_p_value(tokens, _marginals_with_eos(T1)) > P_PASS


# ---- negative controls ----


def test_control_committing_the_draft_at_the_first_mismatch_fails(monkeypatch):
    real = roles.verify_coupled

    def commit_draft(drafts, *args, **kw) -> CoupledResult:
        res = real(drafts, *args, **kw)
        committed = res.committed_token.copy()
        for k in np.flatnonzero(res.mismatched):
            committed[k] = drafts.token_ids[drafts.cu[k] + res.num_accepted[k]]
        return CoupledResult(res.num_accepted, committed, res.matched, res.draft_lens)

    monkeypatch.setattr(roles, "verify_coupled", commit_draft)
    assert min_p_value(run_coupled([3]), MARG_T1) < 1e-6


def test_control_noise_reused_across_positions_fails(monkeypatch):
    real = NoiseStream.gumbel_at
    monkeypatch.setattr(NoiseStream, "gumbel_at", lambda self, position, ids: real(self, 0, ids))
    assert min_p_value(run_coupled([1, 3]), MARG_T1) < 1e-6
