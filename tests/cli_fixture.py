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
def multispin(capsys):
    """``multispin(*args)`` → Run(code, out, err) through the real entry point (``cli.main``),
    so the one-line error formatting is what is tested."""

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
