"""Per-device CurveZMQ keys on real sockets (127.0.0.1): an allowed device gets through, anyone
else gets nothing to the server; a device's key is bound to its id; traffic is encrypted."""

from __future__ import annotations

import os
import stat

import pytest
import zmq

from multispin.errors import SecurityError
from multispin.runtime.security.keys import (
    AllowedKeys,
    create_device_keys,
    create_keyring,
    create_server_keys,
    curve_client,
    curve_server,
    load_device_keys,
    load_server_keys,
    peer_key,
)
from wire_capture import Recorder

REFUSED_WAIT_MS = 400
PROMPT = b"The secret recipe for the county fair pie is"


@pytest.fixture
def keys(tmp_path):
    server_dir = tmp_path / "server"
    create_server_keys(server_dir)
    for d in (0, 1):
        create_device_keys(tmp_path / f"dev{d}", d, allow=server_dir)
    create_device_keys(tmp_path / "stranger", 2)  # a key pair the server never allowed
    return tmp_path


@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    c.destroy(linger=0)


class Server:
    """A CURVE (or plain) ROUTER on a random loopback port."""

    def __init__(self, ctx, keys_root=None, *, curve=True):
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.linger = 0
        self.auth = None
        if curve:
            self.allowed = AllowedKeys(keys_root / "server" / "allowed")
            self.auth = curve_server(self.sock, load_server_keys(keys_root / "server"), self.allowed)
        self.port = self.sock.bind_to_random_port("tcp://127.0.0.1")

    def recv(self, timeout_ms=2000):
        if not self.sock.poll(timeout_ms):
            return None
        return self.sock.recv_multipart(copy=False)

    def close(self):
        self.sock.close(linger=0)
        if self.auth is not None:
            self.auth.stop()


def _dealer(ctx, port, device_keys=None, server_public=None):
    s = ctx.socket(zmq.DEALER)
    s.linger = 0
    if device_keys is not None:
        curve_client(s, device_keys, server_public)
    s.connect(f"tcp://127.0.0.1:{port}")
    return s


def test_key_files_and_permissions(keys):
    server_dir = keys / "server"
    assert stat.S_IMODE((server_dir / "server.key_secret").stat().st_mode) == 0o600
    assert stat.S_IMODE((keys / "dev1" / "device-1.key_secret").stat().st_mode) == 0o600
    assert sorted(p.name for p in (server_dir / "allowed").iterdir()) == ["device-0.key", "device-1.key"]
    assert "device-id = 1" in (keys / "dev1" / "device-1.key_secret").read_text()
    d1 = load_device_keys(keys / "dev1")
    assert d1.device_id == 1 and d1.server_public == load_server_keys(server_dir).public
    assert load_device_keys(keys / "stranger").server_public is None
    assert not any(p.name.startswith(".keys-") for p in (keys / "dev1").iterdir())


def test_a_keyring_for_a_local_run(tmp_path):
    server_dir, devices = create_keyring(tmp_path / "run-keys", range(3))
    allowed = AllowedKeys(load_server_keys(server_dir).allowed_dir)
    assert sorted(devices) == [0, 1, 2]
    for d, folder in devices.items():
        k = load_device_keys(folder)
        assert allowed.identity_for(k.public) == d == k.device_id
        assert k.server_public == load_server_keys(server_dir).public


def test_keys_are_not_overwritten_by_accident(keys):
    with pytest.raises(SecurityError, match="keys already exist"):
        create_server_keys(keys / "server")
    with pytest.raises(SecurityError, match="device 1 is already allowed"):
        create_device_keys(keys / "other", 1, allow=keys / "server")
    old = load_device_keys(keys / "dev1").public
    create_device_keys(keys / "dev1", 1, allow=keys / "server", force=True)
    new = load_device_keys(keys / "dev1").public
    assert new != old and AllowedKeys(keys / "server" / "allowed").identity_for(new) == 1


def test_loading_refuses_unsafe_or_foreign_files(keys):
    secret = keys / "dev0" / "device-0.key_secret"
    os.chmod(secret, 0o644)
    with pytest.raises(SecurityError, match="readable by others .mode 0644.*chmod 600"):
        load_device_keys(keys / "dev0")
    os.chmod(secret, 0o600)
    (keys / "server" / "allowed" / "laptop.key").write_text("x")
    with pytest.raises(SecurityError, match="laptop.key: an allowed key file is named device-N.key"):
        AllowedKeys(keys / "server" / "allowed")
    os.unlink(keys / "server" / "allowed" / "laptop.key")
    (keys / "server" / "allowed" / "device-7.key").write_bytes((keys / "dev0" / "device-0.key").read_bytes())
    with pytest.raises(SecurityError, match="allowed as device 0; one key, one device"):
        AllowedKeys(keys / "server" / "allowed")
    with pytest.raises(SecurityError, match="no such key file"):
        load_server_keys(keys / "nowhere")


def test_identity_mapping(keys):
    allowed = AllowedKeys(keys / "server" / "allowed")
    k0, k1 = (load_device_keys(keys / f"dev{d}").public for d in (0, 1))
    assert allowed.identity_for(k0) == 0 and allowed.identity_for(k1.decode()) == 1
    assert allowed.identity_for(load_device_keys(keys / "stranger").public) is None
    assert len(allowed) == 2 and k1 in allowed
    allowed.check_claim(k1, 1)
    with pytest.raises(SecurityError, match="device 1's key claimed device id 0"):
        allowed.check_claim(k1, 0)


