"""The documented examples, run in the order of the docs, never land on one another's output
folder: `testbed` and `demo` refuse an --out that holds a previous run, so two examples sharing
one folder (both on the verb's default) would stop the second with exit 2."""

from __future__ import annotations

import re

from test_docs import ROOT, documented_commands

# verbs that write a results folder and refuse to write over one, with their default --out
REFUSING_VERBS = {"testbed": "out/testbed", "demo": "out/demo"}


def docs_in_nav_order() -> list[str]:
    nav = re.findall(r":\s*([\w./-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    return [f"docs/{page}" for page in nav]


def collisions(commands: list[tuple[str, list[str]]]) -> list[str]:
    """Each command whose output folder an earlier command of the list already wrote."""
    written: dict[str, str] = {}
    found = []
    for page, argv in commands:
        if argv[0] not in REFUSING_VERBS or "--help" in argv or "--force" in argv:
            continue
        out = argv[argv.index("--out") + 1] if "--out" in argv else REFUSING_VERBS[argv[0]]
        line = f"{page}: multispin {' '.join(argv)}"
        if out in written:
            found.append(f"{line} (after {written[out]})")
        written[out] = line
    return found


def test_documented_runs_in_docs_order_use_distinct_out_folders():
    order = {page: i for i, page in enumerate(docs_in_nav_order())}
    commands = [(p, a) for p, a in documented_commands() if p in order]
    commands.sort(key=lambda c: order[c[0]])  # stable: a page's own order is kept
    assert len({p for p, _ in commands}) >= 5
    assert not collisions(commands)
    # negative control: the same verb twice on its default folder is found
    assert collisions([("x.md", ["demo"]), ("y.md", ["demo", "--seeds", "2"])])
