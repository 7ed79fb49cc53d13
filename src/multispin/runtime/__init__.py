"""The running system: round loop, server, devices, protocol, link emulation, clocks."""
