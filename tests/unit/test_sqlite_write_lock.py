"""SQLite's write lock: taken at a write's BEGIN, and left free between a bulk's batches."""
from __future__ import annotations

import contextlib
import sqlite3
import statistics
import threading
import time
from typing import Any, Callable, Iterator

import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url

from queuelog.server.store import NewJob, Store

JOBS, BATCH = 2000, 20


@pytest.fixture
def sqlite_url(backend: str, db_url: str) -> str:
    """A SQLite database (the write lock is SQLite's; PostgreSQL locks rows)."""
    if backend != "sqlite":
        pytest.skip("SQLite's write lock: PostgreSQL writers lock rows, not the database")
    return db_url


def _outsider(url: str, busy_ms: int) -> sqlite3.Connection:
    """A plain connection to the database, outside the store (the sqlite3 shell, say)."""
    conn = sqlite3.connect(make_url(url).database, isolation_level=None,
                           check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout={busy_ms}")
    return conn


@contextlib.contextmanager
def _held_at_first_statement(store: Store, write: Callable[[], Any]
                             ) -> Iterator[threading.Thread]:
    """``write`` runs in a thread, stopped before the first statement of its transaction
    (after its BEGIN) until the block ends."""
    reached, release = threading.Event(), threading.Event()

    def hold(*args: Any) -> None:
        if threading.current_thread() is thread and not reached.is_set():
            reached.set()
            release.wait(10)

    event.listen(store.engine, "before_cursor_execute", hold)
    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        assert reached.wait(10), "the write sent no statement"
        yield thread
    finally:
        release.set()
        thread.join(10)
        event.remove(store.engine, "before_cursor_execute", hold)


@pytest.mark.parametrize("verb", ["claim", "bulk_cancel", "enqueue"])
def test_a_write_holds_the_write_lock_from_its_begin(sqlite_url: str, store: Store,
                                                     verb: str) -> None:
    """A deferred BEGIN takes no lock until the first write, and a transaction that read
    first then fails to upgrade (SQLITE_BUSY at once, whatever the busy timeout)."""
    store.enqueue_many([NewJob(producer="p", type="email", payload_json="{}", priority=0,
                               max_retries=0)])
    writes = {"claim": lambda: store.claim("w1"),
              "bulk_cancel": lambda: store.bulk_cancel(None),
              "enqueue": lambda: store.enqueue_many([NewJob(
                  producer="p", type="email", payload_json="{}", priority=0, max_retries=0)])}
    other = _outsider(sqlite_url, busy_ms=0)
    try:
        with _held_at_first_statement(store, writes[verb]):
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        other.execute("BEGIN IMMEDIATE")  # free again once the write committed
        other.execute("ROLLBACK")
    finally:
        other.close()


def test_a_bulk_action_leaves_the_lock_free_between_its_batches(sqlite_url: str) -> None:
    """Between batches the lock is left free at least as long as the batch held it, so a
    writer outside this process (waiting in SQLite's busy handler, which sleeps and retries)
    gets in during the bulk instead of after it."""
    store = Store(sqlite_url, sqlite_synchronous="OFF")  # no fsync after a commit
    store.enqueue_many([NewJob(producer="p", type="email", payload_json="{}", priority=0,
                               max_retries=0)] * JOBS)
    bulk = threading.current_thread()
    marks: list[tuple[str, float]] = []

    def mark(what: str) -> Callable[..., None]:
        def note(*args: Any) -> None:
            if threading.current_thread() is bulk:
                marks.append((what, time.perf_counter()))
        return note

    seen: list[int] = []

    def outside_write() -> None:
        conn = _outsider(sqlite_url, busy_ms=30_000)
        try:  # once the bulk has begun: a write that waits for the lock, as a shell's does
            while not conn.execute("SELECT 1 FROM jobs WHERE status = 'cancelled' "
                                   "LIMIT 1").fetchall():
                time.sleep(0.001)
            conn.execute("BEGIN IMMEDIATE")
            seen.append(conn.execute("SELECT count(*) FROM jobs "
                                     "WHERE status = 'cancelled'").fetchone()[0])
            conn.execute("COMMIT")
        finally:
            conn.close()

    outsider = threading.Thread(target=outside_write, daemon=True)
    outsider.start()
    listeners = [("begin", mark("begin")), ("commit", mark("commit"))]
    for name, fn in listeners:
        event.listen(store.engine, name, fn)
    try:
        assert store.bulk_cancel(None, batch=BATCH) == JOBS
    finally:
        for name, fn in listeners:
            event.remove(store.engine, name, fn)
        outsider.join(30)
        store.close()
    # A pass over the pending jobs, then one over the blocked (none here): one batch more.
    assert [w for w, _ in marks] == ["begin", "commit"] * (JOBS // BATCH + 2)
    times = [t for _, t in marks]
    held = [times[i + 1] - times[i] for i in range(0, len(times) - 2, 2)]
    free = [times[i + 1] - times[i] for i in range(1, len(times) - 1, 2)]
    assert all(f >= h for h, f in zip(held, free)), (held, free)
    assert statistics.median(free) >= 0.001, free
    # The outside write got its turn while the bulk still had most of its jobs to do.
    assert seen and seen[0] < JOBS // 2, seen
