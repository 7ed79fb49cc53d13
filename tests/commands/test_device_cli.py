"""`multispin device`: it prints and saves the text it generated, takes
`host:port`, honours `--server-timeout` in the handshake, and its reconnects reach stderr
through `logging`."""

from __future__ import annotations

import json
import threading
import time

import pytest

from multispin.models.registry import resolve_pair
from multispin.runtime.net.server import EdgeServer
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.round.local import fixed_policy
from multispin.runtime.security.keys import create_keyring

# real sockets, processes or models: `make test-fast` leaves these out
pytestmark = pytest.mark.integration


@pytest.fixture
def keyring(tmp_path):
    return create_keyring(tmp_path / "keys", [0])


@pytest.fixture
def server(keyring, request):
    pair = resolve_pair("tiny")
    cfg = ServerConfig.make(
        host="127.0.0.1",
        port=0,
        expected_devices=1,
        max_new_tokens=8,
        temperature=0.0,
        seed=0,
        join_timeout_s=60,
        **getattr(request, "param", {}),
    )
    srv = EdgeServer(cfg, pair, keys=keyring[0], policy=fixed_policy(3, "random", cfg.seed))
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
    res = multispin(
        "device",
        "--server",
        host_port,
        "--device-id",
        "0",
        "--pair",
        "tiny",
        "--prompt",
        "Hello edge",
        "--result",
        str(result),
        "--server-timeout",
        "30",
        "--keys",
        str(keyring[1][0]),
    )
    assert res.code == 0, res.err  # finished, digest matches
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
    res = multispin(
        "device",
        "--server",
        f"127.0.0.1:{port}",
        "--device-id",
        "0",
        "--pair",
        "tiny",
        "--prompt",
        "x",
        "--server-timeout",
        "1",
        "--reconnects",
        "1",
        "--keys",
        str(keyring[1][0]),
    )
    took = time.monotonic() - t0
    assert res.code == 2
    assert took < 15, f"took {took:.1f} s"
    lines = res.err.strip().splitlines()
    assert "WARNING multispin.device: device 0: server silent for 1 s; reconnecting (1/1)" in lines[0]
    assert lines[-1].startswith("error: device 0: gave up after 1 reconnects (server silent for 1 s)")
    assert f"127.0.0.1:{port}" in lines[-1]


@pytest.mark.parametrize("server", [{"rounds": 1}], indirect=True)
def test_a_device_that_did_not_finish_exits_1_with_its_partial_text(multispin, server, keyring):
    """The server stops after one round (--rounds 1): the device used to exit 0 although its
    text was not finished."""
    res = multispin(
        "device",
        "--server",
        server[0].endpoint,
        "--device-id",
        "0",
        "--pair",
        "tiny",
        "--prompt",
        "Hello edge",
        "--server-timeout",
        "30",
        "--keys",
        str(keyring[1][0]),
    )
    assert res.code == 1
    last = res.err.strip().splitlines()[-1]
    assert last.startswith("error: device 0: did not finish its text (") and "the session ended: rounds" in last
    assert res.out  # the partial text is still printed


@pytest.mark.parametrize("server_digest, code", [("bb" * 32, 1), ("aa" * 32, 0), (None, 0)])
def test_a_digest_that_differs_from_the_servers_exits_1(multispin, monkeypatch, keyring, server_digest, code):
    from multispin.runtime.net.device import DeviceOutcome

    outcome = DeviceOutcome(0, [1, 2, 3], 1, "aa" * 32, True, "done", 1, 2, server_digest, text="x")
    monkeypatch.setattr("multispin.runtime.net.device.run_device", lambda *a, **k: outcome)
    res = multispin(
        "device",
        "--server",
        "127.0.0.1:1",
        "--device-id",
        "0",
        "--pair",
        "tiny",
        "--prompt",
        "x",
        "--keys",
        str(keyring[1][0]),
        "--json",
    )
    assert res.code == code, res.err
    assert json.loads(res.out)["finished"] is True  # the outcome is printed either way
    if code:
        assert (
            res.err.strip()
            .splitlines()[-1]
            .startswith("error: device 0: its tokens differ from the server's record (digest aaaaaaaaaaaa")
        )
