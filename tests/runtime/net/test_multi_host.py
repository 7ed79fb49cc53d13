"""Server and device pools on different hosts, as docs/multi-host.md tells a user to set them up.

The "hosts" are folders that share nothing but what the page says to copy (each pool's device
folders, holding its key pair and server.key), and the connection goes over this machine's
non-loopback address (skipped where it has none), to a server started with `serve --host`:

- two pools (devices 0-1 and 2-3) generate the same texts as one pool of 0-3 on one host, same seed;
- a device of another pair is refused at HELLO in one line naming the server's pair and V;
- a device aimed at a dead endpoint gives up within --connect-timeout, hinting at `serve --host`;
- the lone device and the pool read the same key layout (KEYS/device-N under `--keys KEYS`).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from multispin.runtime.net.launcher import free_port
from multispin.runtime.wire import messages as P
from multispin.runtime.wire.server_protocol import ServerProtocol

PROMPTS = ["Hello edge server", "The channel is", "abc", "Speculative decoding at the edge"]
CLI = [sys.executable, "-m", "multispin"]


def lan_address() -> str | None:
    """This machine's address on its default route (no packet is sent), or None if it has only
    loopback."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.254", 9))  # TEST-NET: routing only
            addr = s.getsockname()[0]
    except OSError:
        return None
    return None if addr.startswith("127.") else addr


def run_cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def make_keys(server_host: Path, ids: str) -> None:
    """The page's first step, on the server host: the server's pair and every device's pair."""
    assert run_cli("keys", "server", "keys/server", cwd=server_host).returncode == 0
    made = run_cli("keys", "device", "keys", "--devices", ids, "--allow", "keys/server", cwd=server_host)
    assert made.returncode == 0, made.stderr


def carry_keys(server_host: Path, device_host: Path, ids: list[int]) -> None:
    """The page's copy step (scp -r keys/device-N HOST:keys/): each device folder, nothing else."""
    (device_host / "keys").mkdir(parents=True, exist_ok=True)
    for d in ids:
        shutil.copytree(server_host / "keys" / f"device-{d}", device_host / "keys" / f"device-{d}")


