"""Device pools (`multispin.runtime.net.pool`): many devices in one process, each with its own
session, key and socket, drafting in batched forwards. They must change nothing the server or a
user can see but the number of processes and forward passes:

- a pooled run and a run of lone devices (one process each) with the same seed give byte-identical
  texts, the same round records and the same bytes on the wire per device and round, and the
  pool really drafted its devices together (tiny pair, float64);
- the output law through a networked pool is the target's, in UL and in DL (the chi-square test of
  test_exactness on Markov models, device ids in steady-state jobs), its tokens are the in-process
  loop's, and an always-accept server fails the same test (negative control);
- several pools, with encrypted per-device keys, join one server on loopback;
- `multispin device --devices` runs a pool, and refuses bad ids and mixed flags with one line;
- a pool runs as a Ray actor (where Ray is installed).
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

import multispin.runtime.round.roles as roles
from doubles import FixedDraftLengths
from exactness_engine import DRAFT, MARG_T1, N_POSITIONS, P_PASS, PROMPT, T1, TARGET, VOCAB, run_engine
from exactness_stats import min_p_value
from multispin.errors import ConfigError
from multispin.models.base import LoadedPair
from multispin.models.synthetic import MarkovBatchedLM
from multispin.models.tiny import load_tiny_pair
from multispin.runtime.net import pool as pool_module
from multispin.runtime.net.launcher import DeviceSetup, device_threads, free_port, run_local_testbed
from multispin.runtime.net.pool import DevicePool, DraftBatcher, PoolDevice, parse_device_ids, run_pool
from multispin.runtime.net.server import EdgeServer
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.round.engine import PolicyPair
from multispin.runtime.round.local import RandomMode, fixed_policy
from multispin.runtime.security.keys import create_keyring

# real sockets, processes or models: `make test-fast` leaves these out
pytestmark = pytest.mark.integration

SECRET = "pool-test-secret-0123456789"
PROMPTS = ["Hello edge server", "The channel is", "abc", "Speculative decoding at the edge", "xyz"]


@pytest.fixture(scope="module")
def pair():
    return load_tiny_pair()


def _serve(server: EdgeServer) -> tuple[threading.Thread, dict]:
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault("summary", server.run()), daemon=True)
    th.start()
    assert server.ready.wait(60)
    return th, box


# ---- parsing ------------------------------------------------------------------------------------


def test_device_ids_parse_ranges_and_lists():
    assert parse_device_ids("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_device_ids("5") == [5]
    for bad in ("", "3-1", "a", "1,1", "0-2,2", "1-"):
        with pytest.raises(ConfigError, match="^devices: "):
            parse_device_ids(bad)


def test_a_failed_draft_batch_is_said_once_and_raised_in_each_device(monkeypatch, caplog):
    """The server sees only the pooled devices' connections end; the pool says why."""

    def broken(devices, gammas, coupled=()):
        raise KeyError(1)

    monkeypatch.setattr(pool_module, "draft_all", broken)
    batcher = DraftBatcher(threading.RLock(), gather_s=0.0)
    batcher.enter()
    dev = type("Dev", (), {"device_id": 3})()
    with caplog.at_level("WARNING", logger="multispin.pool"), pytest.raises(KeyError):
        batcher(dev, 4)
    assert [r.getMessage() for r in caplog.records] == ["draft batch of 1 devices failed: KeyError: 1"]


def test_a_pool_drafts_on_this_process_threads_and_a_process_per_device_on_one(monkeypatch):
    monkeypatch.setattr("torch.get_num_threads", lambda: 6)
    assert device_threads("pool", None) == 6
    assert [device_threads(r, None) for r in ("fork", "subprocess", "thread")] == [1, 1, 1]
    assert device_threads("pool", 2) == 2 and device_threads("fork", 3) == 3  # as asked


# ---- a pool and lone devices: the same texts, records and wire bytes ---------------------------


