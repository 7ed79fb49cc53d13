"""The one progress convention (multispin/progress.py): jobs report `Step`s, commands render them
(bars on a terminal, a line per tenth in a log, nothing with --no-progress)."""

from __future__ import annotations

import io

from rich.console import Console

from multispin.progress import Step, reporter, step_progress


def _lines(steps, **kwargs) -> list[str]:
    """What the renderer writes to stderr (not a terminal here: the lines mode) for ``steps``."""
    import contextlib

    err = io.StringIO()
    with contextlib.redirect_stderr(err), step_progress(Console(file=io.StringIO()), **kwargs) as show:
        show.loading("loading…")  # says nothing in a log
        for step in steps:
            show(step)
    return err.getvalue().splitlines()


def test_a_step_reads_as_its_count():
    assert str(Step("generating", 40, 320, "tokens")) == "generating: 40/320 tokens"
    assert str(Step("adaptive", 7, None, "rounds", "412 tokens")) == "adaptive: 7 rounds, 412 tokens"


def test_a_log_gets_one_line_per_tenth_of_each_phase():
    lines = _lines([Step("a", i, 100, "drops") for i in range(101)] + [Step("b", 1, 2, "prompts")])
    assert [line.split(" (")[0] for line in lines] == [f"a: {10 * i}/100 drops" for i in range(11)] + ["b: 1/2 prompts"]
    assert "left)" in lines[1] and "left" not in lines[-2]  # an estimate of the time left on the way only


def test_a_phase_of_unknown_length_gets_a_line_every_ten_units():
    lines = _lines([Step("run", i, None, "rounds") for i in range(1, 25)])
    assert [line.split(" (")[0] for line in lines] == ["run: 1 rounds", "run: 10 rounds", "run: 20 rounds"]


def test_no_progress_shows_nothing_and_no_callback_ignores_every_step():
    assert _lines([Step("a", i, 10, "drops") for i in range(11)], enabled=False) == []
    reporter(None)(Step("a", 1, 1, "x"))  # no callback given: the job reports into nothing
    seen: list[Step] = []
    reporter(seen.append)(Step("a", 1, 1, "x"))
    assert seen == [Step("a", 1, 1, "x")]
