import fcntl
import os
import sys
import tempfile
from pathlib import Path

import pytest
import torch

# The suite's models are tiny: intra-op threads only add spin-wait contention on a 2-core CI box
# (measured here: a 64-wide linear layer took 16 ms with 2 threads under load, 0.1 ms with 1).
torch.set_num_threads(int(os.environ.get("MULTISPIN_TEST_THREADS", "1")))


# `multispin(*args)`: run the command line in this process (tests/cli_fixture.py)
pytest_plugins = ["cli_fixture"]

LONG_MARKERS = ("slow", "integration")


def pytest_collection_modifyitems(config, items):
    """The modules that hold slow or integration tests run first, each module's tests kept
    together (its fixtures built once): split over workers, the long tests start early and the
    short ones fill in behind them, instead of one long test running alone at the end."""

    def path(item):
        return item.nodeid.split("::", 1)[0]

    has_long = {path(item) for item in items if any(item.get_closest_marker(m) for m in LONG_MARKERS)}
    items.sort(key=lambda item: path(item) not in has_long)  # stable: order kept within each group


@pytest.fixture
def one_ray_instance():
    """Hold a host-wide lock while a test starts its own local Ray instance: two local instances
    started at once by two test workers contend for Ray's default ports, and one of them waited
    out its deadline (a suite run on 2 cores)."""
    with open(os.path.join(tempfile.gettempdir(), "multispin-tests-ray.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture
def examples(monkeypatch):
    """docs/examples on the import path, as a user who runs the docs' commands there has it;
    the example module is forgotten after the test."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "docs" / "examples"))
    yield
    sys.modules.pop("own_policies", None)
