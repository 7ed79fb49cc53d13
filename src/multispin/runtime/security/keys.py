"""Per-device keys and encryption with CurveZMQ (pyzmq's ``zmq.auth``, no hand-written scheme).

What: the server has one key pair; each device has its own. Files (made by ``multispin keys``)::

    SERVER_DIR/server.key            server public key
    SERVER_DIR/server.key_secret     server secret key (0600)
    SERVER_DIR/allowed/device-N.key  public key of each device allowed in; the name binds it to id N
    KEYS/device-N/device-N.key        device N's public key
    KEYS/device-N/device-N.key_secret device N's secret key (0600)
    KEYS/device-N/server.key          the server's public key the device connects to

(the server's folder is usually KEYS/server: one layout that `device --keys KEYS` reads)

`curve_server` makes a ROUTER a CURVE server whose authenticator (a ZAP handler on the
socket's context) lets in only the keys of the allowed directory; `curve_client` makes a
DEALER a CURVE client. Every message is then encrypted and authenticated, and a client without
a key, with the wrong server key or with a key not allowed never gets a frame to the server.

Why a key per device: the device id is bound to its public key (`AllowedKeys`). libzmq
stamps each received frame with the peer's public key (the ZAP ``User-Id``; `peer_key`),
so the server checks a HELLO's device id against the key that sent it
(`AllowedKeys.check_claim`): a device can claim only its own session.

Like the loops it plugs into, this module imports ``zmq``; the round and the protocol objects
never see keys.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from multispin.errors import SecurityError
from multispin.runtime.security.limits import SilentKeyQuota

if TYPE_CHECKING:  # zmq loads when a socket is made secure, not when keys are read or written
    import zmq
    from zmq.auth.thread import ThreadAuthenticator

SERVER_NAME = "server"
ALLOWED_DIR = "allowed"
ZAP_DOMAIN = "multispin"
_DEVICE_FILE = re.compile(r"^device-(\d+)\.key$")


def device_name(device_id: int) -> str:
    return f"device-{int(device_id)}"


@dataclass(frozen=True)
class ServerKeys:
    public: bytes  # Z85, 40 bytes
    secret: bytes
    allowed_dir: Path


@dataclass(frozen=True)
class DeviceKeys:
    device_id: int
    public: bytes
    secret: bytes
    server_public: bytes | None = None


# -- creating ----------------------------------------------------------------------------------


def _create_pair(directory: Path, name: str, metadata: dict[str, str], force: bool) -> tuple[Path, Path]:
    """``name.key`` and ``name.key_secret`` in ``directory``, made in a private (0700) temporary
    folder, the secret chmod-ed to 0600, then moved in: no moment where the secret is readable
    by others, and no half-written pair."""

    directory = Path(directory)
    public, secret = directory / f"{name}.key", directory / f"{name}.key_secret"
    if not force and (public.exists() or secret.exists()):
        raise SecurityError(
            f"{secret}: keys already exist (pass --force to replace them; "
            "everything holding the old public key will be refused)"
        )
    try:
        if not directory.exists():
            directory.mkdir(parents=True, mode=0o700)
        with tempfile.TemporaryDirectory(dir=directory, prefix=".keys-") as tmp:
            pub_tmp, sec_tmp = zmq.auth.create_certificates(tmp, name, metadata=metadata)
            os.chmod(sec_tmp, 0o600)
            os.chmod(pub_tmp, 0o644)
            os.replace(sec_tmp, secret)
            os.replace(pub_tmp, public)
    except OSError as exc:
        raise SecurityError(f"{exc.filename or directory}: cannot write keys ({exc.strerror or exc})") from None
    return public, secret


def create_server_keys(server_dir: str | os.PathLike, *, force: bool = False) -> Path:
    """The server's key pair and an empty allowed-keys folder; returns the public key file."""
    server_dir = Path(server_dir)
    public, _ = _create_pair(server_dir, SERVER_NAME, {"role": "server"}, force)
    (server_dir / ALLOWED_DIR).mkdir(mode=0o755, exist_ok=True)
    return public


