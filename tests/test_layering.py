"""The package's import structure (docs/architecture.md, "Layers of the package"): no import cycle at module level, and
no module importing a layer above its own. The checker is tests/import_graph.py (`ast` only; run it
as a script for the full report, function-level cycles included)."""

from __future__ import annotations

from pathlib import Path

import import_graph as ig

SRC = Path(__file__).resolve().parents[1] / "src"

# Rank of each layer: a module may import its own layer and those below, never one above. The
# order is docs/architecture.md's, except that models/ sits above speculative/: models.hf imports
# speculative.warp, and speculative/ imports nothing of models/ (pure token math).
LAYERS = {
    "multispin.cli": 7,
    "multispin.commands": 7,
    "multispin.__main__": 7,  # the command line
    "multispin.api": 7,  # the Python front door: calls every layer, as the CLI does
    "multispin.experiments": 6,
    "multispin.runtime": 5,
    "multispin.optimize": 4,
    "multispin.system": 3,
    "multispin.models": 2,
    # every kind of α, the shipped files' reader and the fitting code: plain numbers and JSON,
    # read by the scenario (system/) and the experiments, importing no model
    "multispin.acceptance": 1.5,
    "multispin.speculative": 1,
}
# Every other module is a top-level helper (errors, config, jsonout, _version, the package
# __init__): anyone may import it, and it imports no layer, except these (source, target):
HELPER_IMPORTS_ALLOWED = {
    # `multispin.plan` etc.: the package re-exports the API lazily (PEP 562 __getattr__, a
    # function-level import), so `import multispin` loads no layer
    ("multispin", "multispin.api"),
}
# Upward imports that are not simple to fix: none today. Add (source, target) with a reason.
UPWARD_ALLOWED: set[tuple[str, str]] = set()


# The rings inside runtime/ (its __init__, docs/architecture.md): which ring may import which.
# Imports point inwards, to the round and the wire; security and store are leaves. A ring not
# named here, or a module of runtime/ outside every ring, fails test_every_runtime_module_is_in_a_ring.
RUNTIME = "multispin.runtime"
RINGS_MAY_IMPORT = {
    "round": set(),
    "wire": {"round", "security"},
    "net": {"round", "wire", "security", "store"},
    "security": set(),
    "store": set(),
}


def ring_of(module: str, package: str) -> str | None:
    """The ring (first subpackage below ``package``) that holds ``module``; None for the package itself."""
    if not module.startswith(package + "."):
        return None
    return module[len(package) + 1 :].split(".")[0]


def ring_violations(es, package: str, may_import: dict[str, set[str]]) -> list:
    """Imports from one ring of ``package`` into a ring it may not import (typing-only imports too:
    they are read as a dependency by whoever reads the module)."""
    bad = []
    for e in es:
        src, dst = ring_of(e.src, package), ring_of(e.dst, package)
        if src and dst and src != dst and dst not in may_import.get(src, set()):
            bad.append(e)
    return bad


def _edges():
    return ig.edges(SRC, "multispin")


def test_no_import_cycle_at_module_level():
    found = ig.cycles(ig.graph(_edges(), kinds=("module",)))
    assert not found, "module-level import cycles:\n" + "\n".join(" ".join(c) for c in found)


def test_no_import_cycle_through_function_level_imports_either():
    """A deferred import does not make a circle go away for a reader: none at any level."""
    found = ig.cycles(ig.graph(_edges(), kinds=("module", "function", "main")))
    assert not found, "import cycles (function-level imports included):\n" + "\n".join(" ".join(c) for c in found)


def test_no_layer_imports_a_layer_above_it():
    ups = [e for e in ig.upward(_edges(), LAYERS) if (e.src, e.dst) not in UPWARD_ALLOWED]
    assert not ups, "upward imports:\n" + "\n".join(f"{e.src}:{e.line} -> {e.dst} ({e.kind})" for e in ups)


