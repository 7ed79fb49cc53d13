"""Realised / forecast goodput of the testbed, and how much of the gap each part of the model closes
(the figures of docs/system-model.md §5.5). Real-model runs: minutes each.

  python tools/forecast_gap.py runs smollm2-135m adaptive 0,1,2,3 [pool [KEEP]]  # realised + forecasts per seed
  python tools/forecast_gap.py table runs-*.jsonl                          # the check: per policy, pooled by seed
  python tools/forecast_gap.py decompose KEEP/*                            # where the gap sits, per policy
  python tools/forecast_gap.py by-token KEEP/*                             # acceptance by response token, per task
  python tools/forecast_gap.py parts smollm2-135m adaptive 0,1,2,3        # F0..F4 per seed (no run)
  python tools/forecast_gap.py given-channel smollm2-135m adaptive 0,1,2  # F4 given the run's channel (no run)
  python tools/forecast_gap.py tiny ALPHA 0,1,2,3,4,5 BUDGET adaptive TAG # tiny pair, 8 chat devices
  python tools/forecast_gap.py verdicts smollm2-135m chat 48 1 > v.json    # per-prompt verdicts (minutes)
  multispin profiles spread --pair smollm2-135m v-chat.json v-code.json   # fit, write the spread file
  python tools/forecast_gap.py jobs RUN_DIR...                            # the same fit on testbed runs
  python tools/forecast_gap.py calibrate smollm2-135m adaptive,all_dl,all_ul 100,...,147 > cal.jsonl  # in-run verdicts
  multispin profiles run-alpha --pair smollm2-135m cal.jsonl       # pool them, write the run-verdicts file
  multispin profiles run-alpha --pair PAIR KEEP/*                   # the same from run folders kept by `runs`,
                                                                    # + the tokens-matched α the planner uses
  python tools/forecast_gap.py truth smollm2-135m adaptive 0,1,2 chat=0.818,code=0.8945  # F4 at another truth

F0: teacher-forced α, prompts that never end, no estimator; F1: run α; F2: + each job's budget;
F3: + the online estimator; F4: + each prompt's own α, drawn from the measured between-prompt
spread (the testbed's forecast now). One JSON line per seed. `truth`: F4 with the planner starting
from the run α, as the runs did, and the jobs' acceptance at the given rate per task (e.g. what
the runs' verdicts showed, `jobs`): how much of a gap a prior that is off explains.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from multispin.acceptance.run_verdicts import JobVerdicts, job_verdicts, pool_jobs, verdicts_by_response_token
from multispin.acceptance.shipped import device_alpha
from multispin.acceptance.spread import VERDICT_GAMMA, fit_jobs
from multispin.experiments.acceptance import _runs
from multispin.experiments.forecast import forecast_goodput
from multispin.experiments.paired import ratio_of_sums
from multispin.experiments.profiles import calibration_line, run_folder
from multispin.experiments.testbed import (
    TestbedConfig,
    build_scenario,
    device_spread,
    forecast_rounds,
    payload_choice,
    run_testbed,
    with_measured_acceptance,
)
from multispin.models.prompts import assign_tasks, encode_prompt, load_prompts
from multispin.models.registry import resolve_pair
from multispin.progress import reporter
from multispin.system.scenario_io import resolve_scenario


def runs(pair: str, policy: str, seeds: list[int], runner: str = "fork", keep: str | None = None) -> None:
    """One JSON line per seed; ``keep``: a folder that keeps each run's own (``POLICY-SEED/``), for
    `decompose` and `by-token`."""

    for s in seeds:
        t = time.time()
        out = Path(keep) / f"{policy}-{s}" if keep else None
        cfg = TestbedConfig.make(
            pair=pair, devices=8, rounds=20, max_new_tokens=64, policy=policy, seed=s, runner=runner, out=out
        )
        sm = run_testbed(cfg).summary
        fig, f, model, gap = sm.figures, sm.forecast, sm.conditioned, sm.estimate_gap
        assert f is not None and model is not None and gap is not None  # a built-in policy run to its end
        print(
            json.dumps(
                {
                    "seed": s,
                    "policy": policy,
                    "wall": round(time.time() - t, 1),
                    "real": fig.goodput_tokens_per_s,
                    "cond": fig.acceptance_conditioned_goodput_tokens_per_s,
                    # T_comm conditioned on the drafts too: the acceptance test's whole luck out
                    "full": fig.outcome_conditioned_goodput_tokens_per_s,
                    "forecast": f.tokens_per_s,
                    "blind": f.budget_blind_tokens_per_s,
                    # where a gap sits: tokens over T_comp alone (the air free), both sides
                    "free": fig.free_comm_tokens_per_s,
                    "forecast_free": f.free_comm_tokens_per_s,
                    "t_comp": fig.mean_t_comp_s,
                    "t_comm": fig.mean_t_comm_s,
                    "tokens_per_round": fig.tokens_per_round,
                    "mean_gamma": fig.mean_gamma,
                    # the model at the run's own plans and channels (its prior α)
                    "model_t_comm": model.analytic_t_comm_s,
                    "model_tokens_per_round": model.analytic_tokens_per_round,
                    # the forecast's own rounds, and how its planner and the run's drafted
                    "forecast_tokens_per_round": f.tokens_per_round,
                    "forecast_t_comp_s": f.t_comp_s,
                    "forecast_t_comm_s": f.t_comm_s,
                    "forecast_mean_gamma": f.mean_gamma,
                    "forecast_drafting_share": f.drafting_share,
                    "forecast_estimate_minus_prior_mean": f.estimate_gap.mean,
                    "forecast_estimate_minus_prior_sd": f.estimate_gap.sd,
                    "drafting_share": fig.drafting_share,
                    "estimate_minus_prior_mean": gap.mean,
                    "estimate_minus_prior_sd": gap.sd,
                }
            ),
            flush=True,
        )


def table(files: list[str]) -> None:
    """The forecast check from `runs` files: realised (and acceptance-conditioned: `cond` the tokens,
    `full` the tokens and T_comm) over the forecast and over the budget-blind forecast, per policy
    over its seeds and pooled with a seed's policies as one cluster (they share its prompts and
    channel), each the ratio of sums with its 95% interval (`paired.ratio_of_sums`), and the
    per-seed sd of the ratio. A seed run twice counts once."""

    runs = {}
    for f in files:
        for line in Path(f).read_text().splitlines():
            if line.startswith("{") and '"real"' in line:
                x = json.loads(line)
                runs[(x["seed"], x["policy"])] = x
    policies = sorted({p for _, p in runs})
    for num, den in (
        ("real", "forecast"),
        ("cond", "forecast"),
        ("full", "forecast"),
        ("real", "blind"),
        ("full", "blind"),
    ):
        rows = [x for x in runs.values() if x.get(num) is not None]
        if not rows:
            continue
        print(f"{num} / {den}")
        for group, members, clusters in [
            *((p, [x for x in rows if x["policy"] == p], None) for p in policies),
            ("pooled", rows, [x["seed"] for x in rows]),
        ]:
            if len(members) < 2:
                continue
            r = ratio_of_sums([x[num] for x in members], [x[den] for x in members], clusters)
            sd = np.std([x[num] / x[den] for x in members], ddof=1)
            print(
                f"  {group:9s} {len(members):3d} runs {r.estimate:.3f} ({r.low:.3f}-{r.high:.3f})  "
                f"per-run sd {100 * sd:.1f}%"
            )


class _SeedModel:
    """One seed's testbed set-up as the forecast sees it (K = 8, 20 rounds, 64-token prompts): the
    devices' drafts and tasks, the payload, the scenario at the run α and the measured spread, and
    the testbed's forecast on any scenario built from it."""

    def __init__(self, pair, policy: str, seed: int):

        cfg = TestbedConfig.make(pair=pair.name, devices=8, rounds=20, max_new_tokens=64, policy=policy, seed=seed)
        self.policy, self.seed, self.rounds = policy, seed, forecast_rounds(cfg)  # the testbed's
        self.drafts, self.tasks = [pair.default_draft] * 8, assign_tasks(8, cfg.tasks, seed)
        self.choice = payload_choice(cfg, pair.vocab_size)
        self.base = build_scenario(cfg)
        self.run, _ = with_measured_acceptance(self.base, pair.name, self.drafts, self.tasks, self.choice.sampling)
        self.spread = device_spread(pair.name, self.drafts, self.tasks, self.choice.sampling)

    def forecast(self, scenario, rounds: int | None = None, **kw) -> float:

        rounds = rounds or self.rounds
        return forecast_goodput(scenario, self.choice.wire, self.policy, rounds=rounds, seed=self.seed, **kw)[
            "forecast_tokens_per_s"
        ]


