"""The measured acceptance table: shipped profiles, docs/acceptance.md, the presets on
measured acceptance, and the cost-of-i.i.d. study."""

from __future__ import annotations

from pathlib import Path

import pytest

from multispin.experiments import acceptance_table as at
from multispin.experiments.acceptance import policy_label
from multispin.models.registry import REGISTERED
from multispin.system.scenario import MEASURED_PRESETS, MEASURED_TASKS, get_preset, preset_names

ROOT = Path(__file__).resolve().parents[2]
VOCAB = {"smollm2-135m": 49_152, "qwen2.5-coder-0.5b": 151_665, at.CROSS_PAIR: 151_665}


def _profiles():
    return [p for pair in at.PAIRS for p in at.table_profiles(pair)]


def test_the_docs_table_is_current_with_the_shipped_profiles():
    assert (ROOT / at.DOC_PATH).read_text() == at.render(), (
        "docs/acceptance.md is stale: run `python -m multispin.experiments.acceptance_table render`"
    )


@pytest.mark.parametrize(
    "profile", _profiles(), ids=lambda p: f"{p['pair']}/{p['draft']}/{p['source']}/{policy_label(p['sampling'])}"
)
def test_shipped_profiles_are_what_their_cell_says(profile):
    pair = profile["pair"]
    assert profile["vocab_size"] == VOCAB[pair]
    # a registered pair's RTN drafts; a cross-vocabulary pair's one draft is the model it names
    drafts = REGISTERED[pair].default_drafts or (pair.split(":")[0],)
    assert profile["draft"] in drafts
    cell = next(
        c
        for c in at.GRID
        if c.pair == pair
        and c.source == profile["source"]
        and policy_label(c.sampling) == policy_label(profile["sampling"])
    )
    assert profile["draft"] in cell.drafts
    assert profile["num_prompts"] == cell.prompts and profile["verdict_prompts"] == cell.verdict_prompts
    assert profile["draft_len"] == at.GAMMA and profile["max_new_tokens"] == at.MAX_NEW_TOKENS
    lo, hi = profile["alpha_ci95"]
    assert lo <= profile["alpha"] <= hi
    assert profile["tasks"][at.SOURCE_LABELS[profile["source"]]]["alpha"] == profile["alpha"]


def test_measured_presets_carry_the_profiles_numbers():
    offered = [n for n in MEASURED_PRESETS if n in preset_names()]
    for name in offered:
        base, pair, draft, _ = MEASURED_PRESETS[name]
        sc = get_preset(name)
        assert sc.tasks.assumed is False and "MEASURED" in sc.tasks.source
        assert set(sc.tasks.acceptance) == set(MEASURED_TASKS)
        assert sc.radio == get_preset(base).radio and sc.compute == get_preset(base).compute
        assert sc.payload.vocab_size == VOCAB[pair]
        table = {}
        for p in at.table_profiles(pair, at.SAMPLED):
            if p["draft"] == draft:
                table.update({t: e["alpha"] for t, e in p["tasks"].items()})
        for task in MEASURED_TASKS:
            assert sc.tasks.acceptance[task] == pytest.approx(table[task], abs=5e-5)


def _profile(alpha: float, rates: list[float]) -> dict:
    return {"draft": "d", "source": "humaneval", "sampling": at.SAMPLED, "alpha": alpha, "per_position_rate": rates}


def test_iid_cost_is_zero_when_the_profile_is_iid_and_positive_when_it_decays():
    iid = at.iid_assumption_cost([_profile(0.8, [0.8] * at.GAMMA)], drops=2, n_saa=200)
    assert iid["gain_pct"] == 0.0 and all(r["gain_pct"] == 0.0 for r in iid["rows"])
    # Negative control: acceptance that collapses after position 2 while α says 0.8. The i.i.d.
    # plan drafts long; the per-position plan knows better and must not lose to it.
    decay = at.iid_assumption_cost([_profile(0.8, [0.8, 0.8] + [0.2] * (at.GAMMA - 2))], drops=2, n_saa=200)
    assert all(r["gain_pct"] >= 0.0 for r in decay["rows"])
    assert decay["gain_pct"] > 1.0
    assert decay["iid_forecast_error_pct"] > 1.0  # the i.i.d. plan promised more than it gets


def test_unreached_positions_take_alpha():
    p = _profile(0.7, [0.9, None, float("nan")])
    assert at.per_position_rates(p, 4) == [0.9, 0.7, 0.7, 0.7]


def test_cell_commands_are_the_measure_cli():
    cmd = at.GRID[0].command()
    assert cmd[:2] == ["multispin", "measure"] and "--verdict-prompts" in cmd and "--top-k" in cmd
    assert cmd[cmd.index("--out") + 1].endswith(at.GRID[0].pair)


def test_main_rejects_an_unknown_verb(capsys):
    assert at.main(["nope"]) == 2
    assert "usage" in capsys.readouterr().err


@pytest.mark.slow
def test_reproduce_quick_on_measured_acceptance_writes_what_the_paper_scenario_does(tmp_path):
    """`reproduce --quick --scenario measured-smollm2-a100` gives the same files and columns as the
    paper's scenario, and `--compare-with` sets the two runs' claim verdicts side by side."""
    from typer.testing import CliRunner

    from multispin.cli import app

    assert "measured-smollm2-a100" in preset_names(), "the q5g64 sampled profiles are shipped"
    outs = {}
    for scenario in ("paper-qwen", "measured-smollm2-a100"):
        out = outs[scenario] = tmp_path / scenario
        args = [
            "reproduce",
            "--quick",
            "--scenario",
            scenario,
            "--figure",
            "fig1_mode_split",
            "--out",
            str(out),
            "--workers",
            "2",
            "--no-progress",
        ]
        if scenario != "paper-qwen":
            args += ["--compare-with", str(outs["paper-qwen"])]
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
    a, b = (sorted(p.name for p in o.iterdir() if p.is_file()) for o in outs.values())
    assert a == b
    for name in a:
        if name.endswith(".csv"):
            heads = [(o / name).read_text().splitlines()[0] for o in outs.values()]
            assert heads[0] == heads[1], name
    report = (outs["measured-smollm2-a100"] / "report.md").read_text()
    assert "## Claims beside" in report and "(scenario paper-qwen)" in report
    assert "MEASURED acceptance" in report or "measured" in report.lower()


class _Measured(Exception):
    """Stops `multispin measure` once it has built its configuration."""


def test_each_cell_measures_what_its_documented_command_measures(monkeypatch):
    """`measure_missing` measures a cell in this process (`Cell.config`); the command the page
    shows for it (`Cell.command`) must build the same configuration. Negative control: a cell
    with one more prompt does not."""
    from dataclasses import replace

    from multispin import cli
    from multispin.commands import _flag_groups
    from multispin.experiments import acceptance
    from multispin.models import placement, registry

    built = []

    def measure(config, pair=None, progress=None):
        built.append(config)
        raise _Measured

    monkeypatch.setattr(acceptance, "measure", measure)
    monkeypatch.setattr(registry, "resolve_pair", lambda *a, **k: object())
    monkeypatch.setattr(placement, "place_pair", lambda pair, *a, **k: pair)
    monkeypatch.setattr(_flag_groups, "set_threads", lambda threads: None)  # torch's threads stay the suite's
    for cell in at.GRID:
        with pytest.raises(_Measured):
            cli.main(cell.command()[1:])
        assert built[-1] == cell.config(), cell
        assert built[-1] != replace(cell, prompts=cell.prompts + 1).config()
