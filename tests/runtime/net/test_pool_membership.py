"""A pool's batcher waits only for the devices in a session: a pooled device that reconnects or
waits out a back-off is not a member, so the others' batches do not wait the gather time for it."""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from multispin.errors import ProtocolError
from multispin.runtime.net import pool as pool_module
from multispin.runtime.net.device import DeviceClient
from multispin.runtime.net.pool import DraftBatcher

GATHER_S = 30.0  # far longer than any wait below: a batch that waited for it is seen at once


def _request(batcher: DraftBatcher, done: list) -> threading.Thread:
    dev = type("Dev", (), {"device_id": 0})()
    thread = threading.Thread(target=lambda: done.append(batcher(dev, 2)), daemon=True)
    thread.start()
    return thread


def test_a_batch_runs_once_the_absent_member_leaves(monkeypatch):
    monkeypatch.setattr(pool_module, "draft_all", lambda devices, gammas, coupled=(): dict.fromkeys(devices, "draft"))
    batcher = DraftBatcher(threading.RLock(), gather_s=GATHER_S)
    batcher.enter()  # device 0, in a session
    batcher.enter()  # device 1, in a session that is about to end (a back-off)
    done: list = []
    thread = _request(batcher, done)
    thread.join(0.5)
    assert not done  # the control: with device 1 a member, device 0's batch waits for it
    batcher.leave()  # device 1's session ended
    thread.join(5.0)
    assert done and done[0][0] == "draft" and batcher.batch_sizes == [1]


def test_a_device_is_a_member_only_inside_its_sessions():
    """Every session a device opens (each reconnect's) enters the shared drafter once and leaves
    it once, whatever ends it: between attempts (the back-off) it is no member."""
    calls: list[str] = []

    class Recorder:
        def enter(self):
            calls.append("enter")

        def leave(self):
            calls.append("leave")

        def __call__(self, dev, gamma, rule=None):  # never reached: nothing listens
            raise AssertionError("drafted without a server")

    ctx = zmq.Context()
    silent = ctx.socket(zmq.ROUTER)  # a server that takes the connection and never answers
    port = silent.bind_to_random_port("tcp://127.0.0.1")
    try:
        client = DeviceClient(
            f"tcp://127.0.0.1:{port}",
            0,
            "a shared secret",
            type("NeverRun", (), {"vocab_size": 256})(),  # the draft model: never run (no WELCOME)
            [1, 2, 3],
            reconnects=2,
            server_timeout_s=0.3,
            handshake_timeout_s=0.3,
            drafter=Recorder(),
        )
        started = time.monotonic()
        with pytest.raises(ProtocolError, match="gave up after 2 reconnects"):
            client.run()
        assert time.monotonic() - started < 20
    finally:
        silent.close(linger=0)
        ctx.term()
    assert calls == ["enter", "leave"] * 3  # the first attempt and its two reconnects
