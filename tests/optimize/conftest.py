"""Fixtures of the optimiser tests (builders live in _builders.py)."""

from __future__ import annotations

import pytest

from multispin.system import World, get_preset


@pytest.fixture(scope="session")
def qwen_world():
    return World(get_preset("paper-qwen"))
