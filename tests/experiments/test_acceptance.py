import json

import numpy as np
from scipy import stats
from typer.testing import CliRunner

from multispin.cli import app
from multispin.experiments.acceptance import (
    PromptMeasurement,
    iid_mean_accepted_length,
    measure_prompts,
    summarise_acceptance,
)
from multispin.models.synthetic import MarkovBatchedLM, MarkovTable, make_tables
from multispin.speculative.warp import SamplingParams, warp

GAMMA = 4
SAMPLING = SamplingParams()


def _measure(target: MarkovTable, draft: MarkovTable, n_prompts=60, seed=0):
    prompts = [[k % target.vocab_size] for k in range(n_prompts)]
    measured = measure_prompts(
        lambda: MarkovBatchedLM(target),
        {"d": lambda: MarkovBatchedLM(draft)},
        prompts,
        GAMMA,
        SAMPLING,
        seed,
        40,
        batch=16,
    )["d"]
    return measured, summarise_acceptance(measured, GAMMA, seed)


def _context_free(table: MarkovTable) -> MarkovTable:
    """Same next-token logits after every context: acceptances are i.i.d. by construction."""
    row = table.logits[0, 0]
    return MarkovTable(np.broadcast_to(row, table.logits.shape).copy())


def test_iid_draft_matches_prediction_within_ci():
    target, draft = (_context_free(t) for t in make_tables(10, seed=1, scale=1.5, draft_noise=1.0))
    measured, s = _measure(target, draft)
    exact_alpha = float(np.minimum(warp(target.logits[0, 0], SAMPLING), warp(draft.logits[0, 0], SAMPLING)).sum())
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
    assert abs(s["alpha"] - pooled.astype(float).mean()) < 1e-9
    assert 0.2 < s["alpha"] < 0.95
    assert len(s["per_position_rate"]) == GAMMA


def test_measure_cli_runs_offline_on_tiny(tmp_path):
    out = tmp_path / "profile.json"
    res = CliRunner().invoke(
        app,
        [
            "measure",
            "--pair",
            "tiny",
            "--draft",
            "close",
            "--prompts",
            "4",
            "--draft-len",
            "3",
            "--max-new-tokens",
            "8",
            "--source",
            "builtin",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    profile = json.loads(out.read_text())
    assert profile["draft"] == "close" and 0 < profile["alpha"] < 1
    assert profile["tasks"]["chat"]["alpha"] == profile["alpha"]


def _stream(rates, alpha: float, n_prompts: int, rounds: int, seed: int) -> list[PromptMeasurement]:
    """Synthetic verdicts: position i accepted with probability rates[i] once reached; each
    prompt's overlaps average α (what teacher forcing would measure)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n_prompts):
        accepted = []
        for _ in range(rounds):
            a = 0
            while a < len(rates) and rng.random() < rates[a]:
                a += 1
            accepted.append(a)
        overlap = np.clip(rng.normal(alpha, 0.1, 60), 0, 1)
        out.append(PromptMeasurement(overlap, accepted, len(rates), "g" + str(k % 2)))
    return out


def test_iid_check_passes_iid_streams_and_detects_position_decay():
    gamma, alpha = 8, 0.8
    passed = sum(
        bool(summarise_acceptance(_stream([alpha] * gamma, alpha, 40, 10, s), gamma, s)["iid_check"]["holds"])
        for s in range(40)
    )
    assert passed >= 34  # a 95% interval: about 38 of 40 (≥ 34 with probability > 0.99)
    # Negative control: acceptance decaying with the position while the overlap still says 0.8.
    decaying = [alpha * 0.93**i for i in range(gamma)]
    detected = sum(
        not summarise_acceptance(_stream(decaying, alpha, 40, 10, s), gamma, s)["iid_check"]["holds"] for s in range(10)
    )
    assert detected >= 9


def test_iid_check_shorter_gammas_follow_from_one_run():
    gamma = 4
    measured = [PromptMeasurement(np.full(10, 0.5), [0, 4, 2, 1], gamma)]
    check = summarise_acceptance(measured, gamma, 0)["iid_check"]
    # accepted counts min(a, γ') for a in (0, 4, 2, 1): γ'=1 -> (0+1+1+1)/4, γ'=2 -> (0+2+2+1)/4 ...
    assert check["measured"] == [1 + 3 / 4, 1 + 5 / 4, 1 + 6 / 4, 1 + 7 / 4]
    assert check["iid"][0] == iid_mean_accepted_length(0.5, 1)


def test_alpha_per_category():
    s = summarise_acceptance(_stream([0.8] * 4, 0.8, 20, 5, 0), 4, 0)
    assert set(s["groups"]) == {"g0", "g1"}
    assert s["groups"]["g0"]["num_prompts"] == 10
    lo, hi = s["groups"]["g0"]["alpha_ci95"]
    assert lo < s["groups"]["g0"]["alpha"] < hi


def test_acceptance_intervals_are_the_expanded_percentile_of_the_reproduce_statistics():
    """One interval family: the acceptance summary's intervals are intervals.expanded_percentile over
    the prompts, wider than the plain percentile interval (which under-covers at small n) and
    approaching it as n grows; one prompt gives no interval."""
    from multispin.experiments.acceptance import _ci
    from multispin.experiments.intervals import expanded_percentile

    replicates = np.random.default_rng(3).normal(0.7, 0.05, 4000)
    plain = np.percentile(replicates, [2.5, 97.5])
    few, many = _ci(replicates, 5), _ci(replicates, 5000)
    assert few == list(expanded_percentile(replicates, 5))
    assert few[0] < plain[0] and few[1] > plain[1]  # the negative control: the plain one is narrower
    assert np.allclose(many, plain, atol=2e-3)
    assert np.isnan(_ci(replicates, 1)).all()
