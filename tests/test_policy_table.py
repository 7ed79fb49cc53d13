"""One table of policies (`multispin.vocabulary.POLICY_TABLE`): adding a policy is one row there
plus its implementation.

Two checks keep it so:

- ``PLACES`` lists every table that is keyed by a policy, each with the policies it must hold (by
  their properties in the table); `missing` fails a place that lacks one. Every place derives from
  the table, so a row added to the table reaches every place (checked on a copy of the package with
  one more row); the negative control adds a row to the table after the places were built and shows
  that every place is reported.
- ``NAMED`` lists every module whose code still spells a policy's name (outside docstrings), each
  with why it may; a module that starts spelling one (a new hand-written table) fails the test.

Run as a script, ``python tests/test_policy_table.py [SRC] [NAME ...]`` prints the modules of SRC
(default: this checkout's package) whose code spells NAME (default: every policy but the reference).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import get_args

from multispin.commands import sweep as sweep_command
from multispin.experiments import capacity, demo, sweep
from multispin.experiments.reproduce import _figure, csi, drop, fig_capacity, fig_channel_knowledge, fig_users, stats
from multispin.experiments.reproduce.columns import METRIC_DOCS
from multispin.experiments.reproduce.long_form import column, gain_column, per_drop_gain_column
from multispin.vocabulary import (
    DEMO_POLICIES,
    LEAD_POLICIES,
    POLICY_TABLE,
    POLICY_VERIFY,
    REFERENCE,
    RUN_POLICIES,
    STANDARD,
    Policy,
    RunPolicy,
)

SRC = Path(__file__).resolve().parents[1] / "src"


def _drop_gains() -> set[str]:
    row = {"goodput": 1.0, **{column("goodput", p): 1.0 for p in POLICY_TABLE if p != REFERENCE}}
    gains = stats.with_drop_gains(row)
    return {p for p in POLICY_TABLE if per_drop_gain_column(p) in gains}


def _computed(p: Policy) -> bool:
    return p.group is not None


def _baseline(p: Policy) -> bool:
    return p.group in ("modes", "drafts")


# place -> (the policies it holds, which policies of the table it must hold)
PLACES: dict[str, tuple[Callable[[], Iterable[str]], Callable[[Policy], bool]]] = {
    "vocabulary.RUN_POLICIES": (lambda: RUN_POLICIES, lambda p: p.run),
    "vocabulary.RunPolicy": (lambda: get_args(RunPolicy), lambda p: p.run),
    "vocabulary.POLICY_VERIFY": (lambda: POLICY_VERIFY, lambda p: p.run and p.verify != STANDARD),
    "vocabulary.DEMO_POLICIES": (lambda: DEMO_POLICIES, lambda p: p.demo_rank is not None),
    "vocabulary.LEAD_POLICIES": (lambda: LEAD_POLICIES, lambda p: p.lead and p.demo_rank is not None),
    "demo._STYLE": (lambda: demo._STYLE, lambda p: p.demo_rank is not None),
    "sweep.SWEEP_POLICIES": (lambda: sweep.SWEEP_POLICIES, _computed),
    "sweep.OBJECTIVE_POLICIES": (lambda: sweep.OBJECTIVE_POLICIES, lambda p: "objective" in p.kinds),
    "sweep.COUPLED_SHARE": (lambda: sweep.COUPLED_SHARE, lambda p: _computed(p) and p.verify != STANDARD),
    "commands.sweep.POLICY_NAMES": (lambda: sweep_command.POLICY_NAMES.split(", "), _computed),
    "drop._MODE_POLICIES": (lambda: drop._MODE_POLICIES, lambda p: p.group == "modes"),
    "csi.CSI_POLICIES": (lambda: csi.CSI_POLICIES, lambda p: "csi" in p.kinds),
    "capacity.POLICY_MODES": (lambda: capacity.POLICY_MODES, lambda p: "capacity" in p.kinds),
    "fig_capacity.LABELS": (lambda: fig_capacity.LABELS, lambda p: "capacity" in p.kinds),
    "fig_users.SCHEMES": (lambda: [s[2] for s in fig_users.SCHEMES], lambda p: p.group in ("plan", "modes")),
    "_figure.STYLE": (lambda: set(_figure.STYLE) - {"bound"}, _computed),
    "stats.GAINS_OF_MEANS (goodput)": (
        lambda: {p for p in POLICY_TABLE if gain_column(p) in stats.GAINS_OF_MEANS},
        lambda p: _computed(p) and p.name != REFERENCE,
    ),
    "stats.GAINS_OF_MEANS (service)": (
        lambda: {p for p in POLICY_TABLE if gain_column(p, metric="worst") in stats.GAINS_OF_MEANS},
        _baseline,
    ),
    "stats.GAINS_OF_MEANS (knowledge)": (
        lambda: {p for p in POLICY_TABLE if gain_column(p, "naive") in stats.GAINS_OF_MEANS},
        lambda p: "csi" in p.kinds and p.name != REFERENCE,
    ),
    "stats.with_drop_gains": (_drop_gains, _baseline),
    "columns.METRIC_DOCS (capacity)": (
        lambda: {p for p in POLICY_TABLE if column("capacity_sum", p) in METRIC_DOCS},
        lambda p: "capacity" in p.kinds,
    ),
    "columns.METRIC_DOCS (knowledge)": (
        lambda: {p for p in POLICY_TABLE if column("gamma", p, "naive") in METRIC_DOCS},
        lambda p: "csi" in p.kinds,
    ),
    "fig_channel_knowledge.METRICS": (
        lambda: {p for p in POLICY_TABLE if column("goodput", p, "robust") in fig_channel_knowledge.METRICS},
        lambda p: "csi" in p.kinds,
    ),
}


def missing(table: Mapping[str, Policy]) -> list[str]:
    """``place: policy`` for each policy of ``table`` a place lacks, and for each name a place holds
    that ``table`` does not have."""
    out = []
    for place, (held, wanted) in PLACES.items():
        have = set(held())
        out += [f"{place}: {p.name}" for p in table.values() if wanted(p) and p.name not in have]
        out += [f"{place}: {name} is not in the table" for name in sorted(have - set(table))]
    return out


def test_every_place_holds_every_policy_it_must():
    assert missing(POLICY_TABLE) == []


# two rows a later wave might add: a one-link rule compared everywhere, and a coupled lead
_NEW_ROWS = (
    "Policy('all_new', 'all-new', 'all_ul', group='modes', kinds=('objective', 'csi', 'capacity'), "
    "demo_rank=6, look=('C8', 'P', ':', False), run_look=(':', 'P', 'tab:olive'))",
    "Policy('coupled_new', 'coupled-new', verify='choose', group='coupled', demo_rank=7, lead=True, "
    "look=('C8', 'X', '-', True), run_look=('-', 'X', 'tab:cyan'))",
)


def _with_new_rows() -> dict[str, Policy]:
    rows = [eval(r, {"Policy": Policy}) for r in _NEW_ROWS]  # the same text the copy of the package gets
    return {**POLICY_TABLE, **{p.name: p for p in rows}}


def test_a_place_that_misses_a_new_policy_is_reported():
    """Negative control: the table with two more rows, against the places built from the table
    without them (what a hand-written table would be): every place is reported, and nothing else."""
    found = missing(_with_new_rows())
    assert {f.split(": ")[0] for f in found} == set(PLACES)
    assert all(f.endswith((": all_new", ": coupled_new")) for f in found), found


def test_a_row_in_the_table_reaches_every_place(tmp_path):
    """The structure: a copy of the package whose vocabulary has the two rows more (and their names
    in the RunPolicy literal), and nothing else changed, passes `missing` for its own table."""
    copy = tmp_path / "src"
    shutil.copytree(SRC / "multispin", copy / "multispin", ignore=shutil.ignore_patterns("__pycache__"))
    words = copy / "multispin" / "vocabulary.py"
    text = words.read_text()
    end = text.index("\n    )\n}\n", text.index("POLICY_TABLE: dict[str, Policy] = {"))
    text = text[:end] + "".join(f"\n        {r}," for r in _NEW_ROWS) + text[end:]
    # a run policy's name also goes in the RunPolicy literal, a few lines above (typing needs it spelt)
    literal = 'RunPolicy = Literal["adaptive", '
    words.write_text(text.replace(literal, literal + '"all_new", "coupled_new", ', 1))
    script = (
        "import test_policy_table as t, multispin.vocabulary as v\n"
        f"assert v.__file__.startswith({str(copy)!r}), v.__file__\n"
        "assert {'all_new', 'coupled_new'} <= set(v.POLICY_TABLE)\n"
        "print(t.missing(v.POLICY_TABLE))\n"
    )
    env_path = f"{copy}:{Path(__file__).parent}"
    run = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": env_path},
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[]"


def test_the_new_rows_are_not_in_the_table_yet():
    """The rows the two tests above add are new (else the negative control would prove nothing)."""
    assert not {"all_new", "coupled_new"} & set(POLICY_TABLE)


# ----------------------------------------------------------------------------- where a name is spelt

# Every module whose code spells a policy's name outside a docstring (a string such as "all_ul" or
# "goodput_three_way"), with why it may. Everything else reads POLICY_TABLE.
NAMED = {
    "vocabulary": "the table itself",
    # the reference plan as a default argument or option value
    "api": "default policy arguments (the reference) and the sweep's default policies",
    "commands.testbed": "the default --policy and its help text",
    "commands.sweep": "the default --policies value",
    "experiments.testbed": "TestbedConfig's default policy",
    "runtime.round.planner": "the planner's default policy",
    # a study or figure about particular policies: its choice of them, its panels and prose
    "experiments.sweep": "DEFAULT_POLICIES, a choice (a new policy need not be a default)",
    "experiments.demo_defaults": "the study's two policies, a choice",
    "experiments.demo": "target-only as the demo figure's line and the rows' vs_target_only key",
    "experiments.coupled_study": "the study 'UL, DL or neither' and its table's columns",
    "experiments.acceptance_table": "the forecast check's documented command lines, quoted on the page",
    "experiments.reproduce.claims": "the paper's claims, each about named baselines",
    "experiments.reproduce.columns": "the prose that documents each baseline's columns",
    "experiments.reproduce.stats": "the paper's greedy against the draft-length baselines (claims 6, 7)",
    "experiments.reproduce.identification": "the identification table's chosen columns",
    "experiments.reproduce.fig_draft_schemes": "figure 3, about the draft-length baselines",
    "experiments.reproduce.fig_channel_knowledge": "figure 8's panels for all-UL and all-DL",
    # the implementations: mode rules and draft-length baselines of the optimiser
    "optimize.baselines": "the draft-length baselines",
    "optimize.draft_lengths": "the draft-length baselines",
    "optimize.fast_search": "the draft-length baselines as search starts",
    "optimize.certified": "the certified search refuses the random mode rule",
    "optimize.reactive": "the one-link mode rules",
    "optimize.plan": "the plan report's baselines (adaptive, all-coupled)",
}


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, kinds)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }


def named_modules(src: Path, names: Iterable[str], exact: Iterable[str] = ()) -> dict[str, int]:
    """Module (dotted, below the package) -> how many strings of its code, outside docstrings,
    spell one of ``names`` as a word (``goodput_all_ul`` spells ``all_ul``) or equal one of ``exact``."""
    word = re.compile(r"(?<![A-Za-z])(" + "|".join(map(re.escape, names)) + r")(?![A-Za-z])")
    exact = set(exact)
    out = {}
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        docs = _docstrings(tree)
        hits = sum(
            1
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant)
            and isinstance(n.value, str)
            and id(n) not in docs
            and (n.value in exact or word.search(n.value))
        )
        if hits:
            out[".".join(path.relative_to(src).with_suffix("").parts)] = hits
    return out


# the policies' names as words; the reference and "random" also name other things (a mode rule,
# an English word), so only strings equal to them count
_WORDS = tuple(p for p in POLICY_TABLE if p not in (REFERENCE, "random"))


def test_only_the_listed_modules_spell_a_policy():
    found = set(named_modules(SRC / "multispin", _WORDS, exact=(REFERENCE,)))
    assert found - set(NAMED) == set(), "spelt outside the table (derive it from vocabulary.POLICY_TABLE)"
    assert set(NAMED) - found == set(), "listed but no longer spelt: drop it from NAMED"


def test_the_name_scan_sees_a_table_and_skips_docstrings(tmp_path):
    """Negative control: a dict keyed by a policy and a column name are found; a docstring, a
    comment and an unrelated word are not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text('"""all_ul in a docstring."""\nX = {"all_ul": 1}\n')
    (pkg / "b.py").write_text('def f():\n    """goodput_all_ul"""\n    return "goodput_all_ul"\n')
    (pkg / "c.py").write_text('# all_ul\nY = "fall_ultimate adaptive_x"\n')
    assert named_modules(pkg, _WORDS, exact=(REFERENCE,)) == {"a": 1, "b": 1}


if __name__ == "__main__":
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else SRC / "multispin"
    names = sys.argv[2:] or _WORDS
    for module, hits in named_modules(src, names).items():
        print(f"{module} ({hits})")
    print(len(named_modules(src, names)), "modules")
