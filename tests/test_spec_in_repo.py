"""The spec lives in the project. docs/system-model.md is the whole spec
(with the paper's claims, §6), and nothing refers to a file or folder outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "docs" / "system-model.md"
OUTSIDE = re.compile(r"SYSTEM_MODEL|shared folder|/work/|file:///")


def _project_files():
    for base in ("src", "docs", "tests", "benchmarks"):
        for p in (ROOT / base).rglob("*"):
            if p.is_file() and p.suffix in {".py", ".md", ".yml", ".yaml", ".toml", ".txt"}:
                yield p
    for name in ("README.md", "Makefile", "mkdocs.yml", "pyproject.toml"):
        yield ROOT / name


def test_the_spec_is_complete_in_the_docs():
    text = SPEC.read_text()
    for section in (
        "## 1. One round of the protocol",
        "## 2. Latency",
        "## 3. Goodput",
        "## 4. What moves over the air",
        "## 5. Optimisation",
        "## 6. Headline claims of the paper",
    ):
        assert section in text, section
    assert "8–15%" in text and "5–10%" in text  # the published claims


def test_nothing_refers_outside_the_repository():
    here = Path(__file__).resolve()
    found = {
        str(p.relative_to(ROOT)) for p in _project_files() if p.resolve() != here and OUTSIDE.search(p.read_text())
    }
    assert not found, f"references outside the repository (cite docs/system-model.md): {sorted(found)}"


def test_spec_citations_name_sections_that_exist():
    sections = set(re.findall(r"^##+ (\d+(?:\.\d+)?)\.? ", SPEC.read_text(), re.M))
    cited = {m for p in _project_files() for m in re.findall(r"docs/system-model\.md §(\d+(?:\.\d+)?)", p.read_text())}
    assert cited and cited <= sections, sorted(cited - sections)
