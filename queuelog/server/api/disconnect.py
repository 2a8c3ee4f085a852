"""Has the client of the current request gone away? (A long poll must not claim for nobody.)"""
from __future__ import annotations

import socket

from flask import request

# The client's socket as the WSGI servers we run under expose it.
SOCKET_KEYS = ("gunicorn.socket", "werkzeug.socket")


def client_gone() -> bool:
    """True when the client closed its connection (a worker that stopped while it waited).

    A job claimed for a closed connection is never delivered: it stays ``running`` until its
    lease runs out. Peeking reads nothing; a server that hides the socket (or wraps it in TLS)
    counts as connected.
    """
    sock = next((request.environ[k] for k in SOCKET_KEYS if k in request.environ), None)
    if not isinstance(sock, socket.socket):
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False  # connected, nothing sent: the normal case while a poll waits
    except ValueError:
        return False  # a TLS socket takes no flags: cannot tell
    except OSError:
        return True   # reset by the peer