def create_device_keys(
    device_dir: str | os.PathLike, device_id: int, *, allow: str | os.PathLike | None = None, force: bool = False
) -> Path:
    """Device ``device_id``'s key pair in ``device_dir``; returns the public key file.

    With ``allow=SERVER_DIR`` (the server's key folder, made first), the device's public key is
    also copied into the server's allowed folder as ``device-N.key`` and the server's public key
    into ``device_dir`` as ``server.key``: the device can then connect, as device N only."""
    if int(device_id) < 0:
        raise SecurityError(f"device id must be >= 0 (got {device_id})")
    device_dir = Path(device_dir)
    server = None
    if allow is not None:
        server = load_server_keys(allow)  # fail before writing anything
        target = server.allowed_dir / f"{device_name(device_id)}.key"
        if target.exists() and not force:
            raise SecurityError(
                f"{target}: device {device_id} is already allowed with another key (pass --force to replace it)"
            )
    public, _ = _create_pair(device_dir, device_name(device_id), {"device-id": str(int(device_id))}, force)
    if server is not None and allow is not None:
        try:
            shutil.copyfile(public, server.allowed_dir / f"{device_name(device_id)}.key")
            shutil.copyfile(Path(allow) / f"{SERVER_NAME}.key", device_dir / f"{SERVER_NAME}.key")
        except OSError as exc:
            raise SecurityError(f"{exc.filename}: cannot write ({exc.strerror or exc})") from None
    return public


def create_keyring(directory: str | os.PathLike, device_ids) -> tuple[Path, dict[int, Path]]:
    """Throw-away keys for a run on one machine (what ``testbed`` and ``demo`` need): the
    server's in ``DIR/server`` and each device's in ``DIR/device-N``, every device allowed as
    itself. Returns the server folder and each device's folder. ``DIR`` should be private to the
    run (a temporary folder): whoever reads it can join."""
    root = Path(directory)
    create_server_keys(root / SERVER_NAME)
    folders = {}
    for d in device_ids:
        folders[int(d)] = root / device_name(d)
        create_device_keys(folders[int(d)], int(d), allow=root / SERVER_NAME)
    return root / SERVER_NAME, folders


# -- loading -----------------------------------------------------------------------------------

#: a process (EMFILE) or the system (ENFILE) out of file descriptors: a passing state, not a bad file
DESCRIPTOR_ERRNOS = (errno.EMFILE, errno.ENFILE)


def _load(path: Path, want_secret: bool) -> tuple[bytes, bytes | None]:

    if not path.is_file():
        raise SecurityError(f"{path}: no such key file (make keys with `multispin keys`)")
    if want_secret and os.name == "posix":
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise SecurityError(f"{path}: secret key is readable by others (mode {mode:04o}); run `chmod 600 {path}`")
    try:
        public, secret = zmq.auth.load_certificate(path)
    except OSError as exc:
        if exc.errno in DESCRIPTOR_ERRNOS:  # the process, not the file: the caller retries later
            raise
        raise SecurityError(f"{path}: not a key file ({' '.join(str(exc).split())})") from None
    except ValueError as exc:
        raise SecurityError(f"{path}: not a key file ({' '.join(str(exc).split())})") from None
    if len(public) != 40 or (want_secret and (secret is None or len(secret) != 40)):
        raise SecurityError(f"{path}: not a CurveZMQ key file (a key is 40 Z85 characters)")
    return public, secret


def load_server_keys(server_dir: str | os.PathLike) -> ServerKeys:
    server_dir = Path(server_dir)
    public, secret = _load(server_dir / f"{SERVER_NAME}.key_secret", want_secret=True)
    assert secret is not None  # want_secret: _load refuses a file without one
    allowed = server_dir / ALLOWED_DIR
    if not allowed.is_dir():
        raise SecurityError(f"{allowed}: no allowed-keys folder (make it with `multispin keys server`)")
    return ServerKeys(public, secret, allowed)


