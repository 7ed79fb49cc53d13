"""TransportPeers on scripted monitor events: who is lost when a TCP connection closes, with
descriptors reused, frames read late and events that lag; a live connection is never lost."""

from multispin.runtime.net.transport_peers import TransportPeers


def test_a_closed_connection_loses_its_peers_when_asked():
    t = TransportPeers()
    t.accepted(7)
    t.accepted(8)
    t.seen(b"a", 7)
    t.seen(b"b", 8)
    t.seen(b"a", 7)  # a second frame changes nothing
    t.disconnected(7)
    assert t.take_lost() == [b"a"]
    assert t.take_lost() == []  # reported once
    assert len(t) == 1


def test_a_reused_descriptor_belongs_to_its_new_connection():
    t = TransportPeers()
    t.accepted(7)
    t.seen(b"old", 7)
    t.disconnected(7)
    t.accepted(7)  # the kernel hands the fd to the next connection
    t.seen(b"new", 7)
    assert t.take_lost() == [b"old"]
    t.disconnected(7)
    assert t.take_lost() == [b"new"]


def test_frames_a_peer_sent_before_its_close_do_not_bind_it_again():
    t = TransportPeers()
    t.accepted(7)
    t.seen(b"a", 7)
    t.disconnected(7)
    t.accepted(7)
    t.seen(b"a", 7)  # its BYE, read after the monitor reported the close
    t.seen(b"b", 7)
    assert t.take_lost() == [b"a"]
    t.disconnected(7)
    assert t.take_lost() == [b"b"]  # a is not reported twice, nor bound to b's connection


def test_a_first_frame_from_a_closed_descriptor_waits_for_the_next_accept():
    """The monitor reported fd 7 closed and not yet its next ACCEPTED: the frame's connection is
    that next one (or the peer is gone already); either way the current close does not touch it."""
    t = TransportPeers()
    t.accepted(7)
    t.seen(b"a", 7)
    t.disconnected(7)
    t.seen(b"b", 7)
    assert t.take_lost() == [b"a"]
    t.accepted(7)
    assert t.take_lost() == []
    t.disconnected(7)
    assert t.take_lost() == [b"b"]


def test_an_unreported_descriptor_binds_to_its_first_accept():
    t = TransportPeers()
    t.seen(b"a", 9)  # ACCEPTED still on its way
    t.accepted(9)
    t.disconnected(9)
    assert t.take_lost() == [b"a"]


def test_negative_control_binding_to_the_closed_generation_misses_the_loss():
    """What the generation rule is for: bind a first frame read from a closed fd to that fd's
    current (closed) generation, and the peer's own connection closing is never reported."""

    class Naive(TransportPeers):
        def seen(self, peer, fd):
            if peer not in self._link and peer not in self._lost:
                link = (fd, self._generation.get(fd, 0))
                self._link[peer] = link
                self._peers.setdefault(link, set()).add(peer)

    reported = {}
    for cls in (TransportPeers, Naive):
        t = cls()
        t.accepted(7)
        t.seen(b"a", 7)
        t.disconnected(7)
        t.seen(b"b", 7)  # b's first frame, its ACCEPTED still on its way
        t.accepted(7)
        t.take_lost()
        t.disconnected(7)  # b's connection closes
        reported[cls.__name__] = t.take_lost()
    assert reported == {"TransportPeers": [b"b"], "Naive": []}


def test_connections_without_a_session_are_overdue_at_the_deadline_once():
    t = TransportPeers()
    t.accepted(5, now=0.0, tag="silent")
    t.accepted(6, now=0.0, tag="device")
    t.accepted(7, now=1.5, tag="late")
    t.seen("dev", 6)
    established = {"dev"}.__contains__
    assert t.overdue(1.9, 2.0, established) == []  # not yet
    assert t.overdue(2.0, 2.0, established) == [(5, "silent")]  # the session on fd 6 keeps it
    assert t.overdue(3.0, 2.0, established) == []  # named once; 7 is not due before 3.5
    assert t.overdue(3.5, 2.0, lambda p: False) == [(6, "device"), (7, "late")]  # a session that ended
    t.disconnected(5)
    t.accepted(5, now=4.0, tag="reused")  # a new connection on the same descriptor starts afresh
    assert t.overdue(6.0, 2.0, established) == [(5, "reused")]


def test_connections_over_the_limit_go_silent_first_oldest_first_never_a_session():
    t = TransportPeers()
    for fd, at in ((1, 0.0), (2, 1.0), (3, 2.0), (4, 3.0), (5, 4.0)):
        t.accepted(fd, now=at, tag=fd)
    t.seen("hello", 2)  # in its handshake
    t.seen("session", 1)  # established, although the oldest
    established = {"session"}.__contains__
    assert t.connections == 5
    assert t.excess(5, established) == []
    assert t.excess(3, established) == [(3, 3), (4, 4)]  # the silent ones, oldest first
    assert t.excess(1, established) == [(5, 5), (2, 2)]  # then the one in its handshake; never fd 1
    assert t.excess(0, established) == []  # nothing else may go