def test_the_acceptance_package_sits_below_the_models():
    """Negative control on the real layer table: the acceptance package importing the models
    (here in a function, as a shortcut to a tokenizer would) is an upward import."""
    fake = [ig.Edge("multispin.acceptance.shipped", "multispin.models.registry", "function", 1)]
    assert ig.upward(fake, LAYERS) == fake
    down = [ig.Edge("multispin.system.scenario", "multispin.acceptance.shipped", "module", 1)]
    assert ig.upward(down, LAYERS) == []


def test_helpers_import_no_layer():
    bad = [
        e
        for e in _edges()
        if e.kind != "typing"
        and ig.layer_of(e.src, LAYERS) is None
        and ig.layer_of(e.dst, LAYERS) is not None
        and (e.src, e.dst) not in HELPER_IMPORTS_ALLOWED
    ]
    assert not bad, "helpers importing a layer:\n" + "\n".join(f"{e.src}:{e.line} -> {e.dst}" for e in bad)


def test_every_package_of_the_tree_has_a_layer_or_is_a_known_helper():
    """A new subpackage must be placed in LAYERS (or it would escape the upward check)."""
    helpers = {
        "multispin",
        "multispin._version",
        "multispin.config",
        "multispin.datafile",
        "multispin.errors",
        "multispin.jsonout",
        "multispin.lifeline",
        "multispin._lifeline_preload",
        "multispin.progress",
        "multispin.safe_text",
        "multispin.side_output",
        "multispin.vocabulary",
    }
    unplaced = sorted(m for m in ig.modules(SRC, "multispin") if ig.layer_of(m, LAYERS) is None and m not in helpers)
    assert not unplaced, f"modules in no layer: {unplaced}"


def test_runtime_rings_import_only_inwards():
    bad = ring_violations(_edges(), RUNTIME, RINGS_MAY_IMPORT)
    assert not bad, "ring imports against RINGS_MAY_IMPORT:\n" + "\n".join(
        f"{e.src}:{e.line} -> {e.dst} ({e.kind})" for e in bad
    )


# Inside store/: the journal is the only module that opens and writes a journal; its repair reads
# and renames files (salvage, set aside) and never drives the journal; the check reads; the rows
# encode and decode; the head and the records are leaves. Imports point down this list.
STORE = "multispin.runtime.store"
STORE_MAY_IMPORT = {
    "journal": {"check", "head", "records", "repair", "rows"},
    "repair": {"check", "head", "records", "rows"},
    "check": {"head", "rows"},
    "rows": {"records"},
    "head": set(),
    "records": set(),
}


def test_the_store_imports_downwards_only():
    bad = ring_violations(_edges(), STORE, STORE_MAY_IMPORT)
    assert not bad, "store imports against STORE_MAY_IMPORT:\n" + "\n".join(
        f"{e.src}:{e.line} -> {e.dst} ({e.kind})" for e in bad
    )
    unplaced = sorted(
        m
        for m in ig.modules(SRC, "multispin")
        if m.startswith(STORE + ".") and ring_of(m, STORE) not in STORE_MAY_IMPORT
    )
    assert not unplaced, f"store modules not in STORE_MAY_IMPORT: {unplaced}"


def test_store_check_sees_the_repair_driving_the_journal(tmp_path):
    """Negative control: a repair that imports the journal (for the type checker only, or in a
    function) is reported; the journal importing the repair is not."""
    src = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/store/__init__.py": "",
            "pkg/store/journal.py": "from pkg.store.repair import salvage\n",
            "pkg/store/repair.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.store.journal import J\n"
            "def salvage():\n    from pkg.store import journal\n",
        },
    )
    bad = ring_violations(ig.edges(src, "pkg"), "pkg.store", {"journal": {"repair"}, "repair": set()})
    assert sorted((e.src, e.dst, e.kind) for e in bad) == [
        ("pkg.store.repair", "pkg.store.journal", "function"),
        ("pkg.store.repair", "pkg.store.journal", "typing"),
    ]


