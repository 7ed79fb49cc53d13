"""The plaintext debugging mode's authentication (`--insecure`): challenge-response with one
shared secret. Encrypted runs authenticate each device by its own key instead (`keys.py`).

The server sends a fresh random nonce (CHALLENGE); the device answers with
HMAC-SHA256(secret, domain tag ‖ nonce ‖ device id) (AUTH). The secret never crosses the wire,
a recorded answer is useless for another nonce, and binding the device id into the MAC stops a
device from answering a challenge in another device's name.

Secrets come from a flag or, so that they do not show in `ps`, from the environment variable
``MULTISPIN_SECRET``.
"""

from __future__ import annotations

import hashlib
import hmac
import os

from multispin.errors import ConfigError

SECRET_ENV = "MULTISPIN_SECRET"
NONCE_BYTES = 32
MAC_BYTES = 32
MIN_SECRET_BYTES = 8
_DOMAIN = b"multispin-auth-v1\x00"


def new_nonce() -> bytes:
    return os.urandom(NONCE_BYTES)


def compute_mac(secret: bytes, nonce: bytes, device_id: int) -> bytes:
    """HMAC-SHA256(secret, domain ‖ nonce ‖ device_id as 8 big-endian bytes)."""
    msg = _DOMAIN + bytes(nonce) + int(device_id).to_bytes(8, "big", signed=False)
    return hmac.new(bytes(secret), msg, hashlib.sha256).digest()


def check_mac(secret: bytes, nonce: bytes, device_id: int, mac: bytes) -> bool:
    """Constant-time comparison of a device's answer with the expected MAC."""
    return hmac.compare_digest(compute_mac(secret, nonce, device_id), bytes(mac))


def resolve_secret(secret: str | bytes | None) -> bytes:
    """The shared secret from the argument or, if that is None/empty, from $MULTISPIN_SECRET."""
    if secret is None or secret == "" or secret == b"":
        secret = os.environ.get(SECRET_ENV, "")
    raw = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    if len(raw) < MIN_SECRET_BYTES:
        if not raw:
            raise ConfigError(f"secret: missing (pass --secret or set ${SECRET_ENV})")
        raise ConfigError(f"secret: must be at least {MIN_SECRET_BYTES} bytes (got {len(raw)})")
    return raw
