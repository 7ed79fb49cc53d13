"""docs/own-channel.md's commands, as written or sized down (fewer drops, devices and rounds; the
testbed and demo on the tiny pair, as the page has them): each exits 0 in a fresh folder that holds
the page's scenario files and a trace."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from multispin.system.trace import write_trace

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "own-channel.md"


def page_commands() -> list[list[str]]:
    text = PAGE.read_text()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip().startswith("multispin "):
                argv = shlex.split(line, comments=True)[1:]
                out.append(argv[: argv.index(">")] if ">" in argv else argv)
    return out


def sized_down(argv: list[str]) -> list[str]:
    """The long runs shortened: 2 drops, 2 rounds (factor 2 to 5 below the page)."""
    swaps = {"--drops": "2", "--rounds": "2", "--n-saa": "20"}
    return [swaps.get(argv[i - 1], a) if i else a for i, a in enumerate(argv)]


@pytest.mark.slow
def test_the_pages_commands_run(multispin, tmp_path):
    yaml_blocks = re.findall(r"```yaml\n(.*?)```", PAGE.read_text(), re.S)
    Path("traced.yaml").write_text(next(b for b in yaml_blocks if "trace:" in b))
    rng = np.random.default_rng(0)
    write_trace("trace.csv", -100 + 10 * np.log10(rng.exponential(1.0, (5, 4))))
    commands = page_commands()
    assert len(commands) >= 5
    for argv in commands:
        res = multispin(*sized_down(argv))
        if argv[:2] == ["scenario", "show"]:  # the page redirects it into umi.yaml
            Path("umi.yaml").write_text(res.out.replace("log-distance", "3gpp-umi"))
        assert res.code == 0, (argv, res.err[-800:])
