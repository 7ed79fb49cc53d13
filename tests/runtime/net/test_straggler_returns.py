"""A straggler that comes back is served again. Before: a device that missed its draft deadline
twice in a row was told to back off for 10 × misses × round timeout (600 s at the defaults),
longer than the server's own idle timeout (60 s), and spent its reconnects on the busy answers
within seconds; the text was lost. Now the back-off is at most half the idle and join timeouts
(`ServerConfig.straggler_backoff`), and a device told busy waits what it was told and rejoins
without spending a reconnect; its session resumes and its text is byte-identical to a run
without stalls on the same seed."""

from __future__ import annotations

import threading
import time

import pytest

from multispin.models.tiny import load_tiny_pair
from multispin.runtime.net.device import build_device_client
from multispin.runtime.net.server import EdgeServer
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.round.local import fixed_policy

pytestmark = [pytest.mark.slow, pytest.mark.integration]  # real sockets, threads and waits

SECRET = "straggler-returns-secret-0123"
PROMPTS = ["Hello edge server", "The channel is"]
ROUND_TIMEOUT_S = 0.5
IDLE_TIMEOUT_S = 4.0


@pytest.fixture(scope="module")
def pair():
    return load_tiny_pair()


def _config(**over) -> ServerConfig:
    fields = dict(
        port=0,
        expected_devices=2,
        max_new_tokens=24,
        seed=5,
        temperature=1.0,
        join_timeout_s=60,
        round_timeout_s=ROUND_TIMEOUT_S,
        idle_timeout_s=IDLE_TIMEOUT_S,
        max_draft_misses=2,
        straggler_backoff_s=600,  # asked for: far beyond the idle timeout, so the bound is what applies
    )
    return ServerConfig.make(**{**fields, **over})


def _run(pair, stalls: int):
    """Devices 0 and 1; device 1 sleeps past its deadline at its first ``stalls`` PLANs from
    round 1 on (two: two misses in a row). Returns (summary, outcomes, device 1's events)."""
    cfg = _config()
    server = EdgeServer(cfg, pair, SECRET, policy=fixed_policy(3, seed=cfg.seed))
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault("summary", server.run()), daemon=True)
    th.start()
    assert server.ready.wait(30)
    events: list[dict] = []
    outcomes: dict[int, object] = {}
    left = {"stalls": stalls}

    def stall(sock, round_idx):
        if round_idx >= 1 and left["stalls"]:
            left["stalls"] -= 1
            time.sleep(ROUND_TIMEOUT_S + 0.4)

    clients = []
    for k in range(2):
        client = build_device_client(
            server.endpoint,
            k,
            SECRET,
            pair,
            None,
            PROMPTS[k],
            reconnects=1,  # a busy answer that spent a reconnect would end the device at once
            server_timeout_s=10,
            on_event=events.append if k == 1 else None,
        )
        if k == 1:
            client._fault_hook = stall
        clients.append(client)
    threads = [
        threading.Thread(target=lambda c=c: outcomes.setdefault(c.device_id, c.run()), daemon=True) for c in clients
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    th.join(30)
    assert not th.is_alive() and not any(t.is_alive() for t in threads)
    return box["summary"], outcomes, events


def test_the_back_off_is_bounded_by_the_servers_own_waits():
    assert _config().straggler_backoff() == IDLE_TIMEOUT_S / 2
    assert _config(idle_timeout_s=600, join_timeout_s=10).straggler_backoff() == 5.0
    assert ServerConfig.make(round_timeout_s=30).straggler_backoff() == 30.0  # the defaults: 600 s asked, 30 s given


def test_a_device_that_misses_twice_in_a_row_waits_rejoins_and_ends_with_the_same_text(pair):
    calm, calm_out, _ = _run(pair, stalls=0)
    assert calm.stragglers["backed_off"] == 0 and all(o.finished for o in calm_out.values())

    summary, outcomes, events = _run(pair, stalls=2)
    # the back-off really was imposed: two deadlines missed in a row, then busy for the bounded time
    assert summary.stragglers["missed"] == 2 and summary.stragglers["backed_off"] == 1
    waits = [e for e in events if e["event"] == "busy"]
    assert waits and waits[0]["wait_s"] == pytest.approx(IDLE_TIMEOUT_S / 2, abs=0.2)
    assert "back off for 2.0 s" in waits[0]["reason"]
    # and the device came back: finished, the server's digest, the same text byte for byte
    for d in (0, 1):
        out, ref = outcomes[d], calm_out[d]
        assert out.finished and out.digest == out.server_digest, out.reason
        assert out.generated == ref.generated
        assert summary.devices[d].generated == calm.devices[d].generated
    assert outcomes[1].sessions >= 3  # the first session, the one after the timeout, the one after the back-off
