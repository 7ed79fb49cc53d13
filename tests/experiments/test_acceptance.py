import json

import numpy as np
from scipy import stats
from typer.testing import CliRunner

from multispin.cli import app
from multispin.experiments.acceptance import iid_mean_accepted_length, run_prompts, summarise
from multispin.models.synthetic import MarkovBatchedLM, MarkovSequenceLM, MarkovTable, make_tables
from multispin.speculative.warp import SamplingParams, warp

GAMMA = 4
SAMPLING = SamplingParams()


def _measure(target: MarkovTable, draft: MarkovTable, n_prompts=60, seed=0):
    prompts = [[k % target.vocab_size] for k in range(n_prompts)]
    measured = run_prompts(MarkovBatchedLM(target), lambda: MarkovSequenceLM(draft),
                           lambda: MarkovSequenceLM(target), prompts, GAMMA, SAMPLING, seed, 40)
    return measured, summarise(measured, GAMMA, seed)


def _context_free(table: MarkovTable) -> MarkovTable:
    """Same next-token logits after every context: acceptances are i.i.d. by construction."""
    row = table.logits[0, 0]
    return MarkovTable(np.broadcast_to(row, table.logits.shape).copy())


def test_iid_draft_matches_prediction_within_ci():
    target, draft = (_context_free(t) for t in make_tables(10, seed=1, scale=1.5, draft_noise=1.0))
    measured, s = _measure(target, draft)
    exact_alpha = float(np.minimum(warp(target.logits[0, 0], SAMPLING),
                                   warp(draft.logits[0, 0], SAMPLING)).sum())
    assert abs(s["alpha"] - exact_alpha) < 1e-6
    lo, hi = s["mean_accepted_length_ci95"]
    assert lo <= s["iid_prediction"] <= hi
    # Each position: accepted | reached ~ Binomial(reached, α) when acceptances are i.i.d.
    accepted = np.array([a for m in measured for a in m.accepted])
    for i, rate in enumerate(s["per_position_rate"]):
        reached, passed = int((accepted >= i).sum()), int((accepted >= i + 1).sum())
        assert rate == passed / reached
        assert stats.binomtest(passed, reached, exact_alpha).pvalue > 1e-3


def test_iid_prediction_is_rejected_for_a_wrong_alpha():
    """Negative control: the same interval excludes the prediction made from a wrong α."""
    target, draft = (_context_free(t) for t in make_tables(10, seed=1, scale=1.5, draft_noise=1.0))
    _, s = _measure(target, draft)
    lo, hi = s["mean_accepted_length_ci95"]
    wrong = iid_mean_accepted_length(s["alpha"] - 0.15, GAMMA)
    assert not lo <= wrong <= hi


def test_alpha_matches_independent_computation_on_markov_models():
    target, draft = make_tables(8, seed=2, scale=1.5, draft_noise=0.8)
    measured, s = _measure(target, draft, n_prompts=20)
    # Independent: recompute overlaps from the tables along each generated text.
    pooled = np.concatenate([m.overlap for m in measured])
    assert s["num_tokens"] == pooled.size
    assert abs(s["alpha"] - pooled.mean()) < 1e-12
    assert 0.2 < s["alpha"] < 0.95
    assert len(s["per_position_rate"]) == GAMMA


def test_measure_cli_runs_offline_on_tiny(tmp_path):
    out = tmp_path / "profile.json"
    res = CliRunner().invoke(app, ["measure", "--pair", "tiny", "--draft", "close", "--prompts", "4",
                                   "--draft-len", "3", "--max-new-tokens", "8", "--source", "builtin",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    profile = json.loads(out.read_text())
    assert profile["draft"] == "close" and 0 < profile["alpha"] < 1
    assert profile["tasks"]["chat"]["alpha"] == profile["alpha"]
