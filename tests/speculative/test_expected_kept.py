"""E[tokens kept | draft]: exact on hand-made cases, the engine's own clip, and, through the round
engine on Markov tables (EOS and the budget in play), the realised tokens' mean; likewise
P(no rejection | draft) (`draft_survival`), the realised rate of drafts that passed whole."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pytest

from doubles import FixedDraftLengths
from multispin.models.synthetic import MarkovBatchedLM, MarkovSequenceLM, make_tables
from multispin.runtime.round.engine import PolicyPair, RoundEngine, clip_new_tokens
from multispin.runtime.round.local import FixedLink
from multispin.runtime.round.roles import DraftDevice, VerifierServer
from multispin.speculative.codecs import make_codec
from multispin.speculative.expected_kept import accept_probabilities, draft_survival, expected_kept, kept_length
from multispin.speculative.warp import SamplingParams
from multispin.system.payload import WirePayload

V, EOS = 12, 7
SAMPLING = SamplingParams(temperature=1.0)
CODEC = make_codec("dense-fp32")


def test_hand_made_cases():
    assert expected_kept(np.ones(3), [1, 2, 3], (), 64) == 4  # all accepted, plus the bonus
    assert expected_kept(np.zeros(3), [1, 2, 3], (), 64) == 1  # the correction only
    assert expected_kept(np.array([0.5, 1.0]), [1, 2], (), 64) == pytest.approx(0.5 * 1 + 0.5 * 3)
    assert expected_kept(np.ones(3), [1, EOS, 3], (EOS,), 64) == 2  # cut after the EOS
    assert expected_kept(np.ones(3), [1, 2, 3], (), 2) == 2  # and at the budget
    assert expected_kept(np.zeros(0), [], (), 64) == 1  # γ = 0: the target's token
    assert accept_probabilities(np.array([0.2, 0.5]), np.array([0.4, 0.25])).tolist() == [0.5, 1.0]
    assert draft_survival(np.array([0.5, 0.5, 1.0])) == 0.25 and draft_survival(np.zeros(0)) == 1.0


@pytest.mark.parametrize("accepted", range(5))
def test_kept_length_is_the_engines_clip(accepted):
    draft = [3, EOS, 4, 5]
    for budget in (1, 2, 6):
        final = 9
        assert kept_length(accepted, draft, (EOS,), budget) == len(
            clip_new_tokens(draft[:accepted] + [final], (EOS,), budget)
        )


def _eos_blind(beta, draft_tokens, eos_ids, budget):
    """A broken expectation for the negative control: the EOS cut forgotten (κ = L + 1)."""
    return expected_kept(beta, draft_tokens, (), budget)


def _run(seed: int, gammas: dict[int, int], max_new: int = 24) -> list[tuple[int, float, bool, float]]:
    """(tokens kept, expected tokens, passed whole, its probability) of every committed
    device-round of one in-process run until every device is done (EOS = token 7 of 12 ends texts
    often; the budget ends the rest)."""
    target, draft = make_tables(V, 0, draft_noise=1.0)
    verifier = VerifierServer(MarkovBatchedLM(target), SAMPLING, CODEC, CODEC, seed)
    devices = {d: DraftDevice(d, MarkovSequenceLM(draft), SAMPLING, CODEC, CODEC, seed, [1, 2]) for d in gammas}
    for d, dev in devices.items():
        verifier.open(d, dev.tokens)
    wire = WirePayload.from_codecs(CODEC, CODEC, V, 20)
    engine = RoundEngine(verifier, PolicyPair(FixedDraftLengths(gammas), FixedLink("ul")), max_new, (EOS,), wire)
    rows, active, r = [], list(gammas), 0
    while active:
        out = engine.plan(r, active)
        engine.verify(out, {d: devices[d].draft(out.gammas[d]) for d in out.gammas})
        for d, v in out.verdicts.items():
            dev = devices[d]
            final = v.bonus_token if not v.rejected else engine.correct_remotely(out, d, dev.upload_q(v.num_accepted))
            dev.commit(v.num_accepted, engine.commit(out, d, final))
            rows.append((len(out.kept[d]), out.expected_tokens[d], not v.rejected, out.draft_survival[d]))
        engine.close(out)
        active, r = [d for d in active if not engine.finished(d)], r + 1
    return rows


def _diffs(expectation, runs: int) -> np.ndarray:
    with patch("multispin.runtime.round.engine.expected_kept", expectation):
        return np.array([n - e for seed in range(runs) for n, e, _, _ in _run(seed, {0: 3, 1: 6, 2: 9})])


def test_expected_tokens_are_the_realised_mean():
    """Σ (kept − E[kept | draft]) over ≈ 1,100 device-rounds (170 runs) is within 4 standard
    errors of 0 (z = −1.5 over 240 runs when written)."""
    diff = _diffs(expected_kept, 170)
    assert diff.size > 1000
    assert abs(diff.mean()) < 4 * diff.std(ddof=1) / np.sqrt(diff.size)


def test_negative_control_an_eos_blind_expectation_is_caught():
    diff = _diffs(_eos_blind, 60)  # z ≈ −15 over 240 runs
    assert abs(diff.mean()) > 4 * diff.std(ddof=1) / np.sqrt(diff.size)


def _survival_diffs(survival, runs: int) -> np.ndarray:
    with patch("multispin.runtime.round.engine.draft_survival", survival):
        return np.array([float(ok) - s for seed in range(runs) for _, _, ok, s in _run(seed, {0: 2, 1: 4, 2: 7})])


def test_draft_survival_is_the_realised_rate_of_whole_drafts():
    """Σ (1[no rejection] − β_1 ⋯ β_γ) over ≈ 1,000 device-rounds is within 4 standard errors of 0."""
    diff = _survival_diffs(draft_survival, 160)
    assert diff.size > 1000
    assert abs(diff.mean()) < 4 * diff.std(ddof=1) / np.sqrt(diff.size)


def test_negative_control_a_survival_that_forgets_the_last_position_is_caught():
    diff = _survival_diffs(lambda beta: draft_survival(beta[:-1]), 120)
    assert abs(diff.mean()) > 4 * diff.std(ddof=1) / np.sqrt(diff.size)
