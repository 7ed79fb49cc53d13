# Front door: `make demo` (set up + main job) and `make test` (set up + whole suite).
# Only Python 3.10+ is needed; everything else is installed into .venv from the project's files.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed
# Test worker processes (pytest-xdist). Two, as on CI's 2 cores: the suite's network tests hold
# liveness deadlines, so more workers than cores is untested.
PYTEST_WORKERS ?= 2

.PHONY: demo test test-fast lint bench docs docs-screenshots setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# The CPU build of torch; an unpinned torch would pull a multi-GB CUDA build.
	$(PY) -m pip install --quiet "torch==2.13.0"
	# cluster: Ray, for the test of `reproduce --executor ray` (about 30 s to install)
	$(PY) -m pip install --quiet -e ".[test,docs,cluster]"
	touch $(STAMP)

# `multispin demo` never writes over an earlier run (it refuses, naming --out and --force): a
# second `make demo` keeps out/demo and writes to a new timestamped folder beside it.
demo: $(STAMP)
	@out=out/demo; if [ -e $$out/summary.json ] || [ -e $$out/demo.png ]; then \
	  out=out/demo-$$(date +%Y%m%d-%H%M%S); echo "out/demo holds an earlier run; this one writes to $$out"; fi; \
	  $(VENV)/bin/multispin demo --out $$out

# The whole suite, after the linters (CI runs this). worksteal: a worker that runs out of tests
# takes the other's pending ones (tests/conftest.py starts the long modules first); the 25
# slowest tests are listed at the end, where the suite's time goes.
test: lint
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist worksteal --durations=25

# The quick loop while editing: everything but the tests marked integration (real sockets,
# processes, models) or slow; 2 min 35 s on 2 idle cores (1,341 tests).
test-fast: $(STAMP)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist worksteal -m "not integration and not slow"

# Lint and import order (ruff), format (ruff format --check: nothing is rewritten here) and the
# types of the token math, the optimiser and the runtime (mypy); settings in pyproject.toml.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The documentation site (Material + mkdocstrings) into build/site; tests/test_docs.py builds it too.
# It works opened from disk (file://); `mkdocs serve` serves it with live reload.
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir build/site
	@echo "site in build/site: open build/site/index.html in a browser, or serve it with"
	@echo "  $(VENV)/bin/mkdocs serve   (then http://127.0.0.1:8000/)"

# PNGs of the built pages as headless Chromium renders them from file:// (build/screenshots)
docs-screenshots: docs
	$(PY) tools/docs_screenshots.py build/site build/screenshots

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info