def device_key_folder(keys: str | os.PathLike, device_id: int) -> Path:
    """Device ``device_id``'s key folder under the one layout every command uses: ``KEYS/device-N``
    where that folder exists (as `multispin keys device KEYS/device-N`, the pool and the testbed
    make it), else ``KEYS`` itself (one device's folder, or one folder holding several pairs)."""
    sub = Path(keys) / device_name(device_id)
    return sub if sub.is_dir() else Path(keys)


def find_device_keys(keys: str | os.PathLike, device_id: int) -> DeviceKeys:
    """Device ``device_id``'s keys from ``KEYS/device-N`` or ``KEYS`` (`device_key_folder`), with
    a one-line error naming both places when neither holds them."""
    folder = device_key_folder(keys, device_id)
    name = device_name(device_id)
    if not (folder / f"{name}.key_secret").is_file():
        root = Path(keys)
        raise SecurityError(
            f"{root}: no key pair for device {device_id} (looked for {root / name / (name + '.key_secret')} "
            f"and {root / (name + '.key_secret')}); make it with `multispin keys device {root / name} "
            f"--device-id {device_id} --allow SERVER_DIR`"
        )
    return load_device_keys(folder, device_id)


def load_device_keys(device_dir: str | os.PathLike, device_id: int | None = None) -> DeviceKeys:
    """Device keys from ``device_dir`` (the only pair there when ``device_id`` is None) and the
    server's public key if ``server.key`` is there."""
    device_dir = Path(device_dir)
    if device_id is None:
        found = sorted(device_dir.glob("device-*.key_secret")) if device_dir.is_dir() else []
        if not found:
            raise SecurityError(f"{device_dir}: no device key pair (make one with `multispin keys device`)")
        if len(found) > 1:
            raise SecurityError(f"{device_dir}: {len(found)} device key pairs; give the device id")
        device_id = int(found[0].name[len("device-") : -len(".key_secret")])
    public, secret = _load(device_dir / f"{device_name(device_id)}.key_secret", want_secret=True)
    assert secret is not None  # want_secret: _load refuses a file without one
    server_file = device_dir / f"{SERVER_NAME}.key"
    server_public = _load(server_file, want_secret=False)[0] if server_file.exists() else None
    return DeviceKeys(int(device_id), public, secret, server_public)