BUDGETS = dict(max_new_tokens=64, horizon=20)


def parts(pair_name: str, policy: str, seeds: list[int]) -> None:

    pair = resolve_pair(pair_name)
    for seed in seeds:
        m = _SeedModel(pair, policy, seed)
        tf = m.base.override(
            {
                "devices.acceptance": [
                    device_alpha(pair_name, d, t, m.choice.sampling) for d, t in zip(m.drafts, m.tasks)
                ]
            }
        )
        print(
            json.dumps(
                {
                    "seed": seed,
                    "policy": policy,
                    "F0": m.forecast(tf),
                    "F1": m.forecast(m.run),
                    "F2": m.forecast(m.run, **BUDGETS),
                    "F3": m.forecast(m.run, online=True, **BUDGETS),
                    "F4": m.forecast(m.run, online=True, spread=m.spread, **BUDGETS),
                }
            ),
            flush=True,
        )


def given_channel(pair_name: str, policy: str, seeds: list[int]) -> None:
    """F4 and the budget-blind forecast, each as the testbed computes it and again given the run's
    own channel rounds (`forecast_goodput(channels="run")`): realised / forecast without the
    channel's luck (no run; the seed rebuilds the run's set-up and channel)."""

    pair = resolve_pair(pair_name)
    for seed in seeds:
        m = _SeedModel(pair, policy, seed)
        f4 = dict(online=True, spread=m.spread, **BUDGETS)
        blind = dict(rounds=40)  # the testbed's budget-blind forecast: 40 rounds, prompts never end
        print(
            json.dumps(
                {
                    "seed": seed,
                    "policy": policy,
                    "F4": m.forecast(m.run, **f4),
                    "F4_run_channels": m.forecast(m.run, channels="run", **f4),
                    "blind": m.forecast(m.run, **blind),
                    "blind_run_channels": m.forecast(m.run, channels="run", horizon=20, **blind),
                }
            ),
            flush=True,
        )


