"""The coupled α of `multispin measure`: the exact coupled match probability on the same
teacher-forced rows as the standard α (experiments.acceptance)."""

import numpy as np
from test_acceptance import SAMPLING, _context_free, _measure

from multispin.models.synthetic import make_tables
from multispin.speculative.coupled_acceptance import coupled_acceptance
from multispin.speculative.warp import warp


def test_coupled_alpha_is_the_exact_match_probability_of_the_rows():
    target, draft = (_context_free(t) for t in make_tables(10, seed=1, scale=1.5, draft_noise=1.0))
    measured, s = _measure(target, draft, n_prompts=20)
    p, q = warp(target.logits[0, 0], SAMPLING), warp(draft.logits[0, 0], SAMPLING)
    exact = float(coupled_acceptance(p, q)[0])
    assert abs(s["alpha_coupled"] - exact) < 1e-9
    # negative control: the standard rate of the same rows is a different number
    assert abs(s["alpha"] - exact) > 1e-3 and s["alpha_coupled"] < s["alpha"]
    lo, hi = s["alpha_coupled_ci95"]
    assert lo <= s["alpha_coupled"] <= hi
    assert abs(s["coupled_ratio"] - s["alpha_coupled"] / s["alpha"]) < 1e-12


def test_per_prompt_sums_rebuild_both_alphas():
    target, draft = make_tables(8, seed=2, scale=1.5, draft_noise=0.8)
    measured, s = _measure(target, draft, n_prompts=12)
    sums = np.array(s["coupled_per_prompt"])
    assert sums.shape == (12, 3)
    assert abs(sums[:, 1].sum() / sums[:, 0].sum() - s["alpha"]) < 1e-12
    assert abs(sums[:, 2].sum() / sums[:, 0].sum() - s["alpha_coupled"]) < 1e-12
    assert 0 < s["alpha_coupled"] <= s["alpha"]
