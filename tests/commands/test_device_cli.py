"""`multispin device` (issue 13, problem 3): it prints and saves the text it generated, takes
`host:port`, honours `--server-timeout` in the handshake, and its reconnects reach stderr
through `logging`."""

from __future__ import annotations

import json
import threading
import time

import pytest

from multispin.models.registry import resolve_pair
from multispin.runtime.keys import create_keyring
from multispin.runtime.server import EdgeServer, ServerConfig


@pytest.fixture
def keyring(tmp_path):
    return create_keyring(tmp_path / "keys", [0])


@pytest.fixture
def server(keyring):
    pair = resolve_pair("tiny")
    cfg = ServerConfig.make(host="127.0.0.1", port=0, expected_devices=1, max_new_tokens=8, draft_len=3,
                            mode="mixed", temperature=0.0, seed=0, join_timeout_s=60)
    srv = EdgeServer(cfg, pair, keys=keyring[0])
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("result", srv.run()), daemon=True)
    thread.start()
    assert srv.ready.wait(30) and srv.endpoint
    yield srv, box, pair
    srv.request_stop("test over")
    thread.join(30)


def test_device_prints_and_saves_its_text_and_takes_host_port(multispin, tmp_path, server, keyring):
    srv, box, pair = server
    host_port = srv.endpoint.removeprefix("tcp://")  # no tcp:// (used to hang silently)
    result = tmp_path / "out" / "device0.json"
    res = multispin("device", "--server", host_port, "--device-id", "0", "--pair", "tiny",
                    "--prompt", "Hello edge", "--result", str(result), "--server-timeout", "30",
                    "--keys", str(keyring[1][0]))
    assert res.code == 0, res.err
    saved = json.loads(result.read_text())
    expected = pair.tokenizer.decode(saved["generated"], skip_special_tokens=True)
    assert len(saved["generated"]) == 8 and saved["text"] == expected
    assert res.out == expected + "\n"  # the text on stdout; the one-line status on stderr
    assert res.err.startswith("device 0: 8 tokens")
    assert saved["multispin_version"] and saved["schema"] == "multispin.device"


def test_server_timeout_bounds_the_handshake_and_reconnects_are_logged(multispin, keyring):
    """No server: `--server-timeout 1 --reconnects 1` gave up after 30 s per attempt, silently."""
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    res = multispin("device", "--server", f"127.0.0.1:{port}", "--device-id", "0", "--pair", "tiny",
                    "--prompt", "x", "--server-timeout", "1", "--reconnects", "1", "--keys", str(keyring[1][0]))
    took = time.monotonic() - t0
    assert res.code == 2
    assert took < 15, f"took {took:.1f} s"
    lines = res.err.strip().splitlines()
    assert "WARNING multispin.device: device 0: server silent for 1 s; reconnecting (1/1)" in lines[0]
    assert lines[-1].startswith("error: device 0: gave up after 1 reconnects (server silent for 1 s)")
    assert f"127.0.0.1:{port}" in lines[-1]
