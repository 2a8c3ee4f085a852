"""Hearing other processes: "a job may have become claimable" and "a watched job finished",
across processes and servers.

Two listeners, one per database (the store's ``Notifier.listen`` picks):

- ``PgListener``: one ``LISTEN`` connection per process (psycopg 3), read by a daemon
  thread; the store's writers ``NOTIFY`` in their transactions, so it hears every app
  server on the database. A lost connection is reconnected with backoff, and then the
  bell rings once: notifications sent while it was away are lost, so the polls look.
- ``SocketListener``: SQLite has no NOTIFY. Each process binds a Unix datagram socket in a
  folder beside the database file (``<db>-wake/``, 0700); a writer sends one byte to every
  socket there after its commit (``send_all``). Chosen over ``PRAGMA data_version``
  polling: it costs an idle server nothing (a blocked ``recv``), while polling every few
  milliseconds (for a 10 ms p50) keeps a thread and a connection busy in every process.

Each message names its kind (``KINDS``): a channel per kind, a byte per kind in a
datagram. A listener only rings that kind's bell; the long poll's look decides what is due
(or, for a wait on a job, whether it finished).
"""
from __future__ import annotations

import atexit
import contextlib
import os
import re
import secrets
import socket
import threading
import time
from typing import Any, Callable, Iterable, Mapping

CLAIMABLE = "claimable"   # a job may have become claimable: waiting claims look
FINISHED = "finished"     # a watched job finished: waits on jobs look
KINDS = (CLAIMABLE, FINISHED)
CHANNELS = {CLAIMABLE: "queuelog_claimable", FINISHED: "queuelog_finished"}  # NOTIFY's
CHANNEL = CHANNELS[CLAIMABLE]
_KIND_OF_CHANNEL = {channel: kind for kind, channel in CHANNELS.items()}
_LISTENS = ("LISTEN queuelog_claimable", "LISTEN queuelog_finished")  # constant statements
assert _LISTENS == tuple(f"LISTEN {c}" for c in CHANNELS.values())
_BYTES = {CLAIMABLE: b"w", FINISHED: b"f"}  # a datagram's bytes: the kinds it tells
_KIND_OF_BYTE = {byte[0]: kind for kind, byte in _BYTES.items()}
RECONNECT_FIRST = 0.05           # seconds before the first reconnect, doubling ...
RECONNECT_MAX = 5.0              # ... up to this
MAX_SUN_PATH = 100               # AF_UNIX paths end near 108 bytes; longer go via /proc

Ring = Callable[[], None]
Rings = Mapping[str, Ring]


class PgListener:
    """One LISTEN connection, read in a daemon thread; reconnects, then rings once."""

    def __init__(self, conninfo: str, rings: Rings) -> None:
        self.conninfo = conninfo
        self.rings = rings
        self.conn: Any = None
        self.reconnects = 0   # how often the connection was made again (tests)
        with contextlib.suppress(Exception):
            # In the caller's thread, so LISTEN is in force before the poll's first look;
            # a database that does not answer now is retried by the thread.
            self.conn = self._connect()
        threading.Thread(target=self._run, daemon=True, name="queuelog-listen").start()

    def _connect(self) -> Any:
        import psycopg  # the PostgreSQL driver; only a PostgreSQL server imports it
        # Keepalives: a silently dropped connection is noticed within about a minute.
        conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=10,
                               keepalives=1, keepalives_idle=30, keepalives_interval=10,
                               keepalives_count=3, application_name="queuelog-listen")
        for statement in _LISTENS:
            conn.execute(statement)
        return conn

    def _run(self) -> None:
        pause = RECONNECT_FIRST
        while True:
            if self.conn is not None:
                try:
                    for note in self.conn.notifies():
                        self.rings[_KIND_OF_CHANNEL.get(note.channel, CLAIMABLE)]()
                except Exception:  # noqa: BLE001 - terminated, restarted, network: reconnect
                    pass
                with contextlib.suppress(Exception):
                    self.conn.close()
                self.conn = None
            time.sleep(pause)
            try:
                self.conn = self._connect()
            except Exception:  # noqa: BLE001 - still down: try again, a little later
                pause = min(pause * 2, RECONNECT_MAX)
                continue
            pause = RECONNECT_FIRST
            self.reconnects += 1
            for ring in self.rings.values():  # what was sent while we were away is lost
                ring()


class SocketListener:
    """A Unix datagram socket in ``folder``, read by a daemon thread that rings the bell."""

    def __init__(self, folder: str, rings: Rings) -> None:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        self.rings = rings
        self.path = os.path.join(folder, f"{os.getpid()}-{secrets.token_hex(4)}")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(_address(self.path))
        atexit.register(_unlink, self.path)
        threading.Thread(target=self._run, daemon=True, name="queuelog-listen").start()

    def _run(self) -> None:
        while True:
            heard: set[str] = set()
            try:
                heard.update(kinds_of(self.sock.recv(16)))
                # A burst of writes is one look: drain what else has come, ring once a kind.
                while True:
                    heard.update(kinds_of(self.sock.recv(16, socket.MSG_DONTWAIT)))
            except BlockingIOError:
                pass
            except OSError:
                return  # closed
            for kind in heard:
                self.rings[kind]()


def kinds_of(datagram: bytes) -> set[str]:
    """The kinds a datagram tells (an unknown byte: claimable, the old single kind)."""
    return {_KIND_OF_BYTE.get(byte, CLAIMABLE) for byte in datagram} or {CLAIMABLE}


_SOCKET_NAME = re.compile(r"^\d+-")  # "<pid>-...", as SocketListener binds
_sender: tuple[int, socket.socket] | None = None
_dir_fds: dict[str, int] = {}


def send_all(folder: str, kinds: Iterable[str] = (CLAIMABLE,)) -> None:
    """Wake every other process listening in ``folder`` (one datagram each naming the
    ``kinds``, never blocking)."""
    message = b"".join(_BYTES[kind] for kind in kinds)
    try:
        names = os.listdir(folder)
    except OSError:
        return  # no process has listened yet
    own = f"{os.getpid()}-"  # this process rang its own bell already
    sock = _sending_socket()
    for name in names:
        if name.startswith(own) or not _SOCKET_NAME.match(name):
            continue  # ours, or not a listener's socket (the writers' lock file: turns.py)
        path = os.path.join(folder, name)
        try:
            sock.sendto(message, _address(path))
        except BlockingIOError:
            pass  # its queue is full: it has wake-ups to read already
        except ConnectionRefusedError:
            _unlink(path)  # nobody reads it: its process died without cleaning up
        except OSError:
            pass


def _sending_socket() -> socket.socket:
    global _sender
    if _sender is None or _sender[0] != os.getpid():  # a forked child gets its own
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
        _sender = (os.getpid(), sock)
    return _sender[1]


def _address(path: str) -> str:
    """``path`` as an AF_UNIX address: a long one through an open fd of its folder."""
    if len(path.encode()) <= MAX_SUN_PATH:
        return path
    folder, name = os.path.split(path)
    if folder not in _dir_fds:
        _dir_fds[folder] = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    return f"/proc/self/fd/{_dir_fds[folder]}/{name}"


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