def truth(pair_name: str, policy: str, seeds: list[int], rates: dict[str, float]) -> None:

    pair = resolve_pair(pair_name)
    for seed in seeds:
        m = _SeedModel(pair, policy, seed)
        forecast = m.forecast(m.run, online=True, spread=m.spread, truth_alpha=[rates[t] for t in m.tasks], **BUDGETS)
        print(json.dumps({"seed": seed, "policy": policy, "rates": rates, "F4_truth": forecast}))


def tiny(alpha: float, seeds: list[int], budget: int, policy: str, tag: str) -> None:

    sc = resolve_scenario("paper-qwen").override({"devices.count": 8, "devices.acceptance": [alpha] * 8})
    path = Path(f"/tmp/forecast-gap-{tag}.json")
    path.write_text(sc.model_dump_json())
    for s in seeds:
        sm = run_testbed(
            TestbedConfig.make(
                pair="tiny",
                devices=8,
                rounds=20,
                max_new_tokens=budget,
                policy=policy,
                runner="thread",
                scenario=str(path),
                seed=s,
                drafts=["close"],
                tasks="chat",
            )
        ).summary
        print(
            json.dumps(
                {
                    "tag": tag,
                    "seed": s,
                    "budget": budget,
                    "real": sm.goodput_tokens_per_s,
                    "cond": sm.figures.acceptance_conditioned_goodput_tokens_per_s,
                    # T_comm conditioned on the drafts too: the acceptance test's whole luck out
                    "full": sm.figures.outcome_conditioned_goodput_tokens_per_s,
                    "forecast": sm.forecast_tokens_per_s,
                    "blind": sm.forecast.budget_blind_tokens_per_s if sm.forecast else None,
                }
            ),
            flush=True,
        )


