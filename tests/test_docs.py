"""The documentation site builds with `mkdocs build --strict` (broken links, missing pages,
docstrings that do not match signatures, unresolved cross-references fail it), its CLI reference
covers every verb, the Python examples of the library page run as written; no page shows a raw
Sphinx role, maths render with the vendored MathJax, the site works from file://, every example
page has a picture, and the command outputs quoted on the pages are what the CLI prints now."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    site = tmp_path_factory.mktemp("docs") / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    res = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return site


def test_site_builds_strict_and_lists_every_verb(site):
    cli_page = (site / "cli.html").read_text()
    from typer.main import get_command

    from multispin import cli

    for verb in get_command(cli.app).commands:
        assert f"multispin {verb}" in cli_page, verb
    assert "multispin.api.plan" in (site / "api.html").read_text()


RAW_ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|exc|obj):`")


def test_no_page_shows_a_raw_role_and_references_are_links(site):
    """mkdocstrings renders cross-references written [name][dotted.path]; a Sphinx role
    (:func:`x`) would show as raw text. Negative control: the pattern finds one."""
    assert RAW_ROLE.search(":func:`plan`")
    pages = {p.relative_to(site).as_posix(): p.read_text() for p in site.rglob("*.html")}
    assert not {name for name, html in pages.items() if RAW_ROLE.search(html)}
    api = pages["api.html"]
    assert 'href="#multispin.api.plan"' in api and 'href="#multispin.system.scenario.Scenario"' in api


def _docstrings_with_a_role(source: str) -> list[str]:
    """The module, class and function docstrings of ``source`` that hold a Sphinx role."""
    import ast

    nodes = [
        n
        for n in ast.walk(ast.parse(source))
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    return [doc for doc in (ast.get_docstring(n) for n in nodes) if doc and RAW_ROLE.search(doc)]


def test_no_docstring_keeps_a_sphinx_role():
    """Docstrings write cross-references as mkdocstrings links ([`x`][multispin.path], for what
    the API page renders) or plain `x`: a page that renders a module later shows no raw role.
    Negative control: a role in a function docstring is found."""
    assert _docstrings_with_a_role('def f():\n    """See :func:`~multispin.api.plan`."""\n')
    assert not _docstrings_with_a_role('def f():\n    """See [`plan`][multispin.api.plan]."""\n')
    src = ROOT / "src" / "multispin"
    found = sorted(p.relative_to(src).as_posix() for p in src.rglob("*.py") if _docstrings_with_a_role(p.read_text()))
    assert not found, f"docstrings with a Sphinx role: {found}"


def test_maths_render_with_the_vendored_mathjax(site):
    page = (site / "system-model.html").read_text()
    assert page.count('class="arithmatex"') >= 5 and "T_\\mathrm{comp}" in page
    assert (
        'src="javascripts/mathjax/tex-svg.js"' in page
        and (site / "javascripts/mathjax/tex-svg.js").stat().st_size > 10**6
    )


def test_the_site_works_from_file_urls(site):
    """Pages are page.html (use_directory_urls: false): a link to a folder opens a directory
    listing under file://, so no internal link may end in '/'."""
    for page in site.rglob("*.html"):
        if page.name == "404.html":  # served by a web server only, with absolute links
            continue
        for href in re.findall(r'href="([^"#]+)"', page.read_text()):
            if "://" in href or href.startswith(("mailto:", "data:")):
                continue
            assert not href.endswith("/"), (page.name, href)
            assert (page.parent / href).resolve().exists(), (page.name, href)


def _remote_assets(html: str) -> list[str]:
    """The scripts, stylesheets and fonts a page would fetch from the network."""
    fetched = re.findall(r"<script\b[^>]*>", html) + re.findall(r"<link\b[^>]*(?:stylesheet|preconnect)[^>]*>", html)
    return [url for tag in fetched for url in re.findall(r'(?:src|href)="((?:https?:)?//[^"]+)"', tag)]


def test_the_site_needs_no_network(site):
    """Opened from file:// with no network (a laptop on a train, a closed lab), every script and
    stylesheet a page loads is in the site: the search's iframe-worker shim and MathJax are
    vendored, the theme uses the system's fonts. Negative control: the CDN shim the offline
    plugin adds unless told otherwise is found."""
    assert _remote_assets('<script src="https://unpkg.com/iframe-worker/shim"></script>')
    for page in site.rglob("*.html"):
        assert not _remote_assets(page.read_text()), page.name
    index = (site / "index.html").read_text()
    assert 'src="javascripts/iframe-worker/shim.js"' in index
    assert (site / "javascripts/iframe-worker/shim.js").stat().st_size > 500


