"""One fair coin: `generate --mode random` (the in-process loop's `RandomMode`) and `testbed
--policy random` (the planner's `random` rule) flip the same coin, keyed in the one registry of
random streams, so runs of either are paired on common random numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from multispin.errors import ConfigError
from multispin.runtime.round.local import RandomMode, mode_policy
from multispin.runtime.round.planner import ScenarioPlanner
from multispin.speculative.codecs import make_codec
from multispin.system.channel import STREAMS, coin_uniforms, fair_coin_ul
from multispin.system.payload import WirePayload
from multispin.system.scenario import get_preset

CODEC = make_codec("dense-fp32")
WIRE = WirePayload.from_codecs(CODEC, CODEC, 12, 20)


def _planner(seed: int, k: int = 6) -> ScenarioPlanner:
    sc = get_preset("paper-qwen").override({"devices.count": k, "seed": seed, "optimizer.n_saa": 50})
    return ScenarioPlanner(sc, range(k), WIRE, policy="random", online=False)


def _rejected_sets(k: int, rounds: int, rng):
    """A non-empty random rejected set per round, in a random order."""
    for r in range(rounds):
        ids = [int(d) for d in rng.permutation(k)[: int(rng.integers(1, k + 1))]]
        yield r, ids


def _agreement(coin_seed: int, planner_seed: int, coin=None, rounds: int = 30, k: int = 6):
    """(rounds on which the loop's coin and the planner's chose the same modes, rounds, modes seen)."""
    coin = coin or RandomMode(coin_seed)
    planner = _planner(planner_seed, k)
    same, seen = 0, set()
    for r, rejected in _rejected_sets(k, rounds, np.random.default_rng(99)):
        rplan = planner.plan(r, range(k))
        by_planner = planner.modes(rplan, rejected)
        by_loop = coin(r, rejected)
        seen |= set(by_loop.values())
        same += by_planner == by_loop
    return same, rounds, seen


def test_generate_and_testbed_choose_the_same_modes_for_the_same_rejected_sets():
    same, rounds, seen = _agreement(4, 4)
    assert seen == {"ul", "dl"}  # both links drawn: not a constant rule agreeing with itself
    assert same == rounds


def test_the_agreement_check_fails_for_another_seed_and_for_the_old_ad_hoc_key():
    """Negative controls: a coin of another seed, and the coin the loop used to flip (key
    [seed, round, 7], outside the registry), disagree with the planner on most rounds."""

    def old_coin(seed):
        def flip(r, rejected):
            rng = np.random.default_rng([seed, r, 7])
            return {d: ("ul" if rng.random() < 0.5 else "dl") for d in rejected}

        return flip

    for coin in (RandomMode(5), old_coin(4)):
        same, rounds, _ = _agreement(4, 4, coin=coin)
        assert same < rounds // 2


def test_a_devices_flip_does_not_depend_on_who_else_was_rejected():
    alone = {d: bool(fair_coin_ul(3, 7, [d])[0]) for d in range(8)}
    together = dict(zip(range(8)[::-1], fair_coin_ul(3, 7, list(range(8))[::-1]).tolist()))
    assert alone == together
    assert 0 < sum(alone.values()) < 8


def test_the_coin_is_fair_and_keyed_in_the_registry():
    u = coin_uniforms(0, 0, range(20_000))
    assert abs(float(np.mean(u < 0.5)) - 0.5) < 4 * 0.5 / np.sqrt(u.size)  # 4σ: fails on a biased coin
    assert u[5] == np.random.default_rng([0, STREAMS["coin"], 0, 5]).random()
    assert len(set(STREAMS.values())) == len(STREAMS)  # no two streams share a key


def test_random_is_the_fair_coin_and_other_names_are_refused():
    assert mode_policy("random", 3) == RandomMode(3)
    with pytest.raises(ConfigError, match="mode: unknown value 'mixed' \\(allowed: ul, dl, random, coupled\\)"):
        mode_policy("mixed", 3)


@pytest.mark.integration
def test_the_commands_flip_one_coin(multispin, tmp_path):
    """End to end, through the command line: every (round, device) that both a `generate --mode
    random` run and a `testbed --policy random` run rejected got the same mode in both."""
    seed = "3"
    gen = multispin(
        "generate",
        "--pair",
        "tiny",
        "--devices",
        "4",
        "--draft-len",
        "4",
        "--mode",
        "random",
        "--seed",
        seed,
        "--max-new-tokens",
        "40",
        "--json",
    )
    assert gen.code == 0, gen.err
    by_gen = {
        (r, d["device_id"]): m
        for d in json.loads(gen.out)["devices"]
        for r, m in enumerate(d["modes"])
        if m is not None
    }
    tb = multispin(
        "testbed",
        "--pair",
        "tiny",
        "--devices",
        "4",
        "--policy",
        "random",
        "--seed",
        seed,
        "--rounds",
        "12",
        "--runner",
        "thread",
        "--out",
        str(tmp_path / "tb"),
    )
    assert tb.code == 0, tb.err
    rows = [json.loads(x) for x in (tmp_path / "tb" / "rounds.jsonl").read_text().splitlines()]
    by_tb = {(row["round"], int(d)): m for row in rows for d, m in row["modes"].items()}
    both = set(by_gen) & set(by_tb)
    assert len(both) >= 8 and {by_gen[k] for k in both} == {"ul", "dl"}  # enough common flips to fail by chance
    assert {k: by_gen[k] for k in both} == {k: by_tb[k] for k in both}
