"""What crosses the network: the messages (messages.py), the sans-I/O server and device protocol
objects that check every message against the round state, and the records a networked run
reports. No sockets: the loops in ``runtime.net`` drive these objects."""
