"""SQLite's WAL: copied back into the database out of every writer's turn, and kept small.

SQLite's own checkpoint runs inside the COMMIT that fills the WAL past 1,000 pages, and so
inside that writer's turn, where it would stop every writer for as long as it copies and
fsyncs; connections turn it off (engine.py) and ``Checkpoints``
makes them in a thread of its own: after every ``CHECKPOINT_EVERY`` commits of the process
or ``CHECKPOINT_SECONDS`` after the first commit not yet copied, whichever comes first, and
a TRUNCATE one when the store closes. A WAL file grown past ``WAL_SIZE_LIMIT`` (the
connections' ``journal_size_limit``) is cut back when it is next reused. The fsync that
FULL durability needs is made here too, after the turn (turns.py).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable

from sqlalchemy import Connection, Engine

log = logging.getLogger(__name__)

CHECKPOINT_EVERY = 200
# ... and at most this long after a commit not yet checkpointed: a process that writes
# little would otherwise never copy the WAL back (it grew to ten times the database).
CHECKPOINT_SECONDS = 30.0
# The WAL file's size kept after a checkpoint, when its next writer starts it over: the
# space of one busy stretch, not of the biggest ever.
WAL_SIZE_LIMIT = 16 << 20
# The busy timeout of the connection that truncates the WAL when the store closes.
FINISH_WAIT_MS = 1000
_BUSY = "queuelog_busy_ms"  # a connection's busy timeout now, in its pool record (turns.py)


class Checkpoints:
    """One engine's checkpoints: told of each commit, made out of turn, one at a time."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._commits = 0                # this process's commits
        self._checkpointing = threading.Lock()
        # The schedule reads this clock (a test moves it); ``_checkpointed``: when the
        # last one began (at first, the first commit), None before any commit.
        self.clock: Callable[[], float] = time.monotonic
        self._checkpointed: float | None = None

    def committed(self) -> None:
        """A commit was made (its turn is over): start a checkpoint if one is due."""
        self._commits += 1
        now = self.clock()
        if self._checkpointed is None:
            self._checkpointed = now  # the first commit not copied yet starts the clock
        if (self._commits % CHECKPOINT_EVERY == 0
                or now - self._checkpointed >= CHECKPOINT_SECONDS) \
                and self._checkpointing.acquire(blocking=False):
            self._checkpointed = now
            # In a thread of its own: the writers whose commit came due are answered now,
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

    def finish(self) -> None:
        """Copy the whole WAL into the database and cut the file to nothing (a TRUNCATE
        checkpoint), for a store that is closing; skipped if the lock stays taken."""
        try:
            conn = self.engine.raw_connection()
        except Exception as e:  # noqa: BLE001 - no database file: nothing to copy
            log.debug("WAL truncation skipped: %s", e)
            return
        try:
            cursor = conn.cursor()
            cursor.execute(f"PRAGMA busy_timeout={FINISH_WAIT_MS}")
            conn.info[_BUSY] = FINISH_WAIT_MS
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except Exception as e:  # noqa: BLE001 - the next store's checkpoints copy it
            log.debug("WAL truncation skipped: %s", e)
        finally:
            conn.close()


def fdatasync(path: str) -> None:
    """Flush a file's data to the disk (opened by name each time: no descriptor to
    outlive a WAL file that SQLite removed and made again)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def sync_again(conn: Connection, committed: bool) -> None:
    """Put a deferring group's connection back to FULL before the pool has it again; if
    its transaction is still open (a failed commit), drop the connection instead."""
    if committed:
        try:
            conn.connection.dbapi_connection.execute(  # type: ignore[union-attr]
                "PRAGMA synchronous=FULL")
            return
        except Exception:  # noqa: BLE001 - a connection that refuses is not kept
            pass
    conn.invalidate()
