"""Run the `multispin` command in this process, as a user would from a shell."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from multispin import cli


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def multispin(capsys, tmp_path, monkeypatch):
    """``multispin(*args)`` → Run(code, out, err) through the real entry point (``cli.main``),
    so the one-line error formatting is what is tested. It runs in a fresh folder, as a user's
    shell would be anywhere: a verb's default output folders (out/demo, …) never meet a user's own
    runs in the checkout (after `make demo`, `demo` refused to write over out/demo first)."""
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> Run:
        capsys.readouterr()
        try:
            cli.main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        cap = capsys.readouterr()
        return Run(code, cap.out, cap.err)

    return run