# Inside net/: the server loop drives the round and leans on parts with one job each (its link
# to the wire, its restart from the journal, its summary, its settings); none of them imports the
# loop back, and the device side (device, pool) knows nothing of the server side. Only the
# launcher holds both. Imports point down this table.
NET = "multispin.runtime.net"
NET_MAY_IMPORT = {
    "launcher": {"server", "server_config", "device_job", "pool"},
    "device_job": {"device"},
    "server": {
        "server_config",
        "round_messages",
        "server_link",
        "server_recovery",
        "server_summary",
        "transport",
        "jsonlog",
    },
    "round_messages": {"server_link", "server_config", "jsonlog"},
    "server_link": {"transport", "jsonlog"},
    "server_recovery": {"server_config"},
    "server_summary": {"jsonlog"},
    "server_config": set(),
    "transport": {"transport_peers"},
    "transport_peers": set(),
    "pool": {"device"},
    "device": set(),
    "round_sink": set(),
    "jsonlog": set(),
}


def test_the_server_parts_import_downwards_only():
    bad = ring_violations(_edges(), NET, NET_MAY_IMPORT)
    assert not bad, "net imports against NET_MAY_IMPORT:\n" + "\n".join(
        f"{e.src}:{e.line} -> {e.dst} ({e.kind})" for e in bad
    )
    unplaced = sorted(
        m for m in ig.modules(SRC, "multispin") if m.startswith(NET + ".") and ring_of(m, NET) not in NET_MAY_IMPORT
    )
    assert not unplaced, f"net modules not in NET_MAY_IMPORT: {unplaced}"


def test_net_check_sees_a_part_importing_the_loop(tmp_path):
    """Negative control: the link importing the server (in a function) and the device importing the
    launcher (for the type checker only) are reported; the server importing its link is not."""
    src = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/net/__init__.py": "",
            "pkg/net/server.py": "from pkg.net.server_link import Link\n",
            "pkg/net/server_link.py": "def f():\n    from pkg.net import server\n",
            "pkg/net/launcher.py": "from pkg.net import server\n",
            "pkg/net/device.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.net.launcher import B\n",
        },
    )
    may = {"launcher": {"server", "device"}, "server": {"server_link"}, "server_link": set(), "device": set()}
    bad = ring_violations(ig.edges(src, "pkg"), "pkg.net", may)
    assert sorted((e.src, e.dst, e.kind) for e in bad) == [
        ("pkg.net.device", "pkg.net.launcher", "typing"),
        ("pkg.net.server_link", "pkg.net.server", "function"),
    ]


def test_every_runtime_module_is_in_a_ring():
    outside = sorted(
        m
        for m in ig.modules(SRC, "multispin")
        if m.startswith(RUNTIME + ".") and ring_of(m, RUNTIME) not in RINGS_MAY_IMPORT
    )
    assert not outside, f"runtime modules in no ring: {outside}"


def test_no_figure_module_imports_the_pipeline():
    """The pipeline imports every figure; a figure importing it back (even in a function or under
    ``if __name__ == "__main__"``) is a circle. One figure runs through `multispin reproduce --figure`."""
    figures = {m for m in ig.modules(SRC, "multispin") if m.startswith("multispin.experiments.reproduce.fig_")}
    assert figures, "no figure modules found: the pattern is stale"
    back = [e for e in _edges() if e.src in figures and e.dst == "multispin.experiments.reproduce.pipeline"]
    assert not back, "figure modules importing the pipeline:\n" + "\n".join(
        f"{e.src}:{e.line} ({e.kind})" for e in back
    )


# ----------------------------------------------------------------------------- the vocabulary

VOCABULARY = "multispin.vocabulary"
# what the vocabulary may import: the standard library and the error types, nothing that loads
# numpy or a layer (the command line lists its names in help texts; the token math imports it)
VOCABULARY_MAY_IMPORT = {"multispin.errors"}


def foreign_imports(src: Path, root: str, module: str, allowed: set[str]) -> list[str]:
    """Modules ``module`` imports (at any level) that are neither the standard library nor in
    ``allowed``."""
    import sys

    path = ig.modules(src, root)[module]
    names = []
    for node, _kind in ig._imports(ig.ast.parse(path.read_text(), str(path))):
        if isinstance(node, ig.ast.Import):
            names += [a.name for a in node.names]
        elif node.level == 0:
            names.append(node.module or "")
        else:
            names.append(root + "." + (node.module or ""))
    return sorted(n for n in names if n not in allowed and n.split(".")[0] not in sys.stdlib_module_names)


