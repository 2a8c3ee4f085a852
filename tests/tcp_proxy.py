"""A test-only TCP forwarder that can drop every connection or refuse new ones (database faults)."""
from __future__ import annotations

import socket
import threading
from typing import Any

from server_process import free_port


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; ``drop_all`` cuts every open connection."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self.refusing = False       # True: accept and close at once (the database is down)
        self.dropped = 0            # connections cut by drop_all
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._listener.settimeout(0.2)  # so the accept loop sees ``close`` promptly
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)

    def start(self) -> "TcpProxy":
        """Start accepting."""
        self._thread.start()
        return self

    def drop_all(self) -> int:
        """Cut every open connection (both sides); return how many were cut."""
        with self._lock:
            victims = list(self._open)
            self._open.clear()
        for sock in victims:
            _shut(sock)
        self.dropped += len(victims) // 2
        return len(victims) // 2

    def close(self) -> None:
        """Stop accepting and cut everything."""
        self._closed.set()
        self._thread.join(timeout=5)
        self._listener.close()
        self.drop_all()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if self.refusing:
                _shut(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _shut(client)
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        # Ends when either side closes or is cut; then closes both.
        while True:
            try:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
            except OSError:
                break
        with self._lock:
            self._open.discard(src)
            self._open.discard(dst)
        _shut(src)
        _shut(dst)


def _shut(sock: Any) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
