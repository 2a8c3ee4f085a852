"""SQLite's writers take turns (store/turns.py): none ever waits in SQLite's busy handler."""
from __future__ import annotations

import multiprocessing
import queue
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.exc import IntegrityError

from helpers import until
from queuelog.server.store import NewJob, Store
from queuelog.server.store.tables import jobs

THREADS, WRITES = 4, 25


def _no_busy_wait(store: Store) -> None:
    """Every new connection fails at once where it would have waited for the lock."""
    event.listen(store.engine, "connect",
                 lambda dbapi_conn, _: dbapi_conn.execute("PRAGMA busy_timeout=0"))
    store.engine.dispose()


def _hammer(url: str, errors: Any) -> None:
    store = Store(url)
    _no_busy_wait(store)

    def write(n: int) -> None:
        try:
            for i in range(WRITES):
                job = store.claim("w") if i % 2 else None
                if job is not None:
                    store.complete(job.id, "w", job.attempt)
                store.enqueue(NewJob("p", "email", "{}", 0, 3))
        except Exception as e:  # noqa: BLE001 - "database is locked" is what we count
            errors.put(repr(e))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()


def test_writers_in_two_processes_never_find_the_database_locked(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/turns.db"
    first = Store(url)
    first.create_schema()
    first.close()  # no connection of the parent's is inherited by the children
    ctx = multiprocessing.get_context("fork")
    errors = ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(url, errors)) for _ in range(2)]
    for p in procs:
        p.start()
    seen = []
    for p in procs:  # drained while they run: a full pipe would block their exit
        while p.is_alive() or not errors.empty():
            try:
                seen.append(errors.get(timeout=0.05))
            except queue.Empty:
                pass
        p.join(60)
    assert seen == []
    assert all(p.exitcode == 0 for p in procs)
    store = Store(url)
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(jobs)).scalar() == 2 * THREADS * WRITES


def test_a_wake_up_never_removes_the_writers_lock_file(tmp_path: Path):
    """send_all removes a dead process's socket, never the lock file beside them: the
    writers would then lock two different files, each alone."""
    from queuelog.server.store import listen
    from queuelog.server.store.turns import LOCK_FILE
    (tmp_path / LOCK_FILE).write_bytes(b"")
    dead = tmp_path / "999999-abcd"  # a dead process's socket: nobody reads it
    import socket as _socket
    with _socket.socket(_socket.AF_UNIX, _socket.SOCK_DGRAM) as s:
        s.bind(str(dead))
    listen.send_all(str(tmp_path))
    assert (tmp_path / LOCK_FILE).exists()
    assert not dead.exists()


def test_the_wal_is_checkpointed_out_of_turn(tmp_path: Path):
    """SQLite's own checkpoint is off (it would run inside a writer's turn); the writers'
    checkpoints still copy the WAL into the database file."""
    from queuelog.server.store.wal import CHECKPOINT_EVERY
    url = f"sqlite:///{tmp_path}/ckpt.db"
    store = Store(url, sqlite_synchronous="NORMAL")
    store.create_schema()
    with store.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    before = (tmp_path / "ckpt.db").stat().st_size
    for i in range(CHECKPOINT_EVERY + 1):
        store.enqueue(NewJob("p", "email", '{"pad": "' + "x" * 2000 + '"}', 0, 3))
    until(lambda: (tmp_path / "ckpt.db").stat().st_size > before)  # the checkpoint's thread
    store.close()