def _testbed(pair, runner, tmp_path, steady: bool):
    """Five devices with γ 1..4 and mixed modes: each writing one text (they finish at different
    rounds, so the pool's batches shrink), or in steady state (each device a queue of prompts, a
    new session per job, 8 rounds: every job lasts a round at least, so no queue runs out)."""
    k = 5
    jobs = (
        {"prompt_queues": [[PROMPTS[(d + j) % len(PROMPTS)] for j in range(8)] for d in range(k)]}
        if steady
        else {"prompts": PROMPTS}
    )
    rounds = 8 if steady else None
    gammas = {d + k * j: 1 + d % 4 for d in range(k) for j in range(8)}
    return run_local_testbed(
        pair,
        ServerConfig.make(
            max_new_tokens=24 if not steady else 8, rounds=rounds, seed=7, ul_codec="dense-fp16", round_timeout_s=120
        ),
        DeviceSetup(k, runner=runner, **jobs),
        policy=PolicyPair(FixedDraftLengths(gammas), RandomMode(7)),
        timeout_s=400,
        log_path=tmp_path / f"{runner}.jsonl",
    )


def _wire(summary_log) -> list[dict]:
    rows = [json.loads(line) for line in summary_log.read_text().splitlines()]
    return [
        {key: r[key] for key in ("round", "gamma", "modes", "payload_bytes", "wire_bytes_up", "wire_bytes_down")}
        for r in rows
        if r["event"] == "round"
    ]


@pytest.mark.slow
@pytest.mark.parametrize("steady", [False, True], ids=["one-text-each", "steady-state"])
def test_a_pool_and_lone_devices_give_byte_identical_texts_and_round_records(pair, tmp_path, steady):
    lone = _testbed(pair, "fork", tmp_path, steady)
    pooled = _testbed(pair, "pool", tmp_path, steady)
    assert lone.server.stop_reason == pooled.server.stop_reason == ("rounds" if steady else "done")
    assert pooled.consistent and lone.consistent
    assert pooled.tokens() == lone.tokens()
    ids = sorted(lone.server.devices)
    assert sorted(pooled.server.devices) == ids and len(ids) > (5 if steady else 4)
    assert all(pooled.devices[d]["text"] == lone.devices[d]["text"] for d in ids if d in lone.devices)
    for d in ids:
        assert [r.to_dict() for r in pooled.server.devices[d].rounds] == [
            r.to_dict() for r in lone.server.devices[d].rounds
        ], f"device {d}"
        assert pooled.server.devices[d].digest_match is True
    # what the server sees: the same bytes per device and round in both directions
    assert _wire(tmp_path / "pool.jsonl") == _wire(tmp_path / "fork.jsonl")
    modes = {r.mode for rec in pooled.server.devices.values() for r in rec.rounds}
    assert {"ul", "dl"} <= modes


@pytest.mark.slow
def test_control_a_pool_that_gives_devices_each_others_rows_is_caught(pair, tmp_path, monkeypatch):
    """Negative control for the comparison above: a batching bug (each device of a batch gets its
    neighbour's logits row; a lone device, its batch of one, is unaffected) shows in the tokens.
    The forked processes inherit the patched module."""
    lone = _testbed(pair, "fork", tmp_path, steady=False)
    real = roles._forward

    def rotated(devices, group, step):
        rows = real(devices, group, step)
        return {d: rows[group[(i + 1) % len(group)]] for i, d in enumerate(group)}

    monkeypatch.setattr(roles, "_forward", rotated)
    pooled = _testbed(pair, "pool", tmp_path, steady=False)
    assert pooled.consistent  # still a valid run, the server agrees with every device
    assert pooled.tokens() != lone.tokens()


def test_a_pool_drafts_its_devices_together_and_matches_lone_devices(pair, tmp_path):
    """In this process: the batcher ran batches of every device (one per round), and each device's
    tokens are those of a lone `DeviceClient` run against the same server settings."""
    gammas = {d: 2 + d % 3 for d in range(4)}

    def run(pool: bool):
        config = ServerConfig.make(port=0, expected_devices=4, max_new_tokens=20, seed=3, join_timeout_s=60)
        server = EdgeServer(config, pair, SECRET, policy=PolicyPair(FixedDraftLengths(gammas), RandomMode(3)))
        th, box = _serve(server)
        if pool:
            p = DevicePool(
                server.endpoint, pair, [[PoolDevice(d, PROMPTS[d])] for d in range(4)], secret=SECRET, gather_s=5.0
            )  # generous: every batch waits for all four
            outcomes = p.run()
        else:
            outcomes = [None] * 4
            threads = [
                threading.Thread(target=lambda d=d: outcomes.__setitem__(d, _lone(server.endpoint, pair, d)))
                for d in range(4)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)
            p = None
        th.join(300)
        summary = box["summary"]
        return {o.device_id: o.tokens for o in outcomes}, summary, p

    pooled, summary, p = run(pool=True)
    lone, lone_summary, _ = run(pool=False)
    assert pooled == lone
    assert {d: r.tokens for d, r in summary.devices.items()} == {d: r.tokens for d, r in lone_summary.devices.items()}
    assert summary.rounds == lone_summary.rounds
    # all four drafted together while all four were in the run (devices finish at different rounds)
    assert p.batcher.batch_sizes[0] == 4 and len(p.batcher.batch_sizes) <= summary.rounds


