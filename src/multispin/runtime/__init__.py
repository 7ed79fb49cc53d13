"""The running system, in rings (docs/architecture.md). Imports point inwards:

- ``round``: one round of Multi-SPIN in process (engine, device and server roles, the in-process
  loop, ``generate``, the planner). Knows nothing of sockets or messages.
- ``wire``: the messages and the sans-I/O protocol objects that carry a round between processes,
  and the records a networked run reports. Imports ``round`` and ``security``, never ``net``.
- ``net``: the ZeroMQ loops, the launcher, link emulation, logs: the only ring that does I/O on
  sockets. Imports every ring.
- ``security`` (keys, MACs, connection limits) and ``store`` (the journal): leaves, importing no
  other ring.
"""
