"""Acceptance: every kind of α, where it is measured, what is shipped, and what plans use.

**Which α does the demo plan with, and where does it come from?** Each device starts from the
*planned* α of its (draft, task) under the run's sampling policy (`shipped.device_alpha(kind=
"planned")`, called by `experiments.testbed.prior_alpha` when the run is set up):

1. the **tokens-matched run α** where the package ships a run-verdicts file for the pair and draft
   (``data/profiles/<pair>/run-verdicts-<draft>-<policy>.json``): the rate whose i.i.d. tokens per
   drafting round are what real testbed runs kept, fitted on runs apart from those the forecast is
   checked on (`run_verdicts.tokens_matched_alpha`). For smollm2-135m's q5g64 draft at T = 1,
   top-k 1024 that is the α the default demo prints (chat 0.82, code 0.89);
2. else the **shrunk profile α**: the teacher-forced α of the measured profile
   (``acceptance-<draft>-<task>-<policy>.json``, written by ``multispin measure --out``) plus its
   verdict gap, shrunk across every shipped profile (`shrinkage.shrunk_alpha`);
3. else the scenario's own α, which the run labels *assumed*.

A device the run verifies under the coupled rule (policies ``all_coupled``, ``three_way``) plans on
its own coupled α (`shipped.coupled_prior`): the **coupled tokens-matched run α** where the package
ships a coupled-runs file for the pair and draft (``coupled-runs-<draft>-<policy>.json``,
`coupled_runs`); else the planned α × the draft's **teacher-forced coupled / standard ratio** (its
profile's ``coupled`` block; 1 under greedy decoding); else the planned α × the assumed ratio
(`system.coupled_alpha`, labelled ASSUMED).

While it runs, each device's α is re-estimated from its verdicts (the *online* α,
`runtime.round.acceptance_estimate`), and its jobs' α spread around it by the measured
between-prompt spread (`spread`).

The kinds, each defined once with its estimator, are in `kinds`; `shipped` is the only reader of
the shipped files (read on first use, cached, never at import); `shrinkage`, `spread`,
`run_verdicts` and `coupled_runs` hold the fitting code. The spread, run-verdicts and coupled-runs
files are written from runs by ``multispin profiles`` (`experiments.profiles`), with their
provenance and inputs (`provenance`);
``--check`` recomputes them (`recompute`). docs/acceptance.md is the table of every shipped α.
"""
