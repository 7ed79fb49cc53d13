"""Help that teaches: real metavars, choices listed, defaults shown,
`--version`, `-h`; and the optimize table states P^dl the same way in header and footer."""

from __future__ import annotations

import re

import pytest

from multispin import __version__

VERBS = ["generate", "measure", "profile", "testbed", "demo", "optimize", "serve", "device", "reproduce", "sweep"]


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # one option per line, nothing wrapped


def test_version_and_short_help(multispin):
    res = multispin("--version")
    assert res.code == 0 and res.out.strip() == f"multispin {__version__}"
    res = multispin("-h")
    assert res.code == 0 and "optimize" in res.out and "scenario" in res.out


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_help_has_real_metavars(multispin, verb):
    res = multispin(verb, "-h")
    assert res.code == 0, res.err
    assert "<bool>" not in res.out and "<str>" not in res.out and "<int>" not in res.out, res.out
    assert "--help" in res.out


@pytest.mark.parametrize(
    "verb, flag, choices",
    [
        ("generate", "--mode", "<ul|dl|random|coupled>"),
        ("serve", "--mode", "<ul|dl|random|coupled>"),
        ("optimize", "--draft-policy", "<greedy|greedy_paper|best_uniform|computation_only|oracle|certified>"),
        ("testbed", "--policy", "<adaptive|all_ul|all_dl|random|target_only|three_way|all_coupled|MODULE:ATTR>"),
        ("testbed", "--clock", "<virtual|wall>"),
        ("measure", "--task", "<chat|code>"),
        ("generate", "--log-level", "<debug|info|warning|error>"),
        ("generate", "--device", "<auto|cpu|cuda>"),
        ("reproduce", "--scenario", "<paper-qwen|paper-r1|all|measured-smollm2-a100|measured-smollm2-host>"),
    ],
)
def test_choices_are_listed(multispin, verb, flag, choices):
    line = next(ln for ln in multispin(verb, "-h").out.splitlines() if re.search(rf"{flag}\s", ln))
    assert choices in line, line


def _option_block(help_text: str, flag: str) -> str:
    """The help lines of one option (its first line up to the next option's)."""
    lines = help_text.splitlines()
    start = next(i for i, ln in enumerate(lines) if re.search(rf"│[\s*]+{re.escape(flag)}\s", ln))
    end = next(
        (i for i in range(start + 1, len(lines)) if re.match(r"│[\s*]+-", lines[i]) or "╰" in lines[i]), len(lines)
    )
    return " ".join(ln.strip("│ ") for ln in lines[start:end])


@pytest.mark.parametrize(
    "verb, flag, default",
    [
        ("optimize", "--pdl-dbm", "the scenario's"),
        ("optimize", "--scenario", "paper-qwen"),
        ("testbed", "--scenario", "paper-qwen"),
        ("reproduce", "--workers", "all cores"),
        ("serve", "--rounds", "until every device is done"),
        ("generate", "--draft", "all of the pair's"),
        ("device", "--secret", "$MULTISPIN_SECRET"),
        ("demo", "--noise-figure-db", "the scenario's"),
    ],
)
def test_defaults_are_shown_even_when_computed(multispin, verb, flag, default):
    block = _option_block(multispin(verb, "-h").out, flag)
    assert f"[default: ({default})]" in block or f"[default: {default}]" in block, block


def test_optimize_states_pdl_alike_in_header_and_footer(multispin):
    res = multispin("optimize", "--devices", "3", "--n-saa", "50", "--no-baselines")
    assert res.code == 0, res.err
    shown = set(re.findall(r"P\^dl=([-\d.]+) dBm", res.out))
    assert shown == {"16.02"}, shown
