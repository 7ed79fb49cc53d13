"""The edge server's transport: one ZeroMQ ROUTER socket, its monitor, and the TCP connections under it.

What: `ServerTransport` opens the socket (CurveZMQ when the server has keys), binds it, waits for
traffic, hands the loop each received message as (routing identity, frames, authenticated key),
sends, tells the loop which peers' connections are gone (`TransportPeers`), and cuts the TCP
connections that hold a descriptor for nothing (open past the handshake deadline without a
session, or over ``max_connections``). It knows nothing of messages or rounds: the loop
(`multispin.runtime.net.server`) feeds the frames to the protocol.

Why apart from the loop: the socket options, the monitor's events, the descriptor budget and the
cutting of one peer's connection (libzmq has no call for it) are the transport's concerns; the
loop reads as its round. The calls on the hot path use plain ints for pyzmq's flags (its
``send_multipart``/``recv_multipart`` build an IntFlag object per call and wrap every frame).
"""

from __future__ import annotations

import errno
import functools
import math
import operator
import os
import socket
import time
from collections.abc import Callable, Container, Hashable, Iterator
from typing import Any

try:
    import resource
except ImportError:  # not POSIX: the descriptor budget is unbounded (_descriptor_budget)
    resource = None  # type: ignore[assignment]

import zmq
from zmq.utils.monitor import recv_monitor_message

from multispin.errors import ConfigError
from multispin.runtime.net.transport_peers import TransportPeers
from multispin.runtime.security.keys import AllowedKeys, ServerKeys, curve_server, peer_key
from multispin.runtime.security.limits import (
    HANDSHAKE_DEADLINE,
    SILENT_KEY_QUOTA,
    TOO_MANY_CONNECTIONS,
    ConnectionLimits,
    SilentKeyQuota,
)

_ZMQ_EVENTS, _ZMQ_POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)
_NOBLOCK, _MORE_NOBLOCK = int(zmq.NOBLOCK), int(zmq.SNDMORE | zmq.NOBLOCK)
_RCVMORE, _SRCFD = int(zmq.RCVMORE), int(zmq.SRCFD)
# descriptors kept free of connections: the journal's and the log's files, a key reload
FD_HEADROOM = 32
# the transport's own refusals (the socket monitor), before any frame reaches the protocol
_TRANSPORT_REFUSALS = {
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: ("auth", "transport: the key is not allowed"),
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: (
        "protocol",
        "transport: handshake failed (no key, another server's key, or not ZeroMQ)",
    ),
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: ("protocol", "transport: handshake failed"),
}
_QUOTA_REFUSAL = (SILENT_KEY_QUOTA, "transport: the key holds its quota of connections that sent nothing")