def _lone(endpoint, pair, d):
    from multispin.runtime.net.device import build_device_client

    return build_device_client(endpoint, d, SECRET, pair, None, PROMPTS[d]).run()


# ---- exactness through a pool -------------------------------------------------------------------

MARKOV = LoadedPair(name="markov", tokenizer=None, target=None, drafts={"markov": None}, vocab_size=VOCAB)
SLOTS, JOBS = 40, 15  # 600 device ids, 40 at a time


def run_pool_engine(mode: str, gamma: int) -> dict[int, list[int]]:
    """exactness_engine.run_engine through the network: a server verifying on the Markov target, and
    one pool of SLOTS devices drafting on a shared Markov draft; slot k runs device ids
    k, k + SLOTS, … one after another (steady-state jobs)."""
    n = SLOTS * JOBS
    config = ServerConfig.make(
        port=0,
        expected_devices=SLOTS,
        max_devices=n,
        job_slots=SLOTS,
        max_new_tokens=max(N_POSITIONS, gamma + 1),
        seed=11,
        join_timeout_s=120,
        round_timeout_s=120,
    )
    server = EdgeServer(
        config, MARKOV, SECRET, policy=fixed_policy(gamma, mode, config.seed), target_lm=MarkovBatchedLM(TARGET)
    )
    th, box = _serve(server)
    slots = [[PoolDevice(k + SLOTS * j, tuple(PROMPT), "markov") for j in range(JOBS)] for k in range(SLOTS)]
    outcomes = DevicePool(
        server.endpoint, MARKOV, slots, secret=SECRET, draft_models={"markov": MarkovBatchedLM(DRAFT)}
    ).run()
    th.join(300)
    assert box["summary"].stop_reason == "done"
    assert len(outcomes) == n and all(o.finished for o in outcomes)
    return {o.device_id: o.generated[:N_POSITIONS] for o in outcomes}


@pytest.mark.slow
@pytest.mark.parametrize("mode,gamma", [("ul", 3), ("dl", 2)])
def test_output_law_through_a_pool_is_target_law(mode, gamma):
    tokens = run_pool_engine(mode, gamma)
    sample = np.array([tokens[d] for d in sorted(tokens)])
    assert np.array_equal(sample, run_engine(mode, gamma, T1, n_devices=len(tokens)))
    assert min_p_value(sample, MARG_T1) > P_PASS


@pytest.mark.slow
def test_control_always_accepting_server_fails_the_law_through_a_pool(monkeypatch):
    real = roles.verify
    monkeypatch.setattr(roles, "verify", lambda d, t, a, b, **kw: real(d, t, np.zeros_like(a), b, **kw))
    tokens = run_pool_engine("ul", 3)
    assert min_p_value(np.array([tokens[d] for d in sorted(tokens)]), MARG_T1) < P_PASS


# ---- several pools, one server ------------------------------------------------------------------