def _example_pages():
    return sorted((ROOT / "docs" / "examples").glob("*.md"))


# pages of verbs that draw no figure (their quoted output is the picture); a page listed here
# that gains a picture, or a page not listed that loses its own, fails the test
NO_PICTURE_YET: set[str] = set()


def test_example_pages_show_a_picture():
    with_picture = {
        p.name for p in _example_pages() if re.search(r"!\[[^\]]*\]\(\.\./images/[\w.-]+\.png\)", p.read_text())
    }
    for p in _example_pages():
        for img in re.findall(r"\(\.\./images/([\w.-]+\.png)\)", p.read_text()):
            assert (ROOT / "docs" / "images" / img).exists(), img
    assert with_picture == {p.name for p in _example_pages()} - NO_PICTURE_YET


OUTPUT = re.compile(r"<!-- output: (.+?) -->\n```text\n(.*?)```", re.S)


@pytest.mark.integration  # runs the quoted commands, the testbed over sockets among them
def test_quoted_outputs_are_what_the_cli_prints_now(multispin, tmp_path):
    """Each block marked `<!-- output: ARGS -->` is the real output of `multispin ARGS` (``{tmp}``:
    a scratch folder): every line of it (but the `$ command` line) is a line the command prints
    today."""
    import shlex

    found = 0
    for page in _example_pages():
        for args, block in OUTPUT.findall(page.read_text()):
            found += 1
            res = multispin(*shlex.split(args.replace("{tmp}", str(tmp_path))))
            assert res.code == 0, (page.name, res.err)
            printed = {ln.rstrip() for ln in res.out.splitlines()}
            stale = [ln for ln in block.splitlines() if not ln.startswith("$ ") and ln.rstrip() not in printed]
            assert not stale, (page.name, args, stale[:3])
    assert found >= 2


