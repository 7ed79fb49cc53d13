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

It also bounds the connections themselves: a peer that finishes the transport
handshake and then says nothing never reaches the protocol, so only the transport can count it.
`overdue` names the connections open past the handshake deadline without an authenticated
session on them (silent, refused, or stuck in the handshake), `excess` the ones over
``max_connections``, silent ones first and the oldest of those first (a device that has sent its
HELLO keeps its place against a flood that sends nothing). The loop cuts them.
Pure logic: the loop feeds it the monitor's events, the frames' fds and the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable


class TransportPeers:
    def __init__(self) -> None:
        self._since: dict[tuple[int, int], float] = {}  # open connection -> when it was accepted
        self._tag: dict[tuple[int, int], tuple | None] = {}  # what the loop needs to cut it (its addresses)
        self._cut: set[tuple[int, int]] = set()  # cut, its DISCONNECTED not yet reported
        self._generation: dict[int, int] = {}  # fd -> ACCEPTED count
        self._open: set[int] = set()
        self._peers: dict[tuple[int, int], set[Hashable]] = {}  # (fd, generation) -> its peers
        self._link: dict[Hashable, tuple[int, int]] = {}
        self._lost: dict[Hashable, None] = {}  # closed, not yet taken (in the order they closed)

    def __len__(self) -> int:
        return len(self._link)

    def accepted(self, fd: int, now: float = 0.0, tag: tuple | None = None) -> None:
        self._generation[fd] = self._generation.get(fd, 0) + 1
        self._open.add(fd)
        key = (fd, self._generation[fd])
        self._since[key], self._tag[key] = now, tag

    def disconnected(self, fd: int) -> None:
        """The connection on ``fd`` closed: its peers are lost."""
        self._open.discard(fd)
        key = (fd, self._generation.get(fd, 0))
        self._since.pop(key, None)
        self._tag.pop(key, None)
        self._cut.discard(key)
        for peer in sorted(self._peers.pop(key, set()), key=repr):
            del self._link[peer]
            self._lost[peer] = None

    def knows(self, peer: Hashable) -> bool:
        """Whether ``peer`` is bound already (`seen` would do nothing): the loop then need not
        read its frame's descriptor."""
        return peer in self._link or peer in self._lost

    def seen(self, peer: Hashable, fd: int) -> None:
        """A frame of ``peer`` arrived from ``fd``."""
        if self.knows(peer):
            return
        generation = self._generation.get(fd, 0) + (fd not in self._open)
        self._link[peer] = (fd, generation)
        self._peers.setdefault((fd, generation), set()).add(peer)

    @property
    def connections(self) -> int:
        """Open TCP connections (accepted, not reported closed)."""
        return len(self._since)

    def overdue(
        self, now: float, deadline_s: float, established: Callable[[Hashable], bool]
    ) -> list[tuple[int, tuple | None]]:
        """(fd, tag) of each connection open longer than ``deadline_s`` with no established peer
        on it; each is named once (it is marked cut until its DISCONNECTED)."""
        out = []
        for key, since in self._since.items():
            if key in self._cut or now - since < deadline_s:
                continue
            if not any(established(p) for p in self._peers.get(key, ())):
                out.append(key)
        return self._mark_cut(out)

    def excess(self, max_connections: int, established: Callable[[Hashable], bool]) -> list[tuple[int, tuple | None]]:
        """(fd, tag) of the connections over ``max_connections``: silent ones (no frame yet)
        first, oldest first, then the newest of those still in their handshake; a connection
        carrying an established session is never named."""
        live = [k for k in self._since if k not in self._cut]
        over = len(live) - max_connections
        if over <= 0:
            return []
        silent = sorted((k for k in live if k not in self._peers), key=self._since.__getitem__)
        spoke = sorted(
            (k for k in live if k in self._peers and not any(map(established, self._peers[k]))),
            key=self._since.__getitem__,
            reverse=True,
        )
        return self._mark_cut((silent + spoke)[:over])

    def spoke(self, fd: int) -> bool:
        """Whether the open connection on ``fd`` has delivered a frame."""
        return (fd, self._generation.get(fd, 0)) in self._peers

    def uncut(self, fd: int) -> None:
        """The cut of the open connection on ``fd`` failed: name it again at the next check."""
        self._cut.discard((fd, self._generation.get(fd, 0)))

    def _mark_cut(self, keys: list[tuple[int, int]]) -> list[tuple[int, tuple | None]]:
        self._cut.update(keys)
        return [(fd, self._tag.get((fd, g))) for fd, g in keys]

    def take_lost(self) -> list[Hashable]:
        """The peers whose connection closed since the last call."""
        lost, self._lost = list(self._lost), {}
        return lost
