"""The import graph of a package, read with `ast` (nothing is imported): its cycles and the imports
that point up the layer table (tests/test_layering.py holds both at zero).

An edge A → B is an import in A's source of B, a module of the same package, of one of three kinds:

- ``module``: runs when A is imported (top level, including ``if``/``try`` blocks and class bodies);
- ``function``: inside a function body, so it runs only when the function is called;
- ``typing``: under ``if TYPE_CHECKING:``, never at run time;
- ``main``: under ``if __name__ == "__main__":``, run only when A is the program (``python -m A``),
  and then A is ``__main__``, a second copy, so these close no cycle either.

``from pkg.x import y`` counts as an import of ``pkg.x.y`` when ``y`` is a submodule, else of
``pkg.x``; importing a package is importing its ``__init__``. The parents that Python initialises
on the way (``pkg`` and ``pkg.x`` for ``import pkg.x.y``) are not edges: the parent is already in
``sys.modules`` by then, so they close no cycle that a name lookup could trip over.

Run: python tests/import_graph.py [SRC_DIR [PACKAGE]]   (default: src multispin) prints the
strongly connected components of the module-level graph and of the graph with function-level
imports added, and every upward import under tests/test_layering.py's layer table.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

KINDS = ("module", "function", "typing", "main")


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    kind: str  # one of KINDS
    line: int


def modules(src_dir: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` under ``src_dir``: dotted name → file (a package is its __init__)."""
    out = {}
    for path in sorted((Path(src_dir) / package).rglob("*.py")):
        parts = path.relative_to(src_dir).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _is_main(test: ast.expr) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def _imports(tree: ast.Module):
    """(node, kind) for every Import/ImportFrom in the tree."""

    def walk(node: ast.AST, kind: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, kind
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from walk(child, "function" if kind == "module" else kind)
            elif isinstance(child, ast.If) and (_is_type_checking(child.test) or _is_main(child.test)):
                inner = "typing" if _is_type_checking(child.test) else "main"
                for stmt in child.body:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), inner)
                for stmt in child.orelse:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), kind)
            else:
                yield from walk(child, kind)

    yield from walk(tree, "module")


def edges(src_dir: Path, package: str) -> list[Edge]:
    mods = modules(src_dir, package)
    out: set[Edge] = set()

    def known(name: str) -> str | None:
        """``name`` or its longest prefix that is a module of the package."""
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        here = name if is_pkg else name.rpartition(".")[0]
        for node, kind in _imports(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [known(a.name) for a in node.names]
            else:
                if node.level:
                    base_parts = here.split(".")
                    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                if base != package and not base.startswith(package + "."):
                    continue
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in mods else known(base))
            for dst in targets:
                if dst is not None and dst != name:
                    out.add(Edge(name, dst, kind, node.lineno))
    return sorted(out, key=lambda e: (e.src, e.dst, e.kind, e.line))


def graph(es: list[Edge], kinds=("module",)) -> dict[str, set[str]]:
    g: dict[str, set[str]] = {}
    for e in es:
        g.setdefault(e.src, set())
        g.setdefault(e.dst, set())
        if e.kind in kinds:
            g[e.src].add(e.dst)
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return sorted(found)


def layer_of(module: str, layers: dict[str, int]) -> int | None:
    """The rank of the longest entry of ``layers`` that is ``module`` or a package above it."""
    name = module
    while name:
        if name in layers:
            return layers[name]
        name = name.rpartition(".")[0]
    return None


def upward(es: list[Edge], layers: dict[str, int], kinds=("module", "function", "main")) -> list[Edge]:
    """Imports from a module to a module of a higher layer (a larger rank); modules that no entry
    of ``layers`` covers (top-level helpers) may import and be imported by anyone."""
    out = []
    for e in es:
        if e.kind not in kinds:
            continue
        a, b = layer_of(e.src, layers), layer_of(e.dst, layers)
        if a is not None and b is not None and b > a:
            out.append(e)
    return out


def report(src_dir: Path, package: str, layers: dict[str, int] | None = None) -> str:
    es = edges(src_dir, package)
    lines = [
        f"{len(modules(src_dir, package))} modules, "
        + ", ".join(f"{sum(e.kind == k for e in es)} {k}-level imports" for k in KINDS)
    ]
    for title, kinds in (
        ("module-level cycles", ("module",)),
        ("cycles with function-level imports too", ("module", "function")),
    ):
        comps = cycles(graph(es, kinds))
        lines.append(f"{title}: {len(comps)}")
        lines += [f"  [{len(c)}] " + " ".join(c) for c in comps]
    if layers is not None:
        ups = upward(es, layers)
        lines.append(f"upward imports: {len(ups)}")
        lines += [f"  {e.src}:{e.line} -> {e.dst} ({e.kind})" for e in ups]
    return "\n".join(lines)


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[1]
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else root / "src"
    pkg = sys.argv[2] if len(sys.argv) > 2 else "multispin"
    layers = None
    if pkg == "multispin":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from test_layering import LAYERS as layers  # noqa: N811
    print(report(src, pkg, layers))