def test_the_write_that_comes_due_does_not_wait_for_the_checkpoint(tmp_path: Path):
    """The checkpoint runs in a thread of its own: the write whose turn came due returns
    while the copy (here held) is still going, and a second is not started meanwhile."""
    from queuelog.server.store import wal
    started, release = threading.Event(), threading.Event()
    runs: list[str] = []

    def held(sql: str) -> None:  # SQLite's trace callback: each statement as it starts
        if sql == "PRAGMA wal_checkpoint(PASSIVE)":
            runs.append(sql)
            started.set()
            release.wait(10)

    store = Store(f"sqlite:///{tmp_path}/held.db", sqlite_synchronous="NORMAL")
    # Every connection of the store's is the driver's, traced: the checkpoint's is raw,
    # outside SQLAlchemy's statement hooks.
    event.listen(store.engine, "connect",
                 lambda dbapi_conn, _: dbapi_conn.set_trace_callback(held))
    store.engine.dispose()
    store.create_schema()
    try:
        done = threading.Event()

        def writes() -> None:
            for _ in range(2 * wal.CHECKPOINT_EVERY + 1):
                store.enqueue(NewJob("p", "email", "{}", 0, 3))
            done.set()

        threading.Thread(target=writes, daemon=True).start()
        assert done.wait(10), "a write waited for the checkpoint"
        assert started.is_set() and len(runs) == 1
    finally:
        release.set()
        store.close()


def test_writers_waiting_together_share_one_commit(tmp_path: Path):
    """Group commit: a writer waiting while another writes joins its transaction (one
    commit, one fsync); each write is still undone alone when it fails."""
    store = Store(f"sqlite:///{tmp_path}/group.db", sqlite_synchronous="NORMAL")
    store.create_schema()
    commits: list[int] = []
    event.listen(store.engine, "commit", lambda conn: commits.append(1))
    turns = store.ctx.write
    inside, go = threading.Event(), threading.Event()

    def first() -> None:
        with turns.begin() as conn:
            conn.execute(jobs.insert().values(type="email", payload="{}", priority=0,
                                              status="pending", attempt=0, retry_count=0,
                                              max_retries=3, producer="a", run_at=0,
                                              created_at=0, updated_at=0))
            inside.set()
            go.wait(10)

    def failing() -> None:
        try:
            with turns.begin() as conn:
                conn.execute(jobs.insert().values(type="email", payload="{}", priority=0,
                                                  status="pending", attempt=0, retry_count=0,
                                                  max_retries=3, producer="b", run_at=0,
                                                  created_at=0, updated_at=0))
                raise RuntimeError("refused")
        except RuntimeError:
            pass

    a = threading.Thread(target=first)
    a.start()
    assert inside.wait(10)
    b = threading.Thread(target=failing)
    b.start()
    until(lambda: turns._waiting == 1)
    go.set()
    a.join(10)
    b.join(10)
    with store.engine.connect() as conn:
        producers = [r[0] for r in conn.execute(select(jobs.c.producer))]
    assert producers == ["a"] and len(commits) == 1
    store.close()


def _synced(monkeypatch: Any, store: Store) -> list[tuple[str, bool]]:
    """Record each fdatasync the turns make: the file, and whether the writers' lock was
    free at that moment (another process could have written meanwhile)."""
    import fcntl
    import os
    calls: list[tuple[str, bool]] = []
    real = os.fdatasync
    lock_path = store.ctx.write.path

    def recording(fd: int) -> None:
        other = os.open(lock_path, os.O_RDWR)
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            free = True
            fcntl.flock(other, fcntl.LOCK_UN)
        except BlockingIOError:
            free = False
        finally:
            os.close(other)
        calls.append((os.readlink(f"/proc/self/fd/{fd}"), free))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", recording)  # the system call, not queuelog's code
    return calls


def test_under_full_each_commit_is_synced_after_the_turn_before_the_answer(
        tmp_path: Path, monkeypatch: Any):
    """FULL: the COMMIT skips its fsync inside the turn and the WAL file is fdatasynced
    after the turn, once per commit, before the write returns; the pooled connection is
    FULL again for whoever writes on it outside the turns."""
    store = Store(f"sqlite:///{tmp_path}/full.db", sqlite_synchronous="FULL")
    store.create_schema()
    calls = _synced(monkeypatch, store)
    store.enqueue(NewJob("p", "email", "{}", 0, 3))
    assert calls == [(str(tmp_path / "full.db-wal"), True)]
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
    store.enqueue_many([NewJob("p", "email", "{}", 0, 3)] * 3)
    assert len(calls) == 2
    store.close()