def test_the_vocabulary_is_dependency_free():
    assert foreign_imports(SRC, "multispin", VOCABULARY, VOCABULARY_MAY_IMPORT) == []


def test_dependency_check_sees_a_foreign_import(tmp_path):
    """Negative control: numpy at module level, a layer inside a function and a relative import are
    reported; the standard library and the allowed helper are not."""
    root = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/errors.py": "",
            "pkg/words.py": "import re\nfrom typing import Literal\nimport numpy as np\n"
            "from pkg.errors import E\nfrom . import layer\n"
            "def f():\n    from pkg.low import x\n",
        },
    )
    assert foreign_imports(root, "pkg", "pkg.words", {"pkg.errors"}) == ["numpy", "pkg.", "pkg.low"]


# The words the vocabulary defines, as literals: written anywhere else they are a second
# definition that can drift (a test's expected values live in tests/, not here).
VOCABULARY_LITERALS = (
    ("ul", "dl"),
    ("optimal", "all_ul", "all_dl", "random"),
    ("adaptive", "all_ul", "all_dl", "target_only"),
    ("greedy", "greedy_paper", "best_uniform", "computation_only", "oracle", "certified"),
    ("sum", "proportional-fair", "max-min", "energy"),
)


def literal_redefinitions(src: Path, root: str, literals, home: str) -> list[str]:
    """``module:line`` of every tuple, list or set literal outside ``home`` whose string elements
    are exactly one of ``literals`` (in order). Dicts keyed by the words (a figure's style per
    policy) are uses, not definitions."""
    found = []
    wanted = {tuple(w) for w in literals}
    for name, path in ig.modules(src, root).items():
        if name == home:
            continue
        for node in ig.ast.walk(ig.ast.parse(path.read_text(), str(path))):
            elts = node.elts if isinstance(node, (ig.ast.Tuple, ig.ast.List, ig.ast.Set)) else None
            if elts and all(isinstance(e, ig.ast.Constant) and isinstance(e.value, str) for e in elts):
                if tuple(e.value for e in elts) in wanted:
                    found.append(f"{name}:{node.lineno}")
    return found


def test_no_module_redefines_the_vocabulary():
    found = literal_redefinitions(SRC, "multispin", VOCABULARY_LITERALS, VOCABULARY)
    assert not found, "the vocabulary's words written out again (import them from multispin.vocabulary):\n" + "\n".join(
        found
    )


def test_redefinition_check_sees_a_tuple_and_a_list(tmp_path):
    """Negative control: a tuple and a list (in a function) with the vocabulary's words are found;
    the home module, another order, a subset and a dict keyed by the words are not."""
    root = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/words.py": "LINKS = ('ul', 'dl')\n",
            "pkg/a.py": "M = ('ul', 'dl')\nN = ('dl', 'ul')\nO = ('ul',)\n",
            "pkg/b.py": "def f(m):\n    return m in ['ul', 'dl']\nD = {'ul': 1, 'dl': 2}\n",
        },
    )
    assert sorted(literal_redefinitions(root, "pkg", [("ul", "dl")], "pkg.words")) == ["pkg.a:1", "pkg.b:2"]


# ----------------------------------------------------------------------------- the checker itself


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_checker_reports_a_module_level_cycle_and_only_that(tmp_path):
    src = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low/__init__.py": "",
            "pkg/low/a.py": "from pkg.low import b\n",  # a submodule named in `from … import`
            "pkg/low/b.py": "from . import c\n",  # relative
            "pkg/low/c.py": "import pkg.low.a\n",  # closes a → b → c → a
            "pkg/low/d.py": "def f():\n    from pkg.low import e\n",
            "pkg/low/e.py": "from pkg.low.d import f\n",  # d ↔ e only through a function
            "pkg/low/t.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.low import u\n",
            "pkg/low/u.py": "import pkg.low.t\n",  # t ↔ u only for the type checker
            "pkg/low/m.py": "from pkg.low.n import x\n",
            "pkg/low/n.py": "x = 1\nif __name__ == '__main__':\n    from pkg.low import m\n",  # only as a script
        },
    )
    es = ig.edges(src, "pkg")
    assert ig.cycles(ig.graph(es, ("module",))) == [["pkg.low.a", "pkg.low.b", "pkg.low.c"]]
    assert ig.cycles(ig.graph(es, ("module", "function"))) == [
        ["pkg.low.a", "pkg.low.b", "pkg.low.c"],
        ["pkg.low.d", "pkg.low.e"],
    ]
    assert {(e.src, e.dst, e.kind) for e in es} >= {
        ("pkg.low.t", "pkg.low.u", "typing"),
        ("pkg.low.n", "pkg.low.m", "main"),
    }
    assert "module-level cycles: 1" in ig.report(src, "pkg")


