"""Tokens of a few runs, pinned byte for byte across refactors of the runtime.

Each run's tokens and round records (γ, accepted counts, rejection positions, modes, bits) are
reduced to canonical JSON and compared with tests/runtime/round/data/pinned_runs.json: the in-process
loop, the networked testbed (thread devices over ZeroMQ) and the testbed with the optimiser in the
loop, all on the tiny pair (float64 weights, so no rounding flips a token) with random modes (the fair coin).

A change of behaviour fails here. If the change is intended, regenerate the file with
``MULTISPIN_REPIN=1 pytest tests/runtime/round/test_pinned_tokens.py`` and say why in the commit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from doubles import FixedDraftLengths
from multispin.models.hf import HFBatchedLM, HFSequenceLM
from multispin.models.prompts import encode_prompt
from multispin.models.tiny import load_tiny_pair
from multispin.runtime.round import roles
from multispin.runtime.round.engine import PolicyPair
from multispin.runtime.round.local import RandomMode, run_rounds
from multispin.speculative.codecs import make_codec
from multispin.speculative.warp import SamplingParams

PINNED = Path(__file__).parent / "data" / "pinned_runs.json"
PROMPTS = ["Hello edge server", "The channel is", "abc", "Speculative decoding at the edge"]
GAMMAS = {0: 3, 1: 5, 2: 0, 3: 7}
RECORD_KEYS = (
    "round",
    "draft_len",
    "num_accepted",
    "rejection_position",
    "mode",
    "tokens_gained",
    "payload_bits",
    "uplink_bits",
    "downlink_bits",
    "correction_bits",
)


@pytest.fixture(scope="module")
def pair():
    return load_tiny_pair()


def _records(rounds) -> list[list]:
    return [[getattr(r, k) for k in RECORD_KEYS] for r in rounds]


def _in_process(pair, seed: int) -> dict:
    ul, dl = make_codec("dense-fp16"), make_codec("dense-fp32")
    sampling = SamplingParams(temperature=1.0)
    server = roles.VerifierServer(HFBatchedLM(pair.target, pair.vocab_size), sampling, ul, dl, seed)
    names = list(pair.drafts)
    devices = {
        k: roles.DraftDevice(
            k,
            HFSequenceLM(pair.drafts[names[k % len(names)]], pair.vocab_size),
            sampling,
            ul,
            dl,
            seed,
            encode_prompt(pair, PROMPTS[k]),
        )
        for k in range(4)
    }
    logs = run_rounds(server, devices, PolicyPair(FixedDraftLengths(GAMMAS), RandomMode(seed)), 24, pair.eos_token_ids)
    return {str(k): {"tokens": devices[k].generated, "records": _records(logs[k])} for k in devices}


def _networked(pair, seed: int) -> dict:
    from multispin.runtime.net.launcher import DeviceSetup, run_local_testbed
    from multispin.runtime.net.server_config import ServerConfig

    summary = run_local_testbed(
        pair,
        ServerConfig.make(
            max_new_tokens=24, seed=seed, ul_codec="dense-fp16", dl_codec="dense-fp32", round_timeout_s=60
        ),
        DeviceSetup(4, prompts=PROMPTS, runner="thread"),
        policy=PolicyPair(FixedDraftLengths(GAMMAS), RandomMode(seed)),
        secret="pinned-secret-0123456789",
        timeout_s=300,
    )
    assert summary.consistent and summary.server.stop_reason == "done"
    return {
        str(k): {"tokens": rec.generated, "records": _records(rec.rounds)}
        for k, rec in sorted(summary.server.devices.items())
    }


def _planned(pair) -> dict:
    from multispin.experiments.testbed import TestbedConfig, run_testbed

    cfg = TestbedConfig.make(
        pair="tiny",
        devices=3,
        rounds=4,
        max_new_tokens=60,
        policy="random",
        runner="thread",
        seed=2,
        drafts=list(pair.drafts),
    )  # as pinned: drafts cycled
    res = run_testbed(cfg, pair=pair)
    rows = [
        {
            k: row.to_dict()[k]
            for k in ("gamma", "modes", "tokens_gained", "correction_bits", "uplink_bits", "downlink_bits")
        }
        for row in res.rounds
    ]
    return {"texts": {str(k): v for k, v in sorted(res.texts.items())}, "rounds": rows}


RUNS = {
    "in_process_seed11": lambda pair: _in_process(pair, 11),
    "in_process_seed5": lambda pair: _in_process(pair, 5),
    "networked_seed11": lambda pair: _networked(pair, 11),
    "planned_random_seed2": _planned,
}


def _canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


@pytest.mark.parametrize("name", list(RUNS))
def test_tokens_are_pinned(pair, name):
    got = json.loads(_canonical(RUNS[name](pair)))  # JSON round trip: tuples and int keys as stored
    if os.environ.get("MULTISPIN_REPIN"):
        pinned = json.loads(PINNED.read_text()) if PINNED.exists() else {}
        pinned[name] = got
        PINNED.parent.mkdir(parents=True, exist_ok=True)
        PINNED.write_text(json.dumps(pinned, sort_keys=True, indent=1) + "\n")
        pytest.skip("re-pinned")
    pinned = json.loads(PINNED.read_text())[name]
    assert _canonical(got) == _canonical(pinned)


@pytest.mark.integration
def test_networked_equals_in_process_pin():
    """The networked run is the in-process run, byte for byte (same seed, same policies)."""
    pinned = json.loads(PINNED.read_text())
    assert _canonical(pinned["networked_seed11"]) == _canonical(pinned["in_process_seed11"])
