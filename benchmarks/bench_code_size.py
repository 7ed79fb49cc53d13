"""Size of the running system's code: the largest modules and the longest functions in
src/multispin/runtime/, for the working tree or any git revision (issue 11's figure).

Run: .venv/bin/python benchmarks/bench_code_size.py [--rev REV ...]   (no --rev: the working tree)
"""

from __future__ import annotations

import argparse
import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = "src/multispin/runtime"
LIMIT = 60  # the longest acceptable function, in lines


def sources(rev: str | None) -> dict[str, str]:
    if rev is None:
        return {p.name: p.read_text() for p in sorted((ROOT / RUNTIME).glob("*.py"))}
    names = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{rev}:{RUNTIME}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split()
    return {
        n: subprocess.run(
            ["git", "show", f"{rev}:{RUNTIME}/{n}"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout
        for n in names
        if n.endswith(".py")
    }


def measure(files: dict[str, str]) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    modules = sorted(((len(src.splitlines()), name) for name, src in files.items()), reverse=True)
    functions = []
    for name, src in files.items():
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.append((node.end_lineno - node.lineno + 1, f"{name}:{node.name}"))
    return modules, sorted(functions, reverse=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", action="append", help="git revision (repeatable); default: working tree")
    args = ap.parse_args()
    for rev in args.rev or [None]:
        modules, functions = measure(sources(rev))
        over = [f"{name} ({n})" for n, name in functions if n > LIMIT]
        print(f"{rev or 'working tree'}: {len(modules)} modules, {sum(n for n, _ in modules)} lines")
        print("  largest modules:   " + ", ".join(f"{name} {n}" for n, name in modules[:3]))
        print("  longest functions: " + ", ".join(f"{name} {n}" for n, name in functions[:3]))
        print(f"  functions over {LIMIT} lines: " + (", ".join(over) or "none"))


if __name__ == "__main__":
    main()