def verdicts(pair_name: str, task: str, prompts: int, seed: int) -> None:
    """Per-prompt verdict rounds (γ = 8, the draft continuing its own samples, as a run's devices
    do) of the pair's default draft on ``prompts`` prompts of a testbed task, under the testbed's
    sampling; prompts drawn with ``seed`` (keep it apart from the runs being forecast)."""
    from multispin.models.hf import HFBatchedLM, draft_batched

    pair = resolve_pair(pair_name)
    sampling = payload_choice(TestbedConfig.make(pair=pair_name, seed=seed), pair.vocab_size).sampling
    draft, pad = pair.default_draft, getattr(pair.tokenizer, "pad_token_id", None) or 0
    texts = load_prompts(task, prompts, seed, source="auto")
    # only the verdict rounds of `measure` (no target text, no teacher forcing): full-length rounds
    runs = _runs(
        lambda: HFBatchedLM(pair.target, pair.vocab_size, pad),
        lambda: draft_batched(pair, draft, pad),
        [encode_prompt(pair, t) for t in texts],
        VERDICT_GAMMA,
        sampling,
        seed,
        64,
        pair.eos_token_ids,
        32,
        reporter(None),
        "verdicts",
    )
    measured = [[r.num_accepted for r in log if r.draft_len == VERDICT_GAMMA] for _, log in runs]
    doc = {
        "pair": pair_name,
        "task": task,
        "seed": seed,
        "draft": draft,
        "sampling": sampling.model_dump(),
        "max_new_tokens": 64,
        "prompts": [{"accepted": [int(a) for a in accepted]} for accepted in measured],
    }
    print(json.dumps(doc))


def _fit_line(label: str, fit) -> str:
    return f"{label}: mean α {fit.mean:.3f}, between-prompt sd {fit.sd:.3f} (whole-job sd {fit.naive_sd:.3f}), {fit.jobs} jobs"


def jobs(run_dirs: list[str]) -> None:
    """The same fit on testbed runs' rounds, per task, and the in-run α those runs' verdicts show
    with its 95% interval over jobs (e.g. the K = 20 runs of `demo --study` against the shipped K = 8 rate)."""

    by_task: dict[str, list[JobVerdicts]] = {}
    for d in run_dirs:
        summary, rows = run_folder(Path(d))
        for job in job_verdicts(rows, summary.acceptance.tasks_by_device()):
            by_task.setdefault(job.task, []).append(job)
    for task, task_jobs in sorted(by_task.items()):
        r = pool_jobs(task_jobs)
        print(f"{task}: in-run α {r.alpha:.4f} ({r.ci95[0]:.4f}-{r.ci95[1]:.4f}), {r.jobs} jobs, {r.trials} trials")
        try:
            print(_fit_line(task, fit_jobs([job.rounds for job in task_jobs])))
        except ValueError as e:  # too few jobs for the between-prompt fit
            print(f"{task}: no spread fit ({e})")


def calibrate(pair: str, policies: list[str], seeds: list[int]) -> None:
    """Testbed runs (K = 8, 20 rounds, 64-token prompts, the pool runner) whose verdicts measure
    the α a run sees: one JSON line per seed with each job's (accepted, trials) per round. Seeds
    cycle through ``policies``; keep them apart from the seeds being forecast."""

    for i, s in enumerate(seeds):
        policy, t = policies[i % len(policies)], time.time()
        result = run_testbed(
            TestbedConfig.make(pair=pair, devices=8, rounds=20, max_new_tokens=64, policy=policy, seed=s, runner="pool")
        )
        line = calibration_line(result.summary, result.rounds)
        print(json.dumps({**line, "wall": round(time.time() - t, 1)}), flush=True)