def test_normal_leaves_the_sync_to_sqlite(tmp_path: Path, monkeypatch: Any):
    """NORMAL (and OFF) ask for no fsync at commit: the turns make none either."""
    store = Store(f"sqlite:///{tmp_path}/normal.db", sqlite_synchronous="NORMAL")
    store.create_schema()
    calls = _synced(monkeypatch, store)
    store.enqueue(NewJob("p", "email", "{}", 0, 3))
    assert calls == []
    store.close()


def test_a_failed_commit_never_returns_a_connection_that_skips_its_fsync(tmp_path: Path):
    """A group whose COMMIT fails fails its writer, and its connection (set to skip the
    fsync) is dropped, not pooled: the next writer's connection syncs as configured."""
    store = Store(f"sqlite:///{tmp_path}/failed.db", sqlite_synchronous="FULL")
    store.create_schema()
    # A failure only the COMMIT finds: each new job adds a row whose deferred foreign key
    # names no row, which SQLite checks at COMMIT (and then refuses it).
    with store.engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE test_orphans (parent INTEGER REFERENCES "
                             "test_parents(id) DEFERRABLE INITIALLY DEFERRED)")
        conn.exec_driver_sql("CREATE TABLE test_parents (id INTEGER PRIMARY KEY)")
        conn.exec_driver_sql("CREATE TRIGGER test_orphan AFTER INSERT ON jobs "
                             "BEGIN INSERT INTO test_orphans VALUES (-1); END")
    with pytest.raises(IntegrityError, match="FOREIGN KEY constraint failed"):
        store.enqueue(NewJob("p", "email", "{}", 0, 3))
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TRIGGER test_orphan")
    pool = store.engine.pool
    with store.engine.connect() as conn:  # every pooled connection: FULL
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2
    assert pool.checkedout() == 0
    assert store.list_jobs().jobs == []  # nothing of the refused commit was kept
    store.enqueue(NewJob("p", "email", "{}", 0, 3))  # the next writer writes
    store.close()


def test_a_lock_that_cannot_be_taken_fails_the_writer_with_its_own_error(
        tmp_path: Path, monkeypatch: Any):
    """The file lock is taken after the connection skips its fsync (set outside the lock):
    if taking it fails, the writer gets that error, and the connection is dropped, not
    pooled to skip the fsync of the next writer."""
    import fcntl
    store = Store(f"sqlite:///{tmp_path}/nolock.db", sqlite_synchronous="FULL")
    store.create_schema()
    real = fcntl.flock

    def refuse(fd: int, op: int) -> None:
        if op == fcntl.LOCK_EX:
            raise OSError("no locks available")
        real(fd, op)

    monkeypatch.setattr(fcntl, "flock", refuse)  # the system call refuses, as an NFS mount can
    with pytest.raises(OSError, match="no locks available"):
        store.enqueue(NewJob("p", "email", "{}", 0, 3))
    monkeypatch.setattr(fcntl, "flock", real)
    with store.engine.connect() as conn:  # every pooled connection: FULL
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2
    assert store.engine.pool.checkedout() == 0
    store.enqueue(NewJob("p", "email", "{}", 0, 3))  # the next writer writes
    store.close()


def test_a_write_begun_inside_a_write_raises_at_once(tmp_path: Path):
    """SQLite has one write lock and this thread holds it: a second write transaction
    could only wait for it until the busy timeout; it is a programming error, said at once."""
    import time
    store = Store(f"sqlite:///{tmp_path}/nested.db", sqlite_synchronous="NORMAL")
    store.create_schema()
    turns = store.ctx.write
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="inside this thread's own write"):
        with turns.begin():
            with turns.begin():
                pass
    assert time.monotonic() - start < 1
    store.enqueue(NewJob("p", "email", "{}", 0, 3))  # the turns go on
    store.close()


