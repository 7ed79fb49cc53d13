"""Measured profiles shipped with the package, and the ``smollm2-cpu`` preset built from them."""

from __future__ import annotations

import json
import statistics

import pytest

from multispin.acceptance.shipped import (
    acceptance_profiles,
    acceptance_table,
    compute_profile_path,
    device_alpha,
    profile_dir,
    profile_folder,
)
from multispin.models.registry import REGISTERED
from multispin.system import get_preset

PAIR = "smollm2-135m"
DRAFTS = REGISTERED[PAIR].default_drafts
TASKS = ("humaneval", "mt_bench", "mt_bench_math", "sharegpt")
SAMPLED = {"temperature": 1.0, "top_k": 1024, "top_p": 1.0}  # the testbed's default policy


def test_the_default_pair_has_a_full_acceptance_table():
    table = acceptance_table(PAIR, SAMPLED)
    assert set(table) == set(DRAFTS)
    for draft, row in table.items():
        assert set(row) == set(TASKS), draft
        assert all(isinstance(a, float) and 0.0 < a < 1.0 for a in row.values()), (draft, row)


def test_table_entries_match_the_files_and_device_alpha():
    d = profile_dir(PAIR)
    assert d is not None and d.is_dir()
    for draft in DRAFTS:
        for source, task, label in (("sharegpt", "chat", "sharegpt"), ("humaneval", "code", "humaneval")):
            data = json.loads((d / f"acceptance-{draft}-{label}-t1-topk1024.json").read_text())
            assert (data["pair"], data["draft"], data["task"], data["source"]) == (PAIR, draft, task, source)
            assert data["draft_len"] == 8 and data["seed"] == 0 and data["sampling"] == SAMPLED
            lo, hi = data["alpha_ci95"]
            assert lo <= data["alpha"] <= hi
            assert device_alpha(PAIR, draft, task, SAMPLED) == data["alpha"] == data["tasks"][label]["alpha"]


def test_profiles_of_another_policy_are_not_mixed_in():
    greedy = {"temperature": 0.0, "top_k": 0, "top_p": 1.0}
    other = acceptance_table(PAIR, greedy)
    sampled = acceptance_table(PAIR, SAMPLED)
    assert all(other.get(d, {}).get(t) != a for d, row in sampled.items() for t, a in row.items())
    assert acceptance_table(PAIR, {"temperature": 0.5, "top_k": 0, "top_p": 1.0}) == {}


def test_compute_profile_is_found_and_fits_a_scenario():
    path = compute_profile_path(PAIR)
    assert path is not None and path.name == "compute.json"
    data = json.loads(path.read_text())
    assert set(data["draft_latency_s_per_token"]) == set(DRAFTS)
    assert data["t_ver0_s"] >= 0 and data["t_ver1_s"] >= 0 and data["t_ver_tok_s"] >= 0
    assert "host" in data and "torch_threads" in data["host"]
    sc = get_preset("smollm2-cpu").with_compute_profile(path, draft="q4g64")  # the preset of the pair's V
    assert sc.compute.t_ver0_s == data["t_ver0_s"]


@pytest.mark.parametrize("pair", ["no-such-pair", "tiny", "a/b:c/d", "../profiles", "", "."])
def test_missing_pair_has_no_profiles(pair):
    assert profile_dir(pair) is None
    assert acceptance_table(pair) == {}
    assert compute_profile_path(pair) is None
    assert device_alpha(pair, "q4g64", "chat") is None


def test_unmeasured_draft_or_task_is_none():
    assert device_alpha(PAIR, "q2g32", "chat", SAMPLED) is None
    assert device_alpha(PAIR, "q4g64", "gsm8k", SAMPLED) is None


def test_smollm2_cpu_preset_carries_the_measured_numbers():
    sc = get_preset("smollm2-cpu")
    compute = json.loads(compute_profile_path(PAIR).read_text())
    # numbers in the preset are the files' numbers rounded to 4 significant digits
    close = {"rel": 1e-3}
    assert sc.compute.t_ver0_s == pytest.approx(compute["t_ver0_s"], **close)
    assert sc.compute.t_ver1_s == pytest.approx(compute["t_ver1_s"], **close)
    assert sc.compute.t_ver_tok_s == pytest.approx(compute["t_ver_tok_s"], **close)
    mean_draft = statistics.fmean(compute["draft_latency_s_per_token"][d] for d in DRAFTS)
    assert sc.devices.draft_latency_s_per_token == pytest.approx(mean_draft, **close)
    # α per task: the q4g64 draft's measurement under the testbed's policy (chat: ShareGPT, code: HumanEval)
    assert sc.tasks.assumed is False
    assert "q4g64" in sc.tasks.source
    assert set(sc.tasks.acceptance) == {"chat", "code"}
    for task in ("chat", "code"):
        assert sc.tasks.acceptance[task] == pytest.approx(device_alpha(PAIR, "q4g64", task, SAMPLED), **close)
    # the paper's radio, SmolLM2's vocabulary in the payload
    assert sc.radio == get_preset("paper-qwen").radio
    assert sc.payload.vocab_size == 49_152


def test_a_cross_pair_keeps_its_profiles_beside_the_targets_own_drafts():
    cross, target = "smollm2-135m:qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b"
    assert profile_folder(cross) == profile_folder(target) == target
    own, beside = acceptance_profiles(cross), acceptance_profiles(target)
    assert own and beside
    assert {p["pair"] for p in own} == {cross} and {p["draft"] for p in own} == {"smollm2-135m"}
    assert {p["pair"] for p in beside} == {target}  # the target's own drafts only: never mixed
    assert compute_profile_path(cross) is None  # a compute profile is a pair's own (none here)


@pytest.mark.parametrize("pair", ["a:b:c", "x:../y", ":", "a:", 7])
def test_names_that_are_not_pairs_have_no_profile_folder(pair):
    assert profile_folder(pair) is None
    assert acceptance_profiles(pair) == []