def test_checker_counts_a_package_import_as_its_init(tmp_path):
    src = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/sub/__init__.py": "from pkg.sub.impl import thing\n",
            "pkg/sub/impl.py": "thing = 1\n",
            "pkg/user.py": "from pkg.sub import thing\n",  # a name of the package: its __init__
            "pkg/other.py": "from pkg.sub.impl import thing\nimport pkg.user\n",
            "pkg/back.py": "",
        },
    )
    es = {(e.src, e.dst) for e in ig.edges(src, "pkg")}
    assert ("pkg.user", "pkg.sub") in es and ("pkg.sub", "pkg.sub.impl") in es
    assert ("pkg.other", "pkg.sub.impl") in es and ("pkg.other", "pkg.user") in es
    assert not any(d == "pkg" for _, d in es)  # parents initialised on the way are not edges


def test_checker_reports_an_upward_import(tmp_path):
    src = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/helper.py": "",
            "pkg/top/__init__.py": "",
            "pkg/top/run.py": "from pkg.low.calc import f\nfrom pkg import helper\n",
            "pkg/low/__init__.py": "",
            "pkg/low/calc.py": "from pkg import helper\ndef f():\n    from pkg.top import run\n",  # up, in a function
        },
    )
    layers = {"pkg.top": 2, "pkg.low": 1}
    ups = ig.upward(ig.edges(src, "pkg"), layers)
    assert [(e.src, e.dst, e.kind, e.line) for e in ups] == [("pkg.low.calc", "pkg.top.run", "function", 3)]
    assert "upward imports: 1" in ig.report(src, "pkg", layers)


# Only the loops touch the transport (docs/architecture.md, "The rings of runtime/"): the server's ZeroMQ transport, the
# device client, and the CurveZMQ key module they plug in (pyzmq's `zmq.auth`: key pairs,
# certificate files, the authenticator).
ZMQ_MODULES = {"multispin.runtime.net.transport", "multispin.runtime.net.device", "multispin.runtime.security.keys"}


def _importers_of(package: str, src: Path, root: str) -> set[str]:
    found = set()
    for name, path in ig.modules(src, root).items():
        for node, _kind in ig._imports(ig.ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ig.ast.Import) else [node.module or ""]
            if any(n == package or n.startswith(package + ".") for n in names):
                found.add(name)
    return found


def test_only_the_loops_and_the_key_module_import_zmq():
    assert _importers_of("zmq", SRC, "multispin") == ZMQ_MODULES


def test_zmq_check_sees_a_function_level_import(tmp_path):
    """Negative control: a zmq import hidden in a function of another module is found."""
    root = _write(
        tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "def f():\n    import zmq.auth\n", "pkg/b.py": "x = 1\n"}
    )
    assert _importers_of("zmq", root, "pkg") == {"pkg.a"}


def test_ring_check_reports_an_outward_import(tmp_path):
    """Negative control: a wire module importing a loop (in a function) and a leaf importing a
    ring are reported; inward imports and imports within a ring are not."""
    src = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/round/__init__.py": "",
            "pkg/round/engine.py": "",
            "pkg/wire/__init__.py": "",
            "pkg/wire/messages.py": "from pkg.round import engine\n",
            "pkg/wire/server.py": "from pkg.wire import messages\ndef f():\n    from pkg.net import loop\n",
            "pkg/net/__init__.py": "",
            "pkg/net/loop.py": "from pkg.wire import server\n",
            "pkg/store/__init__.py": "",
            "pkg/store/journal.py": "import pkg.round.engine\n",
        },
    )
    bad = ring_violations(
        ig.edges(src, "pkg"), "pkg", {"round": set(), "wire": {"round"}, "net": {"round", "wire"}, "store": set()}
    )
    assert sorted((e.src, e.dst) for e in bad) == [
        ("pkg.store.journal", "pkg.round.engine"),
        ("pkg.wire.server", "pkg.net.loop"),
    ]


