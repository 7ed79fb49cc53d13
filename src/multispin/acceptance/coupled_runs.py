"""The coupled rule's α a running system sees: the tokens-matched α of its coupled rounds.

The teacher-forced coupled α (`speculative.coupled_acceptance`, a profile's ``coupled`` block) is
the match probability averaged over every position of a target text. A run's coupled devices see
another rate, for the reason the standard rule does (`run_verdicts`): acceptance is not i.i.d.
along a draft and a run tests only the positions its drafts reach. On smollm2-135m the coupled
runs of the forecast check kept about 2% more tokens per coupled round than the i.i.d. model at
the teacher-forced ratio × the standard run α, so the coupled α is measured where it is used, as
the standard one is: testbed runs on seeds kept apart from those the forecast is checked on.

A coupled round's verdict is fixed by the shared noise once the draft is: there is no E[tokens |
draft] to average the luck out (the standard rule's ``expected_tokens``), so the fit uses the
tokens the round kept (rounds.jsonl records them as its ``expected_tokens`` too). A round cut
short by EOS cannot be told from a mismatch (the coupled rule sends no rejection): a job's last
round is kept only where the job reached its token budget (γ is capped to fit the budget, so that
round was not cut). The rounds so left out are, for a job that ended by EOS, the one covering the
EOS position, which is length-biased: simulated, the fit reads low by about 0.011 × the share of
jobs ending by EOS (0.0024 at 20%, 0.0054 at 50%, 3,000 runs at α = 0.8); counting those rounds
cut reads lower still. In the smollm2-135m calibration runs about 7% of the jobs that ended did
so by EOS.

``multispin profiles coupled-alpha`` writes ``data/profiles/<pair>/coupled-runs-<draft>-<policy>.json``
(`coupled_runs_document`); `shipped.shipped_coupled_alpha` reads it, and the testbed plans its
coupled devices on it (`experiments.testbed.prior_alpha`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from multispin.acceptance.run_verdicts import DraftRound, runs_identity, tokens_rates
from multispin.acceptance.shipped import COUPLED_RUNS_SCHEMA

COUPLED_RUNS_METHOD = (
    "acceptance/coupled_runs.py: per task, the α with Σ E[N](γ_r, α) = Σ tokens_r over every coupled drafting "
    "round of testbed runs (a job's last round only where it reached its budget); 95% bootstrap interval over runs"
)


def coupled_draft_rounds(rows: Sequence, tasks: Mapping[str, str], max_new_tokens: int | None) -> list[DraftRound]:
    """Every coupled drafting round of a run with the tokens it kept (module docstring), from its
    round rows (`RoundRow`; job ids k + K·j as `run_verdicts.job_verdicts`) and its task per device."""
    k = len(tasks)
    spent: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, row in enumerate(rows):
        for dev_id, tokens in row.tokens_gained.items():
            spent[int(dev_id)] = spent.get(int(dev_id), 0) + int(tokens)
            last[int(dev_id)] = i
    out = []
    for i, row in enumerate(rows):
        for dev_id in row.coupled:
            gamma, tokens = int(row.gamma.get(dev_id, 0)), int(row.tokens_gained.get(dev_id, 0))
            if gamma == 0 or tokens < 1:
                continue
            if last[int(dev_id)] == i and (max_new_tokens is None or spent[int(dev_id)] < max_new_tokens):
                continue  # the job's last round, maybe cut by EOS
            out.append(DraftRound(tasks[str(int(dev_id) % k)], gamma, float(tokens)))
    return out


def coupled_runs_document(inputs: Mapping) -> dict:
    """The coupled-runs file of ``inputs``: ``pair``, ``draft``, ``sampling`` and ``runs``, one per
    run (``seed``, ``policy``, ``tasks`` and ``rounds``, [task, γ, tokens] each). A seed run twice
    under one policy counts once."""
    runs = list({(r["seed"], r["policy"]): r for r in inputs["runs"]}.values())
    return {
        "schema": COUPLED_RUNS_SCHEMA,
        "schema_version": 1,
        "pair": inputs["pair"],
        "draft": inputs["draft"],
        "sampling": inputs["sampling"],
        "runs": runs_identity(runs),
        "method": COUPLED_RUNS_METHOD,
        "tasks": tokens_rates(runs),
    }