def test_an_allowed_device_exchanges_messages_and_is_known_by_its_key(ctx, keys):
    srv = Server(ctx, keys)
    try:
        dev = _dealer(ctx, srv.port, load_device_keys(keys / "dev1"))
        dev.send(b"HELLO device=1")
        frames = srv.recv()
        assert frames is not None, "an allowed device got nothing through"
        routing, body = frames
        assert body.bytes == b"HELLO device=1"
        key = peer_key(body)
        assert key == load_device_keys(keys / "dev1").public.decode()
        assert srv.allowed.identity_for(key) == 1
        srv.sock.send_multipart([routing.bytes, b"WELCOME"])
        assert dev.poll(2000) and dev.recv() == b"WELCOME"
    finally:
        srv.close()


def test_a_device_claiming_device_0s_id_with_its_own_key_is_detected(ctx, keys):
    srv = Server(ctx, keys)
    try:
        impostor = _dealer(ctx, srv.port, load_device_keys(keys / "dev1"))
        impostor.send(b"0")  # "I am device 0"
        frames = srv.recv()
        claimed = int(frames[-1].bytes)
        with pytest.raises(SecurityError, match="device 1's key claimed device id 0"):
            srv.allowed.check_claim(peer_key(frames[-1]), claimed)
        real = _dealer(ctx, srv.port, load_device_keys(keys / "dev0"))
        real.send(b"0")
        frames = srv.recv()
        srv.allowed.check_claim(peer_key(frames[-1]), int(frames[-1].bytes))  # device 0 itself: fine
    finally:
        srv.close()


def _handshake_failures(monitor, timeout_ms=2000) -> set[str]:
    """The server's handshake-failure events seen within the timeout (stops at the first)."""
    from zmq.utils.monitor import recv_monitor_message

    names = {
        zmq.EVENT_HANDSHAKE_FAILED_AUTH: "auth",
        zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "protocol",
        zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "no detail",
    }
    while monitor.poll(timeout_ms):
        ev = recv_monitor_message(monitor)["event"]
        if ev in names:
            return {names[ev]}
    return set()


@pytest.mark.parametrize(
    "who, failure", [("no key", "protocol"), ("wrong server key", "protocol"), ("key not allowed", "auth")]
)
def test_others_get_nothing_through(ctx, keys, who, failure):
    srv = Server(ctx, keys)
    monitor = srv.sock.get_monitor_socket()
    try:
        if who == "no key":
            dev = _dealer(ctx, srv.port)
        elif who == "wrong server key":
            other_server = zmq.curve_keypair()[0]
            dev = _dealer(ctx, srv.port, load_device_keys(keys / "dev0"), server_public=other_server)
        else:
            dev = _dealer(
                ctx,
                srv.port,
                load_device_keys(keys / "stranger"),
                server_public=load_server_keys(keys / "server").public,
            )
        dev.send(b"HELLO device=0")
        assert _handshake_failures(monitor) == {failure}  # refused in the handshake itself
        assert srv.recv(REFUSED_WAIT_MS) is None  # so no HELLO reaches the server
        # the server still serves the allowed device meanwhile
        ok = _dealer(ctx, srv.port, load_device_keys(keys / "dev0"))
        ok.send(b"HELLO device=0")
        frames = srv.recv()
        assert frames is not None and frames[-1].bytes == b"HELLO device=0"
    finally:
        srv.sock.disable_monitor()
        monitor.close(linger=0)
        srv.close()


def test_a_device_key_allowed_while_serving_gets_in_after_reload(ctx, keys):
    srv = Server(ctx, keys)
    try:
        create_device_keys(keys / "dev5", 5, allow=keys / "server")
        srv.allowed.reload()
        dev = _dealer(ctx, srv.port, load_device_keys(keys / "dev5"))
        dev.send(b"hi")
        frames = srv.recv()
        assert frames is not None and srv.allowed.identity_for(peer_key(frames[-1])) == 5
    finally:
        srv.close()


@pytest.mark.parametrize("curve", [True, False], ids=["curve", "plain (negative control)"])
def test_a_prompt_does_not_cross_the_wire_in_clear(ctx, keys, curve):
    srv = Server(ctx, keys, curve=curve)
    rec = Recorder(srv.port)
    try:
        dev = _dealer(ctx, rec.port, load_device_keys(keys / "dev0") if curve else None)
        dev.send_multipart([b"HELLO", PROMPT])
        frames = srv.recv()
        assert frames is not None and frames[-1].bytes == PROMPT  # the forwarder carried it
        srv.sock.send_multipart([frames[0].bytes, b"ECHO", PROMPT])
        assert dev.poll(2000) and dev.recv_multipart()[-1] == PROMPT
        with rec.lock:
            wire = bytes(rec.seen)
        assert len(wire) > len(PROMPT)
        if curve:
            assert PROMPT not in wire and b"CURVE" in wire  # the greeting names the mechanism
        else:
            assert wire.count(PROMPT) == 2  # both ways, in clear
    finally:
        rec.close()
        srv.close()
