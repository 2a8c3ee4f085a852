"""SQLite's writers take turns: a queue in each process, and a file lock between processes.

SQLite lets one writer in at a time and makes the others wait in its busy handler, which
*sleeps* (1, 2, 5, 10 ... up to 100 ms a try) and is not fair: under 4 clients on
``gunicorn -w 2`` a single call took 5.7 ms at p50 but 126 ms at p99 and 644 ms at worst
(bench/peers), while the write itself holds the lock for about a millisecond. Here a
writer first takes its process's mutex (the threads of one process queue on it, woken
the moment it is free), then an exclusive ``flock`` of ``<db>-wake/write.lock`` (the
processes on the database wait in the kernel, which wakes a waiter at the unlock), and
only then ``BEGIN IMMEDIATE``, which now finds the database free; the turn ends after
the COMMIT. SQLite's busy timeout still bounds the wait for a writer outside this scheme
(the sqlite3 shell, an older queuelog).

Checkpoints are made out of turn (``CHECKPOINT_EVERY``). The flock has no timeout: it is
held only across one write transaction of a queuelog process on this database, whose
SQLite lock would stop the others just as long, and the kernel drops it when its holder
dies. One engine per database per process: two engines' turns in one thread, one inside
the other, would wait on each other's flock.
"""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
from typing import Any, Iterator

from sqlalchemy import Connection, Engine

log = logging.getLogger(__name__)

LOCK_FILE = "write.lock"
# SQLite's own checkpoint runs inside the COMMIT that fills the WAL past 1,000 pages, and so
# inside that writer's turn, where it would stop every writer for as long as it copies and
# fsyncs (measured here: 100-200 ms stalls); connections turn it off (dialect.py) and a
# thread checkpoints after every CHECKPOINT_EVERY turns of its process, out of every turn.
CHECKPOINT_EVERY = 200


class WriteTurns:
    """An engine's ``begin()`` for writers, taken in turns (see the module docstring)."""

    def __init__(self, engine: Engine, folder: str | None) -> None:
        self.engine = engine
        self.path = None if folder is None else os.path.join(folder, LOCK_FILE)
        self._mutex = threading.RLock()  # re-entrant: a nested begin waits on SQLite alone
        self._depth = 0                  # turns this process holds (nested begins)
        self._fd: int | None = None
        self._pid = 0
        self._commits = 0                # this process's write turns, for the checkpoints
        self._checkpointing = threading.Lock()

    @property
    def dialect(self) -> Any:
        """The engine's SQLAlchemy dialect (as ``Engine.dialect``)."""
        return self.engine.dialect

    @contextlib.contextmanager
    def begin(self) -> Iterator[Connection]:
        """A write transaction (BEGIN IMMEDIATE ... COMMIT) in this process's turn."""
        with self._mutex:
            first = self._depth == 0
            fd = self._lock_file() if first else None
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            self._depth += 1
            try:
                with self.engine.begin() as conn:
                    yield conn
            finally:
                self._depth -= 1
                if fd is not None:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            self._commits += 1
        if first and self._commits % CHECKPOINT_EVERY == 0 \
                and self._checkpointing.acquire(blocking=False):
            # In a thread of its own: the request whose commit came due is answered now,
            # not after the copy and its fsync (in it, they were a 40-sample bench's p99).
            threading.Thread(target=self._checkpoint, daemon=True,
                             name="queuelog-checkpoint").start()

    def _checkpoint(self) -> None:
        """Copy the WAL into the database, outside every turn (writers go on meanwhile);
        one checkpointer per process at a time (its caller took ``_checkpointing``)."""
        conn = self.engine.raw_connection()  # the driver's own: outside any transaction
        try:
            conn.cursor().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except Exception as e:  # noqa: BLE001 - one not made now is made by the next
            log.debug("WAL checkpoint skipped: %s", e)
        finally:
            conn.close()
            self._checkpointing.release()

    def _lock_file(self) -> int | None:
        """This process's descriptor of the lock file (opened again after a fork: a
        child sharing its parent's open file would share its lock, too)."""
        if self.path is None:
            return None
        if self._fd is None or self._pid != os.getpid():
            os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._pid = os.getpid()
        return self._fd
