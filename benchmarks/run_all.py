"""Run every benchmark in this folder, one after another (`make bench`)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

here = pathlib.Path(__file__).parent
failed = []
for script in sorted(here.glob("bench_*.py")):
    print(f"\n=== {script.name} ===", flush=True)
    if subprocess.run([sys.executable, str(script)]).returncode != 0:
        failed.append(script.name)
if failed:
    sys.exit(f"failed: {', '.join(failed)}")
