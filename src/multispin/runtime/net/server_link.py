"""The server's side of the network: its sans-I/O protocol and its ZeroMQ transport, joined.

What: `ServerLink.pump` waits for traffic on the transport, feeds every frame to the
`ServerProtocol`, sends what the protocol queued (`flush`) and writes what it recorded to the log;
between frames it runs the time-driven checks (handshake deadlines, connection bounds, the
refusal logs' intervals, and the server's own housekeeping: the allowed-keys folder).

Why apart from the round: the round driver (`server.EdgeServer`) only asks the link to wait until
something holds (`pump_until`); which bytes go out, which peer is cut and which repetition is
logged whole or counted are the same in every phase of a round, and in the handshakes between.
Refusals and session churn are what a flood or a misbehaving key makes, so both are counted per
cause and logged once per interval (`RefusalLog`), never one line per message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from multispin.runtime.net.jsonlog import JsonlLog
from multispin.runtime.net.transport import ServerTransport
from multispin.runtime.security.limits import RefusalLog
from multispin.runtime.wire import messages as P
from multispin.runtime.wire.server_protocol import HANDSHAKE_TYPES, SESSION_TYPES, ServerProtocol

log = logging.getLogger("multispin.server")

POLL_SLICE_S = 0.05  # the longest the loop sleeps before looking at its clock again
_HOUSEKEEPING_S = 0.01  # how often the time-driven checks run while every connection has a session


def transport_limit_bytes(limits: P.Limits) -> int:
    """The transport's backstop: libzmq cuts a peer whose frame is larger before buffering it (the
    socket monitor then tells the loop); a frame between the protocol's limit and this one is read
    and refused with a logged reason."""
    return 4 * max(limits.max_bytes(t) for t in HANDSHAKE_TYPES + SESSION_TYPES) + 65536


class ServerLink:
    """The protocol and the transport of one server, with the logs of what peers did.

    ``keyed``: the transport authenticates keys (CurveZMQ), so each frame comes with its sender's
    key, and each key may hold ``silent_per_key`` connections that sent nothing
    (`SilentKeyQuota`); ``housekeeping(now)``: the server's own time-driven check, run with the link's."""

    def __init__(
        self,
        proto: ServerProtocol,
        log_: JsonlLog,
        *,
        handshake_timeout_s: float,
        refusal_log_interval_s: float,
        keyed: bool,
        silent_per_key: int = 0,
        housekeeping: Callable[[float], None] = lambda now: None,
    ) -> None:
        self.proto = proto
        self.log = log_
        self.keyed = keyed
        self.refusals = RefusalLog(refusal_log_interval_s, emit=self._log_refusals)
        # drops and resumes, per device and cause: one valid key can make them at will
        self.churn = RefusalLog(refusal_log_interval_s, emit=self._log_refusals, label="churn")
        self.limit_bytes = transport_limit_bytes(proto.limits)
        self.transport = ServerTransport(
            self.limit_bytes,
            handshake_timeout_s,
            lambda cause, now, reason: self.refusals.refused(cause, now, peer=reason),
            silent_per_key if keyed else 0,
        )
        self._housekeeping = housekeeping
        self._next_housekeeping = 0.0

    @property
    def refused(self) -> int:
        """Peers refused, by the protocol or already by the transport (a key not allowed)."""
        return self.proto.refused + self.transport.refused

    def flush(self) -> None:
        """Send what the protocol queued and log what it recorded; a connection that cannot take
        its message is dropped."""
        proto, send = self.proto, self.transport.send
        while proto.outbox or proto.events:
            outbox, proto.outbox = proto.outbox, []
            for identity, conn, msg in outbox:
                if conn is not None and not conn.alive and msg.TYPE != "ERROR":
                    continue
                raw = P.encode_message(msg)
                failed = send(identity, raw)
                if failed is not None:
                    if conn is not None:
                        proto.drop(conn, "internal", f"send {msg.TYPE} failed: {failed}", notify=False)
                    continue
                if conn is not None:
                    conn.bytes_out += len(raw)
            events, proto.events = proto.events, []
            for rec in events:
                self._log_event(rec)

    def pump_until(self, done: Callable[[], bool], deadline: float) -> None:
        """Handle traffic until ``done()`` or the monotonic ``deadline``."""
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.pump(min(left, POLL_SLICE_S * 4))

    def pump(self, timeout_s: float) -> None:
        """Wait up to timeout_s for traffic, then handle everything queued."""
        transport, proto = self.transport, self.proto
        transport.poll(timeout_s)
        for identity, frames, key in transport.receive(self.keyed, proto.conns):
            proto.receive(identity, frames, time.monotonic(), key)
            if proto.outbox or proto.events:
                self.flush()
        # only now: every frame a closed connection delivered before its close has been read
        for lost in transport.take_lost():
            proto.connection_lost(
                lost,
                "connection lost: the device closed it, or the "
                f"transport cut it for a frame over {self.limit_bytes} bytes",
            )
        now = time.monotonic()
        # the time-driven checks at most every _HOUSEKEEPING_S: a round's traffic wakes the loop
        # several times per device, and the connection bounds walk every connection
        if now >= self._next_housekeeping or proto.pending or transport.peers.connections > len(proto.conns):
            self._next_housekeeping = now + _HOUSEKEEPING_S
            proto.expire(now)
            transport.cut_idle(now, proto.conns.__contains__, proto.budget.limits)
            self.refusals.tick(now)
            self.churn.tick(now)
            self._housekeeping(now)
        self.flush()

    def flush_logs(self) -> None:
        """Write the counts the refusal logs still hold (at shutdown)."""
        self.refusals.flush(time.monotonic())
        self.churn.flush(time.monotonic())

    def _log_event(self, rec: dict) -> None:
        kind, d = rec["event"], rec.get("device")
        if kind in ("refused", "auth_refused"):
            # refusals are what a flood makes: counted, one line per cause per interval
            who = f"device {d}: " if d is not None else ""
            self.log.notify(**rec)
            self.refusals.refused(rec["code"], time.monotonic(), peer=f"{who}{rec['reason']}")
            return
        if kind in ("drop", "resume") and d is not None:
            # so are drops and resumes of one device (one valid key, many HELLOs): the first of a
            # device and cause in an interval is written whole, the rest counted
            cause = f"device {d} {'dropped (' + rec['code'] + ')' if kind == 'drop' else 'resumed'}"
            if not self.churn.refused(cause, time.monotonic(), peer=rec.get("reason"), announce=False):
                self.log.notify(**rec)
                return
        self.log.write(**rec)
        if kind == "drop":
            log.warning("dropped device %d: %s", d, rec["reason"])

    def _log_refusals(self, line: str) -> None:
        log.warning("%s", line)
        self.log.write("refusals", summary=line)


__all__ = ["POLL_SLICE_S", "ServerLink", "transport_limit_bytes"]
