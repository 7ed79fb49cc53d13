"""A TCP relay on 127.0.0.1 that records every byte both ways: what crosses the loopback
between a client and a server, for the tests that check nothing crosses it in clear."""

from __future__ import annotations

import socket as pysocket
import threading


class Recorder:
    """A plain TCP forwarder between clients and one server that records every byte."""

    def __init__(self, upstream_port):
        self.listener = pysocket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.upstream_port = upstream_port
        self.seen = bytearray()
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = pysocket.create_connection(("127.0.0.1", self.upstream_port))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src, dst):
        try:
            while data := src.recv(65536):
                with self.lock:
                    self.seen += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(pysocket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.listener.close()