def test_the_architecture_page_names_every_runtime_module_in_its_ring():
    """docs/architecture.md is where a maintainer looks a module up: every module of runtime/ must
    be listed in its ring's row, so a new module (or a move) that the page misses fails here."""
    page = (SRC.parent / "docs" / "architecture.md").read_text()
    rows = {
        line.split("|")[1].strip().strip("`").rstrip("/").split("/")[-1]: line
        for line in page.splitlines()
        if line.startswith("| `runtime/")
    }
    assert set(rows) == set(RINGS_MAY_IMPORT), f"ring rows on the page: {sorted(rows)}"
    missing = [
        m
        for m in ig.modules(SRC, "multispin")
        if m.startswith(RUNTIME + ".")
        and m.count(".") == 3
        and not m.endswith("__init__")
        and f"`{m.rsplit('.', 1)[1]}.py`" not in rows[ring_of(m, RUNTIME)]
    ]
    assert not missing, f"runtime modules the architecture page does not list in their ring: {missing}"


# ----------------------------------------------------------------------------- one name, one meaning

# Public top-level names that several modules define on purpose: the figure protocol (every
# figure module of experiments/reproduce/ defines these, and the pipeline reads them), a verb's
# name on its command, its API function and the function they run, a module's logger and a
# script's entry point. Any other public name defined in two modules is a clash.
SHARED_NAMES = {
    **dict.fromkeys(("METRICS", "NAME", "PARAMS", "STUDIES", "TITLE", "describe", "plot", "table"), "figure protocol"),
    **dict.fromkeys(("capacity", "device", "generate", "measure", "plan", "reproduce", "sweep", "testbed"), "verb"),
    "log": "a module's logger",
    "main": "a script's entry point",
}


def public_definitions(src: Path, root: str) -> dict[str, list[str]]:
    """Public (no leading underscore) top-level names → the modules that define them (def, class,
    assignment)."""
    found: dict[str, list[str]] = {}
    for name, path in sorted(ig.modules(src, root).items()):
        for node in ig.ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, (ig.ast.FunctionDef, ig.ast.AsyncFunctionDef, ig.ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ig.ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ig.ast.Name)]
            elif isinstance(node, ig.ast.AnnAssign) and isinstance(node.target, ig.ast.Name):
                names = [node.target.id]
            else:
                names = []
            for n in names:
                if not n.startswith("_"):
                    found.setdefault(n, []).append(name)
    return found


def name_clashes(src: Path, root: str, shared: set[str]) -> dict[str, list[str]]:
    return {n: ms for n, ms in public_definitions(src, root).items() if len(set(ms)) > 1 and n not in shared}


def test_no_two_modules_define_the_same_public_name():
    clashes = name_clashes(SRC, "multispin", set(SHARED_NAMES))
    assert not clashes, "one name, two meanings (rename one, or import it from the other):\n" + "\n".join(
        f"{n}: {', '.join(ms)}" for n, ms in sorted(clashes.items())
    )


def test_clash_check_sees_a_class_and_a_constant_defined_twice(tmp_path):
    """Negative control: a class and an annotated constant defined in two modules are found; a
    private name, a shared name and a name defined twice in one module are not."""
    root = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "class Limits: ...\nPOLICIES: tuple = ()\n_x = 1\nlog = None\ny = 1\ny = 2\n",
            "pkg/b.py": "Limits = dict\nPOLICIES: tuple = ('a',)\n_x = 2\nlog = None\n",
        },
    )
    assert name_clashes(root, "pkg", {"log"}) == {"Limits": ["pkg.a", "pkg.b"], "POLICIES": ["pkg.a", "pkg.b"]}
