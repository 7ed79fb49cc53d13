"""Which peer (ROUTER routing identity) rides on which TCP connection, so that the server loop
learns at once that a peer's connection is gone.

Why: libzmq closes a connection by itself when the peer goes away (a crash, a kill) and when a
frame exceeds the socket's MAXMSGSIZE, and in neither case does the ROUTER socket say so: the
server would wait out a whole round timeout for a device that can no longer answer, and a
100 MB frame would vanish with nothing logged. The socket monitor reports each TCP connection's
ACCEPTED and DISCONNECTED with its file descriptor, and each received frame carries its source
descriptor (``zmq.SRCFD``); this class joins the two.

Descriptors are reused, so each has a generation, bumped at every ACCEPTED. A peer is bound to
(descriptor, generation) when its first frame is read, after the monitor's pending events have
been taken in: libzmq's I/O thread reports a connection's ACCEPTED before it delivers any of its
frames, and its DISCONNECTED before the descriptor can be reused. A first frame read from a
descriptor whose connection is reported closed binds to the next generation (either its own
ACCEPTED is still on its way, or the peer is gone already and the round timeout ends it), so a
live connection is never reported gone. A closed connection's peers are reported only when the
loop asks (`take_lost`), after it has read every frame already queued: libzmq delivers a
connection's last frames (a BYE, say) before it reports the close.
Pure logic: the loop feeds it the monitor's events and the frames' fds.
"""

from __future__ import annotations

from typing import Hashable


class TransportPeers:
    def __init__(self) -> None:
        self._generation: dict[int, int] = {}  # fd -> ACCEPTED count
        self._open: set[int] = set()
        self._peers: dict[tuple[int, int], set[Hashable]] = {}  # (fd, generation) -> its peers
        self._link: dict[Hashable, tuple[int, int]] = {}
        self._lost: dict[Hashable, None] = {}  # closed, not yet taken (in the order they closed)

    def __len__(self) -> int:
        return len(self._link)

    def accepted(self, fd: int) -> None:
        self._generation[fd] = self._generation.get(fd, 0) + 1
        self._open.add(fd)

    def disconnected(self, fd: int) -> None:
        """The connection on ``fd`` closed: its peers are lost."""
        self._open.discard(fd)
        for peer in sorted(self._peers.pop((fd, self._generation.get(fd, 0)), set()), key=repr):
            del self._link[peer]
            self._lost[peer] = None

    def seen(self, peer: Hashable, fd: int) -> None:
        """A frame of ``peer`` arrived from ``fd``."""
        if peer in self._link or peer in self._lost:
            return
        generation = self._generation.get(fd, 0) + (fd not in self._open)
        self._link[peer] = (fd, generation)
        self._peers.setdefault((fd, generation), set()).add(peer)

    def take_lost(self) -> list[Hashable]:
        """The peers whose connection closed since the last call."""
        lost, self._lost = list(self._lost), {}
        return lost
