"""The "bring your own" pages' commands run, sized down: docs/own-policy.md as written but with
3 rounds instead of 10 (24 in the demo, on 1 seed instead of 3; the sweep on 2 drops instead of
10), in a folder holding docs/examples/own_policies.py; docs/own-models.md on
the tiny pair (the page's smollm2-135m swapped for it), 2 prompts of 8 tokens instead of 6 of 32,
2 rounds instead of 6. (docs/own-channel.md: tests/system/test_own_channel_docs.py;
docs/multi-host.md: tests/runtime/net/test_multi_host.py.)"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SMALLER = {"--rounds": "2", "--prompts": "2", "--max-new-tokens": "8", "--max-batch": "2", "--max-draft-len": "2"}


def page_commands(page: str) -> list[list[str]]:
    out = []
    text = (ROOT / "docs" / page).read_text()
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip().startswith("multispin "):
                argv = shlex.split(line, comments=True)[1:]
                out.append(argv[: argv.index(">")] if ">" in argv else argv)
    return out


def sized_down(argv: list[str], **swap: str) -> list[str]:
    """Smaller runs, on the tiny pair (its drafts have other names: a --draft is dropped)."""
    table = {**SMALLER, **swap}
    out = [table.get(argv[i - 1], a) if i else a for i, a in enumerate(argv)]
    if "--draft" in out:
        i = out.index("--draft")
        out = out[:i] + out[i + 2 :]
    return ["tiny" if a == "smollm2-135m" else a for a in out]


@pytest.mark.slow
def test_the_own_policy_pages_commands_run(multispin):
    shutil.copy(ROOT / "docs" / "examples" / "own_policies.py", "own_policies.py")
    commands = page_commands("own-policy.md")
    assert [a[0] for a in commands] == ["testbed"] * 4 + ["demo", "sweep"]
    for argv in commands:
        res = multispin(*sized_down(argv, **{"--rounds": "3", "--seeds": "1", "--drops": "2"}))
        assert res.code == 0, (argv, res.err[-800:])
    assert "own_policies:AllDL" in Path("out/tb-user-all-dl/summary.json").read_text()
    demo = json.loads(Path("out/demo-own/summary.json").read_text())
    assert [r["policy"] for r in demo["points"][0]["policies"]][-2:] == [
        "own_policies:Threshold",
        "own_policies:Bandit",
    ]


@pytest.mark.slow
def test_the_own_models_pages_commands_run(multispin):
    commands = page_commands("own-models.md")
    assert [a[0] for a in commands] == ["measure", "measure", "profile", "scenario", "testbed"]
    for argv in commands:
        res = multispin(*sized_down(argv))
        assert res.code == 0, (argv, res.err[-800:])
    summary = json.loads(Path("out/tb-own/summary.json").read_text())
    assert summary["alpha_prior_measured"] is True
    # the page's pair is measured and profiled on this host, so its forecast carries no caveat,
    # except the one a loaded host earns: the profile's timings fit poorly when the other test
    # worker shares the cores (the run says so, as it should)
    others = [c for c in summary["forecast_caveats"] if not c.startswith("compute profile of poor fit")]
    assert others == [], others
