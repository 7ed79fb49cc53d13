"""The demo's device pools share their prompts' prefills (`models.prefill_store`): the results are
those of pools that prefill every prompt themselves, field for field (the host's timings
masked: benchmarks/compare_demo_outputs.py), and a store that changes its entries is caught."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from multispin.experiments import demo
from multispin.experiments.demo import DemoConfig, run_demo
from multispin.models.prefill_store import DraftPrefills
from multispin.models.registry import resolve_pair

# real sockets, processes or models: `make test-fast` leaves these out
pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _compare():
    spec = importlib.util.spec_from_file_location("compare_demo_outputs", BENCH / "compare_demo_outputs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["compare_demo_outputs"] = module
    spec.loader.exec_module(module)
    return module.differences


def _demo(out: Path) -> Path:
    # two drafting policies: the second run's pool reads what the first one's stored
    config = DemoConfig.make(
        pair="tiny", devices=3, rounds=4, max_new_tokens=6, out=out, seed=1, policies=("adaptive", "all_dl")
    )
    run_demo(config, resolve_pair("tiny"))
    return out


@pytest.fixture(scope="module")
def fresh_pools(tmp_path_factory):
    """The demo as before: every pool prefills its prompts itself."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(demo, "shared_prompt_prefills", lambda pair: contextlib.nullcontext())
        return _demo(tmp_path_factory.mktemp("fresh"))


def test_shared_prefills_leave_every_result_as_fresh_pools_give_it(fresh_pools, tmp_path, monkeypatch):
    hits = tmp_path / "hits"
    load = DraftPrefills.load

    def counted(self, key):  # in the forked pools: each hit appends a line
        entry = load(self, key)
        if entry is not None:
            with hits.open("a") as fh:
                fh.write(key + "\n")
        return entry

    monkeypatch.setattr(DraftPrefills, "load", counted)
    shared = _demo(tmp_path / "shared")
    assert hits.exists() and len(hits.read_text().split()) >= 3  # the second run read every first prompt
    assert _compare()(fresh_pools, shared) == []


def test_control_a_store_that_rounds_its_entries_is_caught(fresh_pools, tmp_path, monkeypatch):
    save = DraftPrefills.save

    def halved(self, key, layers, rows):  # "half the size": bfloat16 entries, read back widened
        def rounded(t):
            return t.to(torch.bfloat16).to(t.dtype)

        save(self, key, [(rounded(k), rounded(v)) for k, v in layers], rounded(rows))

    monkeypatch.setattr(DraftPrefills, "save", halved)
    assert _compare()(fresh_pools, _demo(tmp_path / "rounded")) != []
