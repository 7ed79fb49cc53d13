"""Functions of runtime/ read as one screen: none is over 60 lines, from its ``def`` to its last
line (a longer one is split where a reader would name the parts)."""

from __future__ import annotations

import ast
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[2] / "src" / "multispin" / "runtime"
MAX_LINES = 60


def long_functions(root: Path, limit: int = MAX_LINES) -> list[str]:
    """``path:line name (n lines)`` of every function or method under ``root`` over ``limit`` lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_runtime_function_is_over_60_lines():
    assert long_functions(RUNTIME) == []


def test_the_check_sees_a_long_method(tmp_path):
    """Negative control: a 61-line method is reported, a 60-line function is not."""
    body = "\n".join(f"        x{i} = {i}" for i in range(60))
    at_limit = "\n".join(f"    y{i} = {i}" for i in range(59))
    (tmp_path / "m.py").write_text(f"class C:\n    def long(self):\n{body}\n\n\ndef fits():\n{at_limit}\n")
    assert long_functions(tmp_path) == ["m.py:2 long (61 lines)"]
