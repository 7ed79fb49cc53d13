"""The processes and their transport: the ZeroMQ server and device loops, the local testbed
launcher, which peer rides on which connection, link emulation and the per-round log. The only
ring (with ``security.keys``) that imports zmq."""