def decompose(run_dirs: list[str]) -> None:
    """Where realised / forecast goes, per policy over its runs (kept by `runs ... KEEP`): the
    goodput ratio with its interval, then per round the tokens (realised; E[tokens | draft], the
    acceptance test's luck out; the model at the run's own plans and channel; the forecast's own
    plans), T_comp, T_comm (realised, the model at the run's plans, the forecast), how often and how
    long devices drafted, and how far the acceptance estimates the plans followed sat from the prior."""

    by_policy: dict[str, list] = {}
    for folder in run_dirs:
        sm, rows = run_folder(Path(folder))
        if sm.forecast is None or sm.conditioned is None or sm.estimate_gap is None:
            sys.exit(f"{folder}: summary.json has no forecast (a user's policy or an interrupted run)")
        expected = sum(sum(r.expected_tokens.values()) for r in rows) / len(rows)
        by_policy.setdefault(sm.policy, []).append((sm, expected))
    for policy, runs_ in sorted(by_policy.items()):
        fig = [x.figures for x, _ in runs_]
        fc = [x.forecast for x, _ in runs_]
        model = [x.conditioned for x, _ in runs_]
        gap = [x.estimate_gap for x, _ in runs_]

        def mean(values) -> float:
            return float(np.mean(list(values)))

        r = ratio_of_sums([x.goodput_tokens_per_s for x in fig], [x.tokens_per_s for x in fc])
        c = ratio_of_sums([x.acceptance_conditioned_goodput_tokens_per_s for x in fig], [x.tokens_per_s for x in fc])
        print(
            f"{policy}: {len(runs_)} runs, realised / forecast {r.estimate:.3f} ({r.low:.3f}-{r.high:.3f}), "
            f"conditioned / forecast {c.estimate:.3f} ({c.low:.3f}-{c.high:.3f})"
        )
        print(
            f"  tokens per round: realised {mean(x.tokens_per_round for x in fig):.2f}, E[tokens | draft] "
            f"{mean(e for _, e in runs_):.2f}, model at the run's plans "
            f"{mean(x.analytic_tokens_per_round for x in model):.2f}, forecast {mean(x.tokens_per_round for x in fc):.2f}"
        )
        print(
            f"  T_comp ms: realised {1e3 * mean(x.mean_t_comp_s for x in fig):.1f}, forecast "
            f"{1e3 * mean(x.t_comp_s for x in fc):.1f}; T_comm ms: realised {1e3 * mean(x.mean_t_comm_s for x in fig):.1f}, "
            f"model at the run's plans {1e3 * mean(x.analytic_t_comm_s for x in model):.1f}, forecast "
            f"{1e3 * mean(x.t_comm_s for x in fc):.1f}"
        )
        print(
            f"  drafting share {mean(x.drafting_share for x in fig):.3f} (forecast {mean(x.drafting_share for x in fc):.3f}), "
            f"mean γ {mean(x.mean_gamma for x in fig):.2f} ({mean(x.mean_gamma for x in fc):.2f}); estimate − prior: mean "
            f"{mean(x.mean for x in gap):+.3f} ({mean(x.estimate_gap.mean for x in fc):+.3f}), sd "
            f"{mean(x.sd for x in gap):.3f} ({mean(x.estimate_gap.sd for x in fc):.3f})"
        )


def by_token(run_dirs: list[str]) -> None:
    """Acceptance by where in its response a verdict falls (`verdicts_by_response_token`: the
    job's first token, its next seven, the rest), per task over the runs' jobs, each with its 95%
    bootstrap interval over jobs."""

    cells: dict[tuple[str, int], list] = {}
    for folder in run_dirs:
        sm, rows = run_folder(Path(folder))
        for key, jobs in verdicts_by_response_token(rows, sm.acceptance.tasks_by_device()).items():
            cells.setdefault(key, []).extend(jobs)
    for (task, start), jobs in sorted(cells.items()):
        r = pool_jobs(jobs)
        print(f"{task} from response token {start}: {r.alpha:.3f} ({r.ci95[0]:.3f}-{r.ci95[1]:.3f}), {r.trials} trials")


if __name__ == "__main__":
    verb, args = sys.argv[1], sys.argv[2:]
    if verb == "runs":
        runs(args[0], args[1], [int(s) for s in args[2].split(",")], *args[3:5])
    elif verb == "decompose":
        decompose(args)
    elif verb == "by-token":
        by_token(args)
    elif verb == "parts":
        parts(args[0], args[1], [int(s) for s in args[2].split(",")])
    elif verb == "verdicts":
        verdicts(args[0], args[1], int(args[2]), int(args[3]))
    elif verb == "jobs":
        jobs(args)
    elif verb == "calibrate":
        calibrate(args[0], args[1].split(","), [int(s) for s in args[2].split(",")])
    elif verb == "table":
        table(args)
    elif verb == "given-channel":
        given_channel(args[0], args[1], [int(s) for s in args[2].split(",")])
    elif verb == "truth":
        rates = {task: float(rate) for task, rate in (kv.split("=") for kv in args[3].split(","))}
        truth(args[0], args[1], [int(s) for s in args[2].split(",")], rates)
    elif verb == "tiny":
        tiny(float(args[0]), [int(s) for s in args[1].split(",")], int(args[2]), args[3], args[4])
    else:
        sys.exit(
            "verb: runs, table, parts, given-channel, calibrate, verdicts, jobs, truth or tiny (the shipped files: multispin profiles)"
        )