@pytest.mark.slow
def test_several_pools_with_their_own_keys_join_one_server(pair, tmp_path):
    ids = [[0, 1, 2], [3, 4], [5]]
    server_keys, _ = create_keyring(tmp_path / "keys", range(6))
    config = ServerConfig.make(
        port=0, expected_devices=6, max_new_tokens=16, seed=2, join_timeout_s=120, round_timeout_s=120
    )
    server = EdgeServer(config, pair, keys=server_keys)
    th, box = _serve(server)
    results: list = [None] * len(ids)

    def pool(i):  # each pool finds its devices' keys under keys/device-N
        results[i] = run_pool(server.endpoint, ids[i], pair, PROMPTS, keys=tmp_path / "keys")

    threads = [threading.Thread(target=pool, args=(i,)) for i in range(len(ids))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    th.join(300)
    summary = box["summary"]
    assert summary.stop_reason == "done" and sorted(summary.devices) == list(range(6))
    outcomes = {o.device_id: o for res in results for o in res}
    assert sorted(outcomes) == list(range(6))
    for d, rec in summary.devices.items():
        assert outcomes[d].finished and outcomes[d].tokens == rec.tokens and rec.digest_match is True


def test_a_pool_refuses_a_device_without_its_key_before_loading_models(tmp_path):
    create_keyring(tmp_path / "keys", range(2))
    with pytest.raises(Exception, match="device-2"):
        DevicePool("127.0.0.1:5", "no-such-pair", [[PoolDevice(d, "x")] for d in range(3)], keys=tmp_path / "keys")


# ---- the command line ---------------------------------------------------------------------------


def test_cli_device_pool_runs_every_device(pair, tmp_path, multispin, monkeypatch):
    config = ServerConfig.make(port=0, expected_devices=3, max_new_tokens=10, seed=4, join_timeout_s=60)
    server = EdgeServer(config, pair, SECRET)
    th, box = _serve(server)
    monkeypatch.setenv("MULTISPIN_SECRET", SECRET)
    result = tmp_path / "pool.json"
    run = multispin(
        "device",
        "--devices",
        "0-2",
        "--server",
        server.endpoint,
        "--insecure",
        "--pair",
        "tiny",
        "--prompt",
        "Hello",
        "--prompt",
        "abc",
        "--result",
        str(result),
    )
    th.join(120)
    assert run.code == 0, run.err
    doc = json.loads(result.read_text())
    assert doc["schema"] == "multispin.device-pool"
    got = {o["device_id"]: o for o in doc["devices"]}
    assert sorted(got) == [0, 1, 2] and all(o["finished"] for o in got.values())
    assert {d: o["tokens"] for d, o in got.items()} == {d: r.tokens for d, r in box["summary"].devices.items()}
    assert "--- device 2 ---" in run.out


@pytest.mark.parametrize(
    "args,message",
    [
        (["--devices", "3-1"], "devices: range 3-1"),
        (["--devices", "0-1", "--device-id", "0"], "--device-id: give --device-id for one device or --devices"),
        (["--prompt", "x"], "--device-id: required (INT: this device's id"),
        (["--device-id", "0"], "--prompt: required (TEXT: this device's prompt)"),
        (["--device-id", "0", "--prompt", "a", "--prompt", "b"], "--prompt: one device takes one prompt"),
    ],
)
def test_cli_device_pool_bad_flags_are_one_line_errors(multispin, args, message):
    run = multispin("device", "--insecure", "--pair", "tiny", *args)
    assert run.code == 2
    assert message in run.err and "Traceback" not in run.err and len(run.err.strip().splitlines()) == 1


# ---- Ray ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_pool_runs_as_a_ray_actor(pair, one_ray_instance, monkeypatch):
    """Ray runs its workers at niceness 15: on a host busy at niceness 0 (the other test worker,
    on 2 cores) the actor took minutes to start, so a server started first waited out its join
    deadline and closed before the devices dialled. The workers here run at niceness 0 (as the
    README advises where a pool shares its host), and the actor is up before the server
    starts, so the join deadline bounds the join, not Ray's start-up."""
    monkeypatch.setenv("RAY_worker_niceness", "0")  # the raylet reads it at start
    ray = pytest.importorskip("ray")
    from multispin.runtime.net.pool import ray_pool_actor

    port = free_port()
    ray.init(address="local", num_cpus=1, include_dashboard=False, logging_level="ERROR")
    try:
        actor = ray_pool_actor().remote(f"tcp://127.0.0.1:{port}", [0, 1], "tiny", PROMPTS, secret=SECRET)
        ray.get(actor.__ray_ready__.remote(), timeout=600)
        config = ServerConfig.make(port=port, expected_devices=2, max_new_tokens=8, seed=5, join_timeout_s=120)
        server = EdgeServer(config, pair, SECRET)
        th, box = _serve(server)
        assert server.endpoint == f"tcp://127.0.0.1:{port}"
        outcomes = ray.get(actor.run.remote(), timeout=300)
    finally:
        ray.shutdown()
    th.join(120)
    assert sorted(o["device_id"] for o in outcomes) == [0, 1] and all(o["finished"] for o in outcomes)
    assert {o["device_id"]: o["tokens"] for o in outcomes} == {d: r.tokens for d, r in box["summary"].devices.items()}
