"""`multispin keys server|device`: the files a server and its devices connect with."""

from __future__ import annotations

import stat

from multispin.runtime.security.keys import AllowedKeys, load_device_keys, load_server_keys


def test_keys_for_a_server_and_a_device(multispin, tmp_path):
    srv, dev = tmp_path / "srv", tmp_path / "dev3"
    r = multispin("keys", "server", str(srv))
    assert r.code == 0, r.err
    assert load_server_keys(srv).public.decode() in r.out
    r = multispin("keys", "device", str(dev), "--device-id", "3", "--allow", str(srv))
    assert r.code == 0, r.err
    keys = load_device_keys(dev)
    assert keys.device_id == 3 and keys.public.decode() in r.out
    assert keys.server_public == load_server_keys(srv).public
    assert AllowedKeys(srv / "allowed").identity_for(keys.public) == 3
    for secret in (srv / "server.key_secret", dev / "device-3.key_secret"):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600


def test_keys_mistakes_are_one_line(multispin, tmp_path):
    srv = tmp_path / "srv"
    assert multispin("keys", "server", str(srv)).code == 0
    r = multispin("keys", "server", str(srv))
    assert r.code == 2 and r.err.count("\n") == 1 and "keys already exist (pass --force" in r.err
    r = multispin("keys", "device", str(tmp_path / "d"), "--device-id", "1", "--allow", str(tmp_path / "none"))
    assert r.code == 2 and "no such key file" in r.err and not (tmp_path / "d").exists()
    r = multispin("keys", "device", str(tmp_path / "d"))
    assert r.code == 2 and "--device-id" in r.err
    r = multispin("keys", "device", str(tmp_path / "d"), "--device-id", "2")
    assert r.code == 0 and "not yet allowed" in r.out
