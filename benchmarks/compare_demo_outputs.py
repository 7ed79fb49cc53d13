"""Whether two `multispin demo` output folders hold the same results: every summary.json and
rounds.jsonl, field by field, with the fields that time this host masked (wall and CPU seconds,
the output folder). Same seed, same tokens: a change that only makes the demo cheaper must leave
the rest identical, texts and figures alike.

On float32 models (the real pairs) two runs of the same code already differ in the last bits of
the acceptance-conditioned figures (`expected_tokens` and what is computed from it): the server
verifies the drafts in the order they arrived, a race, and the batched forward's rounding follows
the row order. ``--rtol`` accepts float fields within that relative difference (the largest one
found is printed); tokens, texts, counts and every other field must still be equal. The tiny
pair's float64 models differ in nothing: compare them with the default, 0.

Run: .venv/bin/python benchmarks/compare_demo_outputs.py OUT_A OUT_B [--rtol 1e-4]
     (exit 1 on a difference)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# fields measured on this host's clock, not computed from the seed
TIMED = frozenset(
    {"planning_cpu_s", "planning_wall_s", "round_wall_s", "verify_s", "mean_planning_cpu_s", "wall_time_s", "out"}
)

# lists in the order the devices' drafts reached the server (a race): compared as sets
ARRIVAL_ORDER = frozenset({"rejected"})


def _flat(doc: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in ARRIVAL_ORDER and isinstance(v, list):
                yield f"{path}.{k}", sorted(v)
            elif k not in TIMED:
                yield from _flat(v, f"{path}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _flat(v, f"{path}[{i}]")
    else:
        yield path, doc


def _documents(folder: Path) -> dict[str, list[Any]]:
    docs = {}
    for path in sorted(folder.rglob("summary.json")):
        docs[str(path.relative_to(folder))] = [json.loads(path.read_text())]
    for path in sorted(folder.rglob("rounds.jsonl")):
        docs[str(path.relative_to(folder))] = [json.loads(line) for line in path.read_text().splitlines() if line]
    return docs


def _close(x: Any, y: Any, rtol: float) -> bool:
    if x == y:
        return True
    floats = isinstance(x, float) and isinstance(y, float)
    return floats and rtol > 0 and abs(x - y) <= rtol * max(abs(x), abs(y))


def float_gap(a: Path, b: Path) -> float:
    """The largest relative difference between two float fields of the folders (0: none)."""
    docs_a, docs_b = _documents(Path(a)), _documents(Path(b))
    gap = 0.0
    for name in set(docs_a) & set(docs_b):
        fields_a, fields_b = dict(_flat(docs_a[name])), dict(_flat(docs_b[name]))
        for key, x in fields_a.items():
            y = fields_b.get(key)
            if isinstance(x, float) and isinstance(y, float) and x != y:
                gap = max(gap, abs(x - y) / max(abs(x), abs(y)))
    return gap


def differences(a: Path, b: Path, most: int = 20, rtol: float = 0.0) -> list[str]:
    """Up to ``most`` lines naming a file or a field where the two folders differ (none: the
    same); float fields within ``rtol`` of each other (relative) count as the same."""
    docs_a, docs_b = _documents(Path(a)), _documents(Path(b))
    out = [f"{name}: only in one folder" for name in sorted(set(docs_a) ^ set(docs_b))]
    for name in sorted(set(docs_a) & set(docs_b)):
        fields_a, fields_b = dict(_flat(docs_a[name])), dict(_flat(docs_b[name]))
        for key in sorted(set(fields_a) | set(fields_b)):
            if not _close(fields_a.get(key), fields_b.get(key), rtol):
                out.append(f"{name}{key}: {fields_a.get(key)!r} != {fields_b.get(key)!r}")
    if not docs_a:
        out.append(f"{a}: no summary.json or rounds.jsonl")
    return out[:most]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--rtol", type=float, default=0.0, help="relative difference accepted in float fields")
    args = ap.parse_args(argv)
    found = differences(args.a, args.b, rtol=args.rtol)
    for line in found:
        print(line)
    gap = float_gap(args.a, args.b)
    print(f"largest relative difference of a float field: {gap:.3g}")
    print("same results" if not found else f"DIFFERENT ({len(found)} shown)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
