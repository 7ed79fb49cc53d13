"""One round of Multi-SPIN in process: the engine (engine.py), the device and server roles, the
in-process loop (local.py), ``generate`` (session.py), the planner and the policy names. No
sockets, no messages: the wire and the loops build on this ring."""
