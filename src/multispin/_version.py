"""The package version, in a module of its own so that anything may import it without importing
the package's ``__init__`` (which re-exports the whole API)."""

import subprocess
from pathlib import Path

__version__ = "0.1.0"


def source_version() -> str:
    """``git describe --always --dirty`` of the checkout this package runs from (``v0.1-12-gabc1234``);
    the package version when it is not in a git checkout (an installed wheel) or git is missing."""
    here = Path(__file__).resolve().parent
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=here, capture_output=True, text=True, timeout=10
        )
        if top.returncode != 0 or not (Path(top.stdout.strip()) / "src" / "multispin").resolve() == here:
            return __version__
        res = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"], cwd=here, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return __version__
    return res.stdout.strip() if res.returncode == 0 and res.stdout.strip() else __version__