class AllowedKeys:
    """The allowed-keys folder as a map public key → device id (``device-N.key`` allows one key
    as device N). The authenticator asks it who may connect; the server asks it who a key is."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self._ids: dict[bytes, int] = {}
        self.reload()

    def reload(self) -> None:
        """Read the folder again (after ``multispin keys device --allow`` while serving). Raises
        SecurityError for a bad folder or key file, OSError when out of descriptors (nothing
        changes then)."""
        if not self.directory.is_dir():
            raise SecurityError(f"{self.directory}: no allowed-keys folder")
        ids: dict[bytes, int] = {}
        for path in sorted(self.directory.iterdir()):
            if not path.name.endswith(".key"):
                continue
            m = _DEVICE_FILE.match(path.name)
            if m is None:
                raise SecurityError(f"{path}: an allowed key file is named device-N.key (N the device id)")
            public, _ = _load(path, want_secret=False)
            if public in ids:
                raise SecurityError(
                    f"{path}: the same public key is allowed as device {ids[public]}; one key, one device"
                )
            ids[public] = int(m.group(1))
        self._ids = ids

    def signature(self) -> tuple:
        """What changes when a key file is added, removed or rewritten (cheap: one stat per
        file), so that a server can notice a change without re-reading every key. Raises
        OSError when the process is out of descriptors (the folder cannot be listed now)."""
        try:
            return tuple(
                sorted(
                    (p.name, st.st_mtime_ns, st.st_size)
                    for p in self.directory.iterdir()
                    if p.name.endswith(".key")
                    for st in (p.stat(),)
                )
            )
        except OSError as exc:
            if exc.errno in DESCRIPTOR_ERRNOS:
                raise
            return ("unreadable",)

    def ids(self) -> set[int]:
        return set(self._ids.values())

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, public_key: bytes | str) -> bool:
        return self.identity_for(public_key) is not None

    def identity_for(self, public_key: bytes | str | None) -> int | None:
        """The device id a public key (Z85) is allowed as, or None."""
        if public_key is None:
            return None
        key = public_key.encode("ascii") if isinstance(public_key, str) else bytes(public_key)
        return self._ids.get(key)

    def check_claim(self, public_key: bytes | str | None, claimed_device_id: int) -> None:
        """Raise `SecurityError` unless ``public_key`` is allowed as ``claimed_device_id``
        (a HELLO's device id must be the id its sender's key is bound to)."""
        owner = self.identity_for(public_key)
        if owner is None:
            raise SecurityError("peer's key is not in the allowed set")
        if owner != int(claimed_device_id):
            raise SecurityError(f"device {owner}'s key claimed device id {claimed_device_id}")

    # the credentials-provider interface of zmq.auth's configure_curve_callback
    def callback(self, domain: str, key: bytes) -> bool:
        return key in self._ids


class _QuotaKeys:
    """The authenticator's credentials provider: an allowed key, while it holds fewer silent
    connections than its quota. Over the quota the answer is a refusal (ZAP 400) like a key not
    allowed, because that is the answer that stops a DEALER: libzmq never reconnects after an
    ERROR in the handshake, while a temporary refusal (ZAP 300) leaves the connection open until
    the handshake timeout and the client then reconnects."""

    def __init__(self, allowed: AllowedKeys, quota: SilentKeyQuota) -> None:
        self.allowed, self.quota = allowed, quota

    def callback(self, domain: str, key: bytes) -> bool:
        return self.allowed.callback(domain, key) and self.quota.admit(key, time.monotonic())


# -- sockets -----------------------------------------------------------------------------------


def curve_server(
    socket: zmq.Socket, keys: ServerKeys, allowed: AllowedKeys | None = None, quota: SilentKeyQuota | None = None
) -> ThreadAuthenticator:
    """Make ``socket`` (a ROUTER, not yet bound) a CURVE server that lets in only the allowed
    keys, each while it holds fewer silent connections than ``quota`` allows (`SilentKeyQuota`).
    Starts and returns the authenticator thread on the socket's context: keep it, and ``stop()``
    it after closing the socket. Call before ``bind``: libzmq lets any key in while no
    authenticator is running."""

    allowed = allowed if allowed is not None else AllowedKeys(keys.allowed_dir)
    auth = ThreadAuthenticator(socket.context, log=_quiet_logger())
    auth.start()
    provider = allowed if quota is None else _QuotaKeys(allowed, quota)
    auth.configure_curve_callback(domain=ZAP_DOMAIN, credentials_provider=provider)
    socket.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN.encode())
    socket.curve_secretkey = keys.secret
    socket.curve_publickey = keys.public
    socket.curve_server = True
    return auth


def curve_client(socket: zmq.Socket, keys: DeviceKeys, server_public: bytes | str | None = None) -> None:
    """Make ``socket`` (a DEALER, not yet connected) a CURVE client of the server whose public
    key is ``server_public`` (default: the device folder's ``server.key``)."""
    server = server_public if server_public is not None else keys.server_public
    if server is None:
        raise SecurityError(
            f"device {keys.device_id}: no server public key (copy the server's "
            "server.key into the device folder, or make the device keys with --allow)"
        )
    socket.curve_secretkey = keys.secret
    socket.curve_publickey = keys.public
    socket.curve_serverkey = server.encode("ascii") if isinstance(server, str) else bytes(server)


def peer_key(frame: Any) -> str | None:
    """The Z85 public key of the peer that sent ``frame`` (received with ``copy=False``) on a
    CURVE server socket, or None on a plain socket."""
    try:
        user_id = frame.get("User-Id")
    except Exception:  # no such property: not a CURVE/ZAP connection
        return None
    return user_id or None


def _quiet_logger():

    # zmq.auth logs every allowed/denied handshake at DEBUG; refusals are counted by the loops
    return logging.getLogger("multispin.runtime.security.keys.zap")
