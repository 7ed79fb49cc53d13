#!/usr/bin/env bash
# The GPU check of issue 24 in one command, for a fresh GPU machine with this repository copied:
#
#   benchmarks/gpu_check.sh [--device cuda|cpu|auto] [--pair smollm2-135m] [--out gpu_check.json] [--quick]
#
# 1. makes the project importable from its own files: `pip install -e .` (pyproject.toml) when
#    `import multispin` fails; wheels in .whl/ (if any) are installed first, for machines that
#    reach no package index; where pip cannot install, it runs from src/ with the packages present;
# 2. runs benchmarks/gpu_check.py (progress on stderr, one JSON at --out), under a 7.5-minute limit.
# PYTHON selects the interpreter (default python3). Models come from ~/.cache/multispin/models.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { echo "[gpu_check.sh] $*" >&2; }

if ! "$PY" -c "import multispin" 2>/dev/null; then
  if compgen -G ".whl/*.whl" >/dev/null; then
    say "installing the wheels in .whl/"
    "$PY" -m pip install -q --no-index --no-deps .whl/*.whl
  fi
  say "installing the project from pyproject.toml (pip install -e .)"
  if ! "$PY" -m pip install -q -e . >&2; then
    say "pip could not install; running from src/ with the packages already present"
    export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
  fi
fi
missing=$("$PY" - <<'PY'
import importlib.util
mods = ["torch", "transformers", "numpy", "scipy", "pydantic", "typer", "zmq", "msgpack", "gguf", "yaml"]
print(" ".join(m for m in mods if importlib.util.find_spec(m) is None))
PY
)
if [ -n "$missing" ]; then
  say "missing Python packages: $missing (pip install them, or put their wheels in .whl/)"
  exit 2
fi
say "running benchmarks/gpu_check.py $*"
exec timeout 450 "$PY" -u benchmarks/gpu_check.py "$@"