def test_a_quiet_process_checkpoints_on_a_schedule_and_the_wal_is_cut_back(tmp_path: Path):
    """Fewer commits than CHECKPOINT_EVERY still get checkpointed once CHECKPOINT_SECONDS
    have passed since the first of them; the WAL, grown past journal_size_limit meanwhile,
    is cut back to it when the next writer starts it over."""
    from queuelog.server.store.wal import CHECKPOINT_EVERY, CHECKPOINT_SECONDS, WAL_SIZE_LIMIT
    store = Store(f"sqlite:///{tmp_path}/quiet.db", sqlite_synchronous="NORMAL")
    store.create_schema()
    turns = store.ctx.write
    now = [turns.checkpoints.clock()]  # the schema's commits went by this clock already
    turns.checkpoints.clock = lambda: now[0]
    wal = tmp_path / "quiet.db-wal"
    big = '{"pad": "' + "x" * 500_000 + '"}'
    commits = 2 * WAL_SIZE_LIMIT // 500_000
    assert commits < CHECKPOINT_EVERY
    for _ in range(commits):
        store.enqueue(NewJob("p", "email", big, 0, 3))
    assert wal.stat().st_size > WAL_SIZE_LIMIT
    before = (tmp_path / "quiet.db").stat().st_size
    now[0] += CHECKPOINT_SECONDS
    store.enqueue(NewJob("p", "email", "{}", 0, 3))  # came due: the checkpoint's thread
    until(lambda: not turns.checkpoints._checkpointing.locked())
    assert (tmp_path / "quiet.db").stat().st_size > before + WAL_SIZE_LIMIT
    store.enqueue(NewJob("p", "email", "{}", 0, 3))  # the WAL starts over, cut back
    assert wal.stat().st_size <= WAL_SIZE_LIMIT
    store.close()


def test_closing_the_store_leaves_no_wal_to_grow_from(tmp_path: Path):
    """A clean stop copies the whole WAL back and truncates it (another connection of the
    database still open, as a forked worker's or a reader's would be)."""
    import sqlite3
    store = Store(f"sqlite:///{tmp_path}/closing.db", sqlite_synchronous="NORMAL")
    store.create_schema()
    other = sqlite3.connect(tmp_path / "closing.db")  # keeps the WAL file from being removed
    other.execute("SELECT count(*) FROM jobs").fetchall()
    for _ in range(20):
        store.enqueue(NewJob("p", "email", '{"pad": "' + "x" * 100_000 + '"}', 0, 3))
    wal = tmp_path / "closing.db-wal"
    assert wal.stat().st_size > 2_000_000
    store.close()
    assert wal.stat().st_size == 0
    assert other.execute("SELECT count(*) FROM jobs").fetchone()[0] == 20
    other.close()


def test_a_writer_waits_for_its_turn_at_most_the_write_wait(tmp_path: Path):
    """A turn held long (a slow transaction of this process) makes the writers queued
    behind it give up at their own deadline, with "database is locked" (a 503), and the
    turns go on after it."""
    import time
    from queuelog.server.store.turns import WriteLockTimeout
    store = Store(f"sqlite:///{tmp_path}/slow.db", sqlite_synchronous="NORMAL", write_wait=0.3)
    store.create_schema()
    inside, go = threading.Event(), threading.Event()

    def slow() -> None:
        with store.ctx.write.begin():
            inside.set()
            go.wait(10)

    holder = threading.Thread(target=slow)
    holder.start()
    assert inside.wait(10)
    start = time.monotonic()
    with pytest.raises(WriteLockTimeout, match="database is locked"):
        store.enqueue(NewJob("p", "email", "{}", 0, 3))
    assert time.monotonic() - start < 2
    go.set()
    holder.join(10)
    store.enqueue(NewJob("p", "email", "{}", 0, 3))
    store.close()


def test_a_start_waits_for_an_upgrade_longer_than_a_request_would(tmp_path: Path):
    """Workers starting together queue on the upgrade's lock; one that finds it held (by
    another's upgrade, here a second connection) waits UPGRADE_WAIT_SECONDS, not the
    write wait of a request, which an index build outlasts."""
    import sqlite3
    path = tmp_path / "upgrading.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("PRAGMA journal_mode=WAL")  # as another queuelog process has it
    holder.execute("BEGIN IMMEDIATE")
    threading.Timer(1.0, lambda: holder.execute("ROLLBACK")).start()
    store = Store(f"sqlite:///{path}", sqlite_synchronous="NORMAL", write_wait=0.1)
    store.create_schema()  # waited for the lock past its write wait
    store.enqueue(NewJob("p", "email", "{}", 0, 3))
    store.close()
    holder.close()
