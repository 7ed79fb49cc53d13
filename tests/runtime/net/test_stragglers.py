"""One slow device cannot slow everyone: a device that misses its draft deadline is skipped for
that round (the others commit; its record stays and it resumes at its next HELLO), and at its
``max_draft_misses``-th miss in a row it is told to back off (ERROR busy; its HELLOs are busy
for ``straggler_backoff_s``).

Reproduced before the change: an authenticated device that never drafts and rejoins after each
timeout held every round for the whole round timeout until the 10-resumes-a-minute limit
tripped (never, at the default 30 s timeout). The count of rounds a straggler held is a count
of drops, not a timing: the test bounds how many deadlines the others waited out."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from multispin.models.tiny import load_tiny_pair
from multispin.runtime.net.device import build_device_client
from multispin.runtime.net.server import EdgeServer
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.round.local import fixed_policy

pytestmark = [pytest.mark.slow, pytest.mark.integration]  # real sockets and processes

SECRET = "straggler-test-secret-0123"
PROMPTS = ["Hello edge server", "The channel is", "Speculative decoding at the edge"]


@pytest.fixture(scope="module")
def pair():
    return load_tiny_pair()


def _run(pair, max_draft_misses: int, until, limit_s: float = 90.0):
    """Devices 0 and 1 draft at once (no EOS: they run until stopped); device 2 sleeps past the
    deadline at every PLAN, then comes back (resume). Runs until ``until(server, threads)``
    holds (or ``limit_s``); returns (the round events, the server, round index at the end)."""
    timeout = 0.5
    cfg = ServerConfig.make(
        port=0,
        expected_devices=3,
        max_new_tokens=100_000,
        seed=1,
        temperature=0.0,
        join_timeout_s=120,
        round_timeout_s=timeout,
        history=True,
        max_draft_misses=max_draft_misses,
        straggler_backoff_s=600,
    )
    pair = dataclasses.replace(pair, eos_token_ids=())
    server = EdgeServer(cfg, pair, SECRET, policy=fixed_policy(3, seed=cfg.seed))
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault("summary", server.run()), daemon=True)
    th.start()
    assert server.ready.wait(30)
    clients = []
    for k in range(3):
        client = build_device_client(
            server.endpoint, k, SECRET, pair, None, PROMPTS[k], reconnects=3, server_timeout_s=60
        )
        if k == 2:  # never drafts in time: sleeps past the deadline at every PLAN, then rejoins
            client._fault_hook = lambda sock, r: time.sleep(timeout + 0.3)
        clients.append(client)

    def body(client):
        try:
            client.run()
        except Exception:  # stopped at the end of the test, whatever it is doing
            pass

    threads = [threading.Thread(target=body, args=(c,), daemon=True) for c in clients]
    for t in threads:
        t.start()
    deadline = time.monotonic() + limit_s
    try:
        while not until(server, threads) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        server.request_stop("test over")  # first: the honest devices are told BYE, not left mid-round
        th.join(60)
        for c in clients:
            c.stop()
        for t in threads:
            t.join(30)
    return box["summary"], server


def _held(summary) -> list:
    """The rounds that waited out device 2's draft deadline."""
    return [e for e in summary.events if 2 in e.dropped and "no DRAFT" in e.dropped[2]]


def test_a_straggler_costs_the_others_at_most_one_deadline_per_miss_then_backs_off(pair):
    marks: dict = {}

    def backed_off_and_gone_a_while(server, threads):
        if server.stragglers["backed_off"]:  # the straggler now waits its back-off out (alive)
            marks.setdefault("gone", (time.monotonic(), server.round_idx))
            t, r = marks["gone"]  # then 3 s (6 deadlines) more, in which it cannot come back
            return time.monotonic() - t > 3.0 and server.round_idx > r
        return False

    summary, server = _run(pair, 2, backed_off_and_gone_a_while)
    assert "gone" in marks, server.stragglers
    held = _held(summary)
    assert len(held) == 2  # two deadlines waited out, then it was told to back off
    assert "back off" in held[-1].dropped[2]
    assert summary.stragglers == {"missed": 2, "backed_off": 1, "held_at_most_s": 2 * 0.5}
    assert summary.to_dict()["stragglers"] == summary.stragglers  # in `serve --summary` and testbed's
    assert summary.refusals.get("busy", 0) == 0  # told how long, it waits instead of knocking
    late = [e for e in summary.events if e.round > held[-1].round]
    assert late and all(set(e.records) == {0, 1} for e in late)  # the others went on, every round


def test_negative_control_without_the_back_off_the_straggler_holds_round_after_round(pair):
    """The same run with a miss limit it never reaches: each of its returns costs the others a
    deadline (bounded only by the 10-a-minute resume limit), so the count above can fail."""
    summary, server = _run(pair, 1000, lambda server, threads: server.stragglers["missed"] >= 4)
    assert len(_held(summary)) >= 4
    assert server.stragglers["backed_off"] == 0