def test_library_page_examples_run(capsys):
    text = (ROOT / "docs" / "examples" / "library.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 2
    for code in blocks:
        exec(compile(code, "docs/examples/library.md", "exec"), {})
    out = capsys.readouterr().out
    assert "tokens/s" in out and "simulated" in out


# ---------------------------------------------------------------------------- documented commands

DOC_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BASH_BLOCK = re.compile(r"```(?:bash|sh|console)\n(.*?)```", re.S)


def documented_commands() -> list[tuple[str, list[str]]]:
    """(page, argv) of every `multispin ...` line of a bash block in the README and docs/ (a
    trailing comment and a redirection dropped; `\\` continuations joined)."""
    import shlex

    out = []
    for page in DOC_PAGES:
        for block in BASH_BLOCK.findall(page.read_text()):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.strip().removeprefix("$ ")
                if not re.match(r"^(\.venv/bin/)?multispin ", line):
                    continue
                argv = shlex.split(line, comments=True)[1:]
                for cut in (">", ">>", "|", "&&", "&", "2>&1"):
                    if cut in argv:
                        argv = argv[: argv.index(cut)]
                out.append((page.relative_to(ROOT).as_posix(), argv))
    return out


def test_every_documented_command_parses():
    """Every command of the README and docs/ names a verb and flags that exist, with values its
    flags accept (parsed as the CLI parses them, not run: a full reproduction takes half an hour;
    the ones that run offline in seconds run in the tests of their verbs, and the measure/profile →
    optimize chains below). Negative control: a misspelt flag fails."""
    from typer import Exit
    from typer._click.exceptions import UsageError
    from typer.main import get_command

    from multispin import cli

    group = get_command(cli.app)

    def parse(argv: list[str]) -> None:
        with group.make_context("multispin", list(argv)) as ctx:
            verb = group.get_command(ctx, argv[0])
            assert verb is not None, f"no verb {argv[0]!r}"
            rest = argv[1:]
            if hasattr(verb, "get_command"):  # a verb with sub-verbs (scenario show, keys server)
                with verb.make_context(argv[0], list(rest), parent=ctx) as sub:
                    verb = verb.get_command(sub, rest[0])
                    rest = rest[1:]
            try:
                verb.make_context(argv[0], list(rest), parent=ctx)
            except Exit:  # --help, --version
                pass

    with pytest.raises(UsageError):
        parse(["optimize", "--pdl-dbmm", "16"])
    commands = documented_commands()
    assert len(commands) >= 60
    bad = []
    for page, argv in commands:
        try:
            parse(argv)
        except (UsageError, AssertionError) as exc:
            bad.append((page, " ".join(argv), str(exc)))
    assert not bad, bad


# "measure (or profile), then optimize": the optimize lines run as written, in a folder where the
# profiles they read exist. `measure`/`profile` on the real pair take minutes; the profiles the
# package ships (the same commands' output, docs/acceptance.md) stand in for their files.
PROFILE_STAND_INS = {"profile.json": "acceptance-q4g64-sharegpt-t1-topk1024.json", "compute.json": "compute.json"}


@pytest.mark.slow
def test_measure_or_profile_then_optimize_runs_as_documented(multispin, tmp_path, monkeypatch):
    """Before: all five exited 2 (the default scenario has the Qwen vocabulary and refused a
    SmolLM2 profile)."""
    import shutil

    shipped = ROOT / "src" / "multispin" / "data" / "profiles" / "smollm2-135m"
    for name, source in PROFILE_STAND_INS.items():
        shutil.copy(shipped / source, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    chain = [
        (page, argv)
        for page, argv in documented_commands()
        if argv[0] in ("optimize", "scenario")
        and any(a in argv for a in ("--acceptance-profile", "--compute-profile", "show"))
    ]
    runnable = [
        (p, a)
        for p, a in chain
        if not any(x.endswith(".json") and x not in PROFILE_STAND_INS and x != "c.json" for x in a)
    ]
    ran = 0
    for page, argv in runnable:
        if argv[:2] == ["scenario", "show"]:  # `scenario show PRESET > my-scenario.yaml`
            res = multispin(*argv)
            (tmp_path / "my-scenario.yaml").write_text(res.out)
        elif "c.json" in argv:  # the tiny profile of the optimize page: made by its own line, in seconds
            if not (tmp_path / "c.json").exists():
                assert (
                    multispin(
                        "profile",
                        "--pair",
                        "tiny",
                        "--max-batch",
                        "2",
                        "--max-draft-len",
                        "2",
                        "--repeats",
                        "1",
                        "--out",
                        "c.json",
                    ).code
                    == 0
                )
            res = multispin(*argv, "--n-saa", "50")
        else:
            res = multispin(*argv, "--n-saa", "50")  # N_SAA only shortens the test: the scenario is as written
        assert res.code == 0, (page, " ".join(argv), res.err)
        ran += 1
    assert ran >= 6, runnable


def _prose(html: str) -> str:
    """A page's text outside maths, code and scripts."""
    html = re.sub(r'<(span|div) class="arithmatex">.*?</\1>', "", html, flags=re.S)
    return re.sub(r"<code>.*?</code>|<pre.*?</pre>|<script.*?</script>", "", html, flags=re.S)


RAW_TEX = re.compile(r"[^\s<>]{0,20}[_^]\{[^}]*\}")


def test_pages_render_as_written(site):
    """A `*` in prose is emphasis to Markdown (T*(R) lost its star and turned paragraphs italic);
    list items need four spaces of indentation (the 5-step protocol rendered as 9 steps); TeX
    belongs inside \\( \\) (raw `_{}`/`^{}` showed as typed); the search works from file:// (its
    index inlined by the offline plugin). Negative control: the raw-TeX pattern finds one."""
    assert RAW_TEX.search("gains L_{s,k} tokens")
    optimiser = (site / "optimiser.html").read_text()
    assert optimiser.count("T*(R)") >= 4 and "<em>(R)" not in optimiser
    model = (site / "system-model.html").read_text()
    start = model.index("Plan (proactive)")
    protocol = model[model.rindex("<ol>", 0, start) : model.index("</ol>", start)]
    top_level = re.sub(r"<ul>.*?</ul>", "", protocol, flags=re.S)
    assert top_level.count("<li>") == 5
    raw = {
        p.name: RAW_TEX.findall(_prose(p.read_text()))
        for p in site.rglob("*.html")
        if p.name not in ("api.html", "cli.html")
    }
    assert not {k: v for k, v in raw.items() if v}
    assert (site / "search" / "search_index.js").exists()


def test_every_test_file_the_docs_name_exists():
    """A page that says "checked by tests/x.py" must name a file that is there (two moved in the
    acceptance package's move while their pages kept the old folder). Control: a made-up path is
    reported."""
    root = Path(__file__).resolve().parents[1]

    def missing(text: str) -> set[str]:
        return {p for p in re.findall(r"tests/[\w/]+\.py", text) if not (root / p).exists()}

    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    assert {str(p.relative_to(root)): missing(p.read_text()) for p in pages if missing(p.read_text())} == {}
    assert missing("see tests/nowhere/test_gone.py") == {"tests/nowhere/test_gone.py"}