class ServerTransport:
    """The server's ROUTER socket. ``limit_bytes``: the largest frame libzmq reads (a larger one
    cuts its connection); ``on_refused(cause, now, reason)``: each connection the transport turns
    away or cuts, never seen by the protocol (also counted in ``refused``); ``silent_per_key``:
    with keys, the connections of one key that may have authenticated and sent nothing, counted
    over one handshake timeout (`SilentKeyQuota`; 0: no quota)."""

    def __init__(
        self,
        limit_bytes: int,
        handshake_timeout_s: float,
        on_refused: Callable[[str, float, str], object],
        silent_per_key: int = 0,
    ) -> None:
        self.limit_bytes = limit_bytes
        self.handshake_timeout_s = handshake_timeout_s
        self.quota = SilentKeyQuota(silent_per_key, handshake_timeout_s) if silent_per_key > 0 else None
        self._quota_refusals_seen = 0  # the quota's refusals already told apart from keys not allowed
        self.on_refused = on_refused
        self.refused = 0
        self.peers = TransportPeers()
        self.fd_budget = 1 << 30  # connections the descriptor limit allows (measured once bound)
        self.endpoint: str | None = None
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None
        self._monitor: zmq.Socket | None = None  # the socket's TCP connections opening and closing
        self._poller = zmq.Poller()
        self._authenticator: Any = None

    @property
    def bound(self) -> bool:
        return self._sock is not None and self.endpoint is not None

    def open(self, endpoint: str, keys: ServerKeys | None, allowed: AllowedKeys | None) -> str:
        """Make the socket (a CurveZMQ server admitting ``allowed`` when ``keys`` are given) and
        bind it; returns the endpoint bound. A port that cannot be bound is a ConfigError."""
        self._ctx = zmq.Context()
        sock = self._sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # sending to a vanished device raises, never blocks
        sock.setsockopt(zmq.LINGER, 1000)
        sock.setsockopt(zmq.SNDHWM, 10_000)
        sock.setsockopt(zmq.RCVHWM, 10_000)
        sock.setsockopt(zmq.MAXMSGSIZE, self.limit_bytes)
        # a TCP peer that never completes the transport handshake is closed after this
        sock.setsockopt(zmq.HANDSHAKE_IVL, int(self.handshake_timeout_s * 1000))
        # every TCP connection's ACCEPTED and DISCONNECTED, before bind so that none is missed
        self._monitor = sock.get_monitor_socket(
            zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | functools.reduce(operator.or_, _TRANSPORT_REFUSALS)
        )
        self._poller.register(sock, zmq.POLLIN)
        self._poller.register(self._monitor, zmq.POLLIN)
        if keys is not None:  # before bind: libzmq admits any key while no authenticator runs
            self._authenticator = curve_server(sock, keys, allowed, self.quota)
        try:
            sock.bind(endpoint)
        except zmq.ZMQError as exc:
            raise ConfigError(f"port: cannot bind {endpoint} ({exc})") from None
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.fd_budget = _descriptor_budget(FD_HEADROOM)
        return self.endpoint

    def poll(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for traffic (frames or the monitor's events)."""
        self._poller.poll(max(0, int(math.ceil(timeout_s * 1000))))

    def receive(self, keyed: bool, established: Container[bytes]) -> Iterator[tuple[bytes, list[bytes], str | None]]:
        """Every message queued now, as (identity, frames, key). ``key``: the public key the
        transport authenticated, read from the first frame of a handshake (``keyed`` and the
        identity not in ``established``); a session's key was checked at its HELLO."""
        sock, peers = self._sock, self.peers
        assert sock is not None
        while True:
            self.take_events()  # a connection's ACCEPTED comes before its first frame
            try:
                routing = sock.recv(_NOBLOCK, copy=False)  # a Frame: its SRCFD names the connection
            except zmq.Again:
                return
            identity = routing.bytes
            first = not peers.knows(identity)
            if first:  # only a peer's first frame binds it to its connection
                peers.seen(identity, routing.get(_SRCFD))
            handshake = keyed and identity not in established
            frames = []
            while sock.getsockopt(_RCVMORE):
                frames.append(sock.recv(_NOBLOCK, copy=not handshake))
            key = None
            if handshake and frames:
                key = peer_key(frames[0])
                frames = [f.bytes for f in frames]  # type: ignore[union-attr]  # copy=False: Frames
                if first and key is not None and self.quota is not None:
                    self.quota.spoke(key.encode("ascii"))  # its connection is no longer silent
            yield identity, frames, key  # type: ignore[misc]  # bytes by now

    def send(self, identity: bytes, raw: bytes) -> str | None:
        """Send one message to ``identity``; the reason it failed (a vanished peer or a full queue,
        ROUTER_MANDATORY), or None."""
        sock = self._sock
        assert sock is not None
        try:
            sock.send(identity, _MORE_NOBLOCK)
            sock.send(raw, _NOBLOCK)
        except zmq.ZMQError as exc:
            return str(exc.strerror)
        return None

    def take_lost(self) -> list[bytes]:
        """The peers whose connection closed (after every frame it delivered was read)."""
        return self.peers.take_lost()  # type: ignore[return-value]  # the identities it was told

    def take_events(self) -> None:
        """The monitor's events: connections accepted and closed, and the handshakes refused."""
        monitor = self._monitor
        assert monitor is not None
        # getsockopt with plain ints: cheaper than poll(0), which builds a Poller, and than get()
        # with the enums (this runs before every frame the loop reads)
        while monitor.getsockopt(_ZMQ_EVENTS) & _ZMQ_POLLIN:  # type: ignore[operator]  # an int option
            event = recv_monitor_message(monitor)
            if event["event"] == zmq.EVENT_ACCEPTED:
                fd = event["value"]
                self.peers.accepted(fd, time.monotonic(), _addresses(fd))
            elif event["event"] == zmq.EVENT_DISCONNECTED:
                self.peers.disconnected(event["value"])
            elif event["event"] in _TRANSPORT_REFUSALS:
                code, reason = _TRANSPORT_REFUSALS[event["event"]]  # type: ignore[index]  # an int of the enum
                if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH and self._over_quota():
                    code, reason = _QUOTA_REFUSAL
                self.refused += 1
                self.on_refused(code, time.monotonic(), reason)

    def _over_quota(self) -> bool:
        """Whether a refused handshake was the quota's (both are ZAP 400 on the wire; the quota
        counts its own, each of which the monitor reports after the authenticator answered)."""
        if self.quota is None or self.quota.refused <= self._quota_refusals_seen:
            return False
        self._quota_refusals_seen += 1
        return True

    def cut_idle(self, now: float, established: Callable[[Hashable], bool], limits: ConnectionLimits) -> None:
        """Cut the TCP connections that hold a descriptor for nothing: open past the handshake
        deadline without a session (a peer that finished the transport handshake and then says
        nothing never reaches the protocol, whose budget counts peers from their first frame),
        and those over max_connections, silent ones first. A device cut this way reconnects
        (its HELLO waits in its socket) and gets in when a slot is free."""
        # at most what the descriptor limit leaves: beyond it libzmq cannot accept, and a device
        # would wait in the kernel's backlog behind the flood; below it, the oldest silent
        # connection makes room for each newcomer
        most = min(limits.max_connections, self.fd_budget)
        for cause, cut in (
            (HANDSHAKE_DEADLINE, self.peers.overdue(now, limits.handshake_deadline_s, established)),
            (TOO_MANY_CONNECTIONS, self.peers.excess(most, established)),
        ):
            for fd, tag in cut:
                silent = not self.peers.spoke(fd)
                done = _cut_connection(fd, tag)
                if done is None:  # the shutdown failed: try again at the next check
                    self.peers.uncut(fd)
                elif done and silent:  # one that spoke was answered by the protocol
                    self.refused += 1
                    self.on_refused(cause, now, "transport: a connection that sent nothing")

    def close(self) -> None:
        if self._monitor is not None:
            self._sock.disable_monitor()  # type: ignore[union-attr]
            self._monitor.close(linger=0)
        if self._sock is not None:
            self._sock.close(linger=500)
        if self._authenticator is not None:
            self._authenticator.stop()
        if self._ctx is not None:
            self._ctx.term()


def _borrowed(fd: int) -> socket.socket | None:
    """A socket object on libzmq's descriptor ``fd`` itself, not a duplicate: at the descriptor
    limit (a flood) there is no spare descriptor for os.dup, and the connections to cut are the
    very ones holding them. The caller must `detach` it (closing it would close libzmq's)."""
    try:
        return socket.socket(fileno=fd)
    except OSError:  # not a socket (any more)
        return None


def _addresses(fd: int) -> tuple | None:
    """(local, peer) address of the TCP connection on libzmq's descriptor ``fd``; None if it is
    not a connected socket."""
    sock = _borrowed(fd)
    if sock is None:
        return None
    try:
        return sock.getsockname(), sock.getpeername()
    except OSError:
        return None
    finally:
        sock.detach()


def _cut_connection(fd: int, tag: tuple | None) -> bool | None:
    """Shut down the connection on libzmq's descriptor ``fd``: libzmq reads the end, closes the
    descriptor itself and reports DISCONNECTED. Only if the descriptor still holds the very
    connection its ACCEPTED named (same local and peer address): a descriptor closed and reused
    meanwhile is left alone (False). None: the shutdown itself failed, worth another try. Needs
    no descriptor of its own. libzmq has no call to close one peer of a ROUTER."""
    if tag is None or _addresses(fd) != tag:
        return False
    sock = _borrowed(fd)
    if sock is None:
        return False
    try:
        sock.shutdown(socket.SHUT_RDWR)
        return True
    except OSError as exc:
        return False if exc.errno == errno.ENOTCONN else None  # ENOTCONN: the peer is gone already
    finally:
        sock.detach()


def _descriptor_budget(headroom: int) -> int:
    """How many more descriptors this process may open, less ``headroom`` (the journal, the
    log, a key reload): the connections the server keeps at most. Unbounded where the limit or
    the open descriptors cannot be read."""
    if resource is None:
        return 1 << 30
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        used = len(os.listdir("/proc/self/fd"))
    except (OSError, ValueError):
        return 1 << 30
    if soft == resource.RLIM_INFINITY:
        return 1 << 30
    return max(1, soft - used - headroom)


__all__ = ["FD_HEADROOM", "ServerTransport"]
