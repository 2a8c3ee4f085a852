"""SQLite's writers take turns: a queue in each process, and a file lock between processes.

SQLite lets one writer in at a time and makes the others wait in its busy handler, which
*sleeps* (1, 2, 5, 10 ... up to 100 ms a try) and is not fair: with a few clients on
``gunicorn -w 2`` the slowest single calls wait many times longer than the write they wait
for, which holds the lock only briefly. Here a
writer first takes its process's mutex (the threads of one process queue on it, woken
the moment it is free), then an exclusive ``flock`` of ``<db>-wake/write.lock`` (the
processes on the database wait in the kernel, which wakes a waiter at the unlock), and
only then ``BEGIN IMMEDIATE``, which now finds the database free; the turn ends after
the COMMIT. SQLite's busy timeout still bounds the wait for a writer outside this scheme
(the sqlite3 shell, an older queuelog).

Under ``SQLITE_SYNCHRONOUS=FULL`` the fsync is made out of turn, too (``wal``): a group
commits with ``synchronous=NORMAL`` (WAL frames written, not synced), frees the locks, and
then fdatasyncs the WAL file before any of its writers is answered. The answer waits for
the disk as before; the next writer does not (a lock held through the fsync would bound
concurrent single calls by the disk). One fsync of the file covers every commit
appended before it, so the fsyncs of processes overlap. SQLite's own NORMAL keeps the WAL
consistent after a crash (frames are checksummed in a chain, so a crash keeps a prefix of
the commits; it syncs the WAL before a checkpoint and
the database after, and the WAL's header when it is reused), so a frame is durable once
synced here or copied by a checkpoint. Other writers on the file see a commit before it is
synced; any write of theirs is appended after it and synced (here, or by FULL) before they
answer, so nothing answered rests on a commit a crash can undo.

Checkpoints are made out of turn, and the WAL kept small (wal.py).

A writer waits at most ``wait`` seconds (``WRITE_LOCK_WAIT_SECONDS``) for its turn and the
lock, well inside a client's timeout, then gets ``WriteLockTimeout`` (a 503, errors.py):
the process's mutex is taken with that timeout and the busy timeout of its ``BEGIN
IMMEDIATE`` is what is left of it. The flock has no timeout: it is held only across one
write transaction of a queuelog process on this database, whose own wait is bounded the
same way, and the kernel drops it when its holder dies. One engine per database per
process: two engines' turns in one thread, one inside the other, would wait on each
other's flock; a write begun inside this thread's own write raises at once (it could
only wait for the lock this thread holds).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
import time
from typing import Any, Iterator

from sqlalchemy import Connection, Engine

from queuelog.server.store.wal import _BUSY, Checkpoints, fdatasync, sync_again


LOCK_FILE = "write.lock"
# How long a writer waits for its turn and SQLite's lock by default (the setting
# WRITE_LOCK_WAIT_SECONDS): half the Python client's 10 s timeout, so that a lock
# held elsewhere (a sqlite3 shell, a stuck process) is answered 503 before clients give up.
WRITE_WAIT_SECONDS = 5.0

# Writers sharing one commit at most (group commit, ``WriteTurns``): bounds how long the
# first of a burst waits for the others' statements.
GROUP_MAX = 32
# Each writer of a group in a savepoint of its own; one at a time, so one name serves.
_SAVEPOINT = "SAVEPOINT queuelog_writer"
_RELEASE = "RELEASE queuelog_writer"
_ROLLBACK_TO = "ROLLBACK TO queuelog_writer"


class WriteLockTimeout(sqlite3.OperationalError):
    """No write turn or write lock within the wait: "database is locked" (a 503)."""


class _Group:
    """One SQLite transaction that the writers of a burst share (see ``WriteTurns``)."""

    def __init__(self, conn: Connection, fd: int | None, deferred: bool) -> None:
        self.conn, self.fd = conn, fd
        self.deferred = deferred  # its COMMIT skips the fsync; ``WriteTurns._finish`` syncs
        self.transaction = conn.begin()  # BEGIN IMMEDIATE (engine.py): the write lock
        self.members = 0
        self.done = threading.Event()
        self.error: BaseException | None = None


class WriteTurns:
    """An engine's ``begin()`` for writers, taken in turns (see the module docstring).

    Group commit: a writer whose turn ends while others of its process wait for theirs
    leaves the transaction open, and the next writes in it, each in a SAVEPOINT of its
    own (a write that fails undoes itself alone); the last of the burst (or the
    ``GROUP_MAX``-th) commits, with one fsync for all (made after the turn where ``wal``
    is set). Every writer returns only once that commit is done and synced, so no answer
    is given before its write is durable; a failed commit or sync fails every writer of
    the group.
    """

    def __init__(self, engine: Engine, folder: str | None, *, wal: str | None = None,
                 wait: float = WRITE_WAIT_SECONDS) -> None:
        self.engine = engine
        self.wait = wait  # seconds a writer waits for its turn and the lock, at most
        self.path = None if folder is None else os.path.join(folder, LOCK_FILE)
        # The WAL file this process fdatasyncs after each group's commit, out of turn (the
        # module docstring): FULL's durability; None: each COMMIT syncs as configured.
        self.wal = wal
        self._wal_checked = wal is None
        self._mutex = threading.Lock()
        self._owner: int | None = None   # the thread whose write is running now
        self._waiting = 0                # writers of this process waiting for their turn
        self._count = threading.Lock()   # guards _waiting
        self._group: _Group | None = None
        self._fd: int | None = None
        self._pid = 0
        self.checkpoints = Checkpoints(engine)  # the WAL copied back, out of every turn

    @property
    def dialect(self) -> Any:
        """The engine's SQLAlchemy dialect (as ``Engine.dialect``)."""
        return self.engine.dialect

    @contextlib.contextmanager
    def begin(self, wait: float | None = None) -> Iterator[Connection]:
        """A write transaction (BEGIN IMMEDIATE ... COMMIT) in this process's turn, waited
        for at most ``wait`` seconds (default: ``self.wait``), else ``WriteLockTimeout``."""
        if self._owner == threading.get_ident():
            # SQLite has one write lock, and this thread holds it (or will, for its group):
            # a second transaction could only wait for it until the busy timeout.
            raise RuntimeError("a write transaction begun inside this thread's own write "
                               "transaction: use the connection already open")
        limit = self.wait if wait is None else wait
        deadline = time.monotonic() + limit
        with self._count:
            self._waiting += 1
        turn = orphan = False
        try:
            turn = self._mutex.acquire(timeout=max(0.0, deadline - time.monotonic()))
        finally:
            with self._count:
                self._waiting -= 1
                # A turn that ended as this writer gave up may have left its group open
                # for it (``_end_turn`` decides and frees the mutex under ``_count``):
                # whoever gets the free mutex now closes that group.
                orphan = not turn and self._mutex.acquire(blocking=False)
        if not turn:
            if orphan:
                self._end_turn(self._group)
            raise WriteLockTimeout(f"database is locked: no write turn within {limit:g} s")
        self._owner = threading.get_ident()
        group = None
        try:
            group = self._group or self._open(deadline)
            group.members += 1
            # Straight to the driver, as the BEGIN (engine.py): SQLAlchemy's begin_nested
            # compiled a new SAVEPOINT clause for every writer (its name is new each
            # time), an eighth of a batch enqueue's Python time under gunicorn.
            driver = group.conn.connection.dbapi_connection
            driver.execute(_SAVEPOINT)  # type: ignore[union-attr]
            # What a write notes on its connection for the commit (a wake-up: notifier.py)
            # is undone with it.
            noted = dict(group.conn.info)
            try:
                yield group.conn
            except BaseException:
                _undo(group, driver)
                group.conn.info.clear()
                group.conn.info.update(noted)
                raise
            driver.execute(_RELEASE)  # type: ignore[union-attr]
        finally:
            self._owner = None
            self._end_turn(group)
        group.done.wait()  # outside the turn: the next writer may join the group meanwhile
        if group.error is not None:
            raise group.error

    def _end_turn(self, group: _Group | None) -> None:
        """Free the mutex, leaving ``group`` open for the writers waiting, or else closing
        it first (and answering its writers after). Decided under ``_count``, so that a
        writer who stops waiting meanwhile sees the mutex held or a group to close."""
        with self._count:
            closing = group is not None and (group.error is not None
                                             or group.members >= GROUP_MAX
                                             or self._waiting == 0)
            if not closing:
                self._mutex.release()
        if not closing:
            return
        try:
            self._close(group)  # type: ignore[arg-type]
        finally:
            self._mutex.release()
            self._finish(group)  # type: ignore[arg-type]

    def _open(self, deadline: float) -> _Group:
        """A new group: a pooled connection, the file lock between processes, then BEGIN
        IMMEDIATE (the lock is taken last: other processes wait for the SQL alone)."""
        conn = self.engine.connect()
        deferred = False
        try:
            # The pragma is this connection's own: set before the lock, so that the other
            # processes do not wait for it (bench/bench_spread.py --single --trace-turns
            # shows what is done inside the lock).
            deferred = self._defer_sync(conn)
            fd = self._lock_file()
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                _busy_until(conn, deadline)
                self._group = _Group(conn, fd, deferred)
            except BaseException:
                _unlock(fd)
                raise
        except BaseException:
            if deferred:
                conn.invalidate()  # never back to the pool without its fsync
            conn.close()
            raise
        return self._group

    def _close(self, group: _Group) -> None:
        """Commit the group (or roll back a broken one) and free the lock; ``_finish``
        then answers its writers."""
        self._group = None
        try:
            if group.error is None:
                group.transaction.commit()
        except BaseException as e:  # noqa: BLE001 - every writer of the group raises it
            group.error = e
        finally:
            committed = group.error is None
            try:
                if committed:  # the next process may write meanwhile
                    _unlock(group.fd)
                if group.deferred:
                    sync_again(group.conn, committed)
                # Back to the pool (its check-in sends the wake-ups: notifier.py); a
                # transaction left open is rolled back, before the lock is freed.
                group.conn.close()
            finally:
                if not committed:
                    _unlock(group.fd)
        self.checkpoints.committed()

    def _finish(self, group: _Group) -> None:
        """Sync the group's commit (if deferred: out of every lock), then answer its
        writers, whatever happened: no writer waits forever."""
        try:
            if group.deferred and group.error is None:
                fdatasync(self.wal)  # type: ignore[arg-type]
        except BaseException as e:  # noqa: BLE001 - every writer of the group raises it
            group.error = e
        finally:
            group.done.set()

    def _defer_sync(self, conn: Connection) -> bool:
        """Let the next COMMIT on ``conn`` skip its fsync (``_finish`` makes it), where
        ``wal`` is set and the database is in WAL mode (checked once: the sync is of the
        WAL file). Whether it does."""
        if self.wal is None:
            return False
        driver = conn.connection.dbapi_connection
        if not self._wal_checked:
            mode = driver.execute("PRAGMA journal_mode").fetchone()[0]  # type: ignore[union-attr]
            self._wal_checked = True
            if str(mode).lower() != "wal":
                self.wal = None
                return False
        # Before BEGIN: SQLite refuses to change it inside a transaction.
        driver.execute("PRAGMA synchronous=NORMAL")  # type: ignore[union-attr]
        return True

    def finish(self) -> None:
        """The store is closing: the WAL copied back and cut to nothing (wal.py)."""
        self.checkpoints.finish()

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


def _busy_until(conn: Connection, deadline: float) -> None:
    """Let the BEGIN IMMEDIATE about to run on ``conn`` wait for SQLite's lock until
    ``deadline`` at most (set only when it differs from the connection's last value by
    more than a tenth of a second: the common writer keeps its ``wait``)."""
    busy_ms = max(0, int((deadline - time.monotonic()) * 1000))
    if abs(conn.info.get(_BUSY, -1_000) - busy_ms) > 100:
        conn.connection.dbapi_connection.execute(  # type: ignore[union-attr]
            f"PRAGMA busy_timeout={busy_ms}")
        conn.info[_BUSY] = busy_ms


def _unlock(fd: int | None) -> None:
    """Free the file lock between processes (None: there is none)."""
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _undo(group: _Group, driver: Any) -> None:
    """Roll back one writer's savepoint; if SQLite ended the whole transaction (an I/O
    error rolls it back), the group is broken: every writer of it fails."""
    try:
        driver.execute(_ROLLBACK_TO)
        driver.execute(_RELEASE)
    except BaseException as e:  # noqa: BLE001 - told to the group's writers at its close
        group.error = e
        return
    if not group.transaction.is_active:
        group.error = RuntimeError("the shared write transaction ended with an error")