def serve(host_dir: Path, address: str, port: int, devices: int) -> subprocess.Popen:
    args = ["serve", "--pair", "tiny", "--host", address, "--port", str(port), "--devices", str(devices)]
    args += ["--keys", "keys/server", "--no-journal", "--max-new-tokens", "12", "--seed", "5"]
    args += ["--join-timeout", "120", "--summary", "summary.json"]
    return subprocess.Popen([*CLI, *args], cwd=host_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def pool(host_dir: Path, endpoint: str, ids: str, prompts: list[str], result: str) -> subprocess.Popen:
    args = ["device", "--server", endpoint, "--devices", ids, "--keys", "keys", "--pair", "tiny"]
    args += [a for p in prompts for a in ("--prompt", p)] + ["--result", result]
    return subprocess.Popen([*CLI, *args], cwd=host_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def texts(result: Path) -> dict[int, list[int]]:
    return {d["device_id"]: d["generated"] for d in json.loads(result.read_text())["devices"]}


def finish(*procs: subprocess.Popen) -> None:
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]


@pytest.mark.integration
def test_two_pools_on_other_hosts_generate_the_one_host_texts(tmp_path):
    address = lan_address()
    if address is None:
        pytest.skip("no non-loopback address on this machine")
    # one host: server and one pool of 0-3 on loopback
    one = tmp_path / "one-host"
    one.mkdir()
    make_keys(one, "0-3")
    port = free_port()
    server = serve(one, "127.0.0.1", port, 4)
    finish(pool(one, f"127.0.0.1:{port}", "0-3", PROMPTS, "pool.json"), server)
    reference = texts(one / "pool.json")
    assert sorted(reference) == [0, 1, 2, 3] and all(reference.values())

    # three hosts: keys made on the server host, each pool's folders carried to its host
    srv, host_a, host_b = (tmp_path / n for n in ("server-host", "host-a", "host-b"))
    srv.mkdir()
    make_keys(srv, "0-3")
    carry_keys(srv, host_a, [0, 1])
    carry_keys(srv, host_b, [2, 3])
    port = free_port()
    server = serve(srv, address, port, 4)
    endpoint = f"{address}:{port}"
    a = pool(host_a, endpoint, "0-1", PROMPTS[:2], "pool.json")
    b = pool(host_b, endpoint, "2-3", PROMPTS[2:], "pool.json")
    finish(a, b, server)
    assert {**texts(host_a / "pool.json"), **texts(host_b / "pool.json")} == reference
    # the host-B folder holds no secret of host A's devices: what travelled is per device
    assert not (host_b / "keys" / "device-0").exists()


@pytest.mark.integration
def test_a_dead_endpoint_is_given_up_within_the_connect_timeout_naming_serve_host(tmp_path):
    make_keys(tmp_path, "0")
    port = free_port()  # nothing listens there
    t0 = time.monotonic()
    res = run_cli(
        "device", "--server", f"127.0.0.1:{port}", "--device-id", "0", "--keys", "keys", "--pair", "tiny",
        "--prompt", "hi", "--connect-timeout", "3", cwd=tmp_path,
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    assert res.returncode == 2
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("error: device 0: no session with") and "within 3 s" in last
    assert "serve --host" in last and "refused" in last
    assert elapsed < 3 + 30  # the bound plus the interpreter's and the tiny model's start


def test_a_device_of_another_pair_is_refused_at_hello_naming_the_servers_pair():
    """Sans I/O: a HELLO whose token ids overflow the server's vocabulary is refused (a fatal
    'refused', not a retried 'protocol') with the server's pair and V. Negative control: a HELLO
    that is damaged otherwise stays a 'protocol' refusal."""
    limits = P.Limits(vocab_size=256)
    proto = ServerProtocol(
        None, limits, {}, lambda *a: None, {"pair": "tiny"}, max_devices=4, handshake_timeout_s=5,
        check_claim=lambda key, d: None,
    )  # fmt: skip
    big = P.Limits(vocab_size=49152)
    proto.receive(b"a", [P.encode_message(P.HelloMsg(0, (1, 9690), True, "x"), big)], 0.0, "key")
    (_, _, msg) = proto.outbox[-1]
    assert isinstance(msg, P.ErrorMsg) and msg.code == "refused"
    assert "the server runs pair tiny (V = 256)" in msg.reason and "--pair tiny" in msg.reason
    assert "\n" not in msg.reason
    proto.receive(b"b", [b"\x93garbage"], 0.0, "key")
    (_, _, msg) = proto.outbox[-1]
    assert isinstance(msg, P.ErrorMsg) and msg.code == "protocol"


def test_the_lone_device_and_the_pool_read_one_key_layout(tmp_path, monkeypatch):
    """`device --keys KEYS --device-id N` finds KEYS/device-N as the pool does; a missing pair
    names both places it looked and the command that makes it."""
    from multispin.errors import SecurityError
    from multispin.runtime.net.device import resolve_credentials
    from multispin.runtime.security.keys import create_device_keys, create_server_keys

    create_server_keys(tmp_path / "keys" / "server")
    create_device_keys(tmp_path / "keys" / "device-3", 3, allow=tmp_path / "keys" / "server")
    keys, _ = resolve_credentials(tmp_path / "keys", None, 3)
    assert keys is not None and keys.device_id == 3 and keys.server_public is not None
    assert resolve_credentials(tmp_path / "keys" / "device-3", None, 3)[0] == keys
    monkeypatch.delenv("MULTISPIN_SECRET", raising=False)
    with pytest.raises(SecurityError, match=r"no key pair for device 4 .*keys/device-4/device-4.key_secret"):
        resolve_credentials(tmp_path / "keys", None, 4)
    assert os.stat(tmp_path / "keys" / "device-3" / "device-3.key_secret").st_mode & 0o077 == 0


def test_keys_device_takes_one_id_or_a_range(multispin):
    """--device-id N (DIR is the device's folder) or --devices IDS (DIR/device-N each): one of them,
    else one line naming both."""
    assert multispin("keys", "server", "keys/server").code == 0
    res = multispin("keys", "device", "keys")
    assert res.code == 2 and res.err.count("\n") == 1 and "--device-id" in res.err and "--devices" in res.err
    res = multispin("keys", "device", "keys", "--devices", "0-2", "--allow", "keys/server")
    assert res.code == 0
    assert sorted(p.name for p in Path("keys/server/allowed").iterdir()) == [f"device-{d}.key" for d in range(3)]
    assert all((Path("keys") / f"device-{d}" / "server.key").is_file() for d in range(3))
