"""Bulk retry at scale: 100,000 failed jobs retried while a worker keeps claiming.

    python bench/bench_bulk.py [--failed 100000] [--url postgresql+psycopg://...]

Fills a fresh database (SQLite in a temporary folder unless ``--url``) with failed ``pdf``
jobs and pending ``email`` jobs. A worker thread claims and completes ``email`` jobs all
along. The script measures its claims per second for a few seconds alone, then while
``store.bulk_retry`` puts every failed job back to pending, and reports the longest single
bulk transaction (the longest time the bulk held SQLite's write lock or its PostgreSQL row
locks) and the slowest claim meanwhile.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sqlalchemy import event  # noqa: E402

from queuelog.server.store.tables import metadata  # noqa: E402
from queuelog.server.store import Store  # noqa: E402
from queuelog.server.store import admin as admin_store  # noqa: E402

NOW = 1_780_000_000_000_000
FILL_SQLITE = """
WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < {count})
INSERT INTO jobs (type, payload, priority, status, attempt, retry_count, max_retries, producer,
                  worker_id, run_at, claimed_at, error, created_at, updated_at, finished_at)
SELECT '{type}', '{{"n": ' || n || '}}', 0, '{status}', {attempt}, 0, 3, 'bench',
       {worker}, {now}, {claimed}, {error}, {now}, {now}, {finished}
FROM seq
"""
FILL_PG = FILL_SQLITE.replace(
    "WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < {count})\n",
    "").replace("FROM seq", "FROM generate_series(1, {count}) AS seq(n)")


def fill(store: Store, failed: int, pending: int) -> None:
    """``failed`` failed pdf jobs and ``pending`` due email jobs, in one statement each."""
    sql = FILL_PG if store.engine.dialect.name == "postgresql" else FILL_SQLITE
    with store.engine.begin() as conn:
        conn.exec_driver_sql(sql.format(
            count=failed, type="pdf", status="failed", attempt=1, worker="'w'", now=NOW,
            claimed=NOW, error="'boom'", finished=NOW))
        conn.exec_driver_sql(sql.format(
            count=pending, type="email", status="pending", attempt=0, worker="NULL", now=NOW,
            claimed="NULL", error="NULL", finished="NULL"))
        conn.exec_driver_sql("ANALYZE")


class Claimer(threading.Thread):
    """Claims and completes email jobs until stopped; records each claim's time."""

    def __init__(self, store: Store) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.stop = threading.Event()
        self.claims: list[tuple[float, float]] = []  # (when it finished, how long it took)

    def run(self) -> None:
        """Claim, complete, repeat."""
        while not self.stop.is_set():
            t0 = time.perf_counter()
            job = self.store.claim("bench-worker", types=["email"])
            t1 = time.perf_counter()
            if job is None:
                return
            self.claims.append((t1, t1 - t0))
            self.store.complete(job.id, "bench-worker", job.attempt)

    def rate(self, start: float, end: float) -> float:
        """Claims per second between two instants."""
        return sum(1 for t, _ in self.claims if start <= t < end) / (end - start)

    def slowest(self, start: float, end: float) -> float:
        """The longest claim that finished between two instants, in ms."""
        return 1000 * max((d for t, d in self.claims if start <= t < end), default=0.0)


def main() -> None:
    """Fill, measure claims alone, then during a bulk retry; print the numbers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failed", type=int, default=100_000)
    parser.add_argument("--pending", type=int, default=200_000)
    parser.add_argument("--url", default=None, help="a database URL (its tables are emptied)")
    parser.add_argument("--alone", type=float, default=5.0, help="seconds of claims alone")
    args = parser.parse_args()
    folder = None
    url = args.url
    if url is None:
        folder = tempfile.mkdtemp(prefix="queuelog-bench-bulk-")
        url = f"sqlite:///{folder}/bulk.sqlite3"
    store = Store(url, sqlite_synchronous="NORMAL")
    if args.url:
        metadata.drop_all(store.engine)
    store.create_schema()
    started = time.perf_counter()
    fill(store, args.failed, args.pending)
    print(f"{store.engine.dialect.name}: filled {args.failed:,} failed + "
          f"{args.pending:,} pending jobs in {time.perf_counter() - started:.1f} s", flush=True)

    # The lock a bulk transaction holds: from its BEGIN (IMMEDIATE on SQLite: the write
    # lock is taken) to its COMMIT; time spent waiting for the lock is not holding it.
    batches: list[float] = []
    bulk_thread = threading.get_ident()
    began: dict[str, float] = {}

    def on_begin(conn: Any) -> None:
        if threading.get_ident() == bulk_thread:
            began["t"] = time.perf_counter()

    def on_commit(conn: Any) -> None:
        if threading.get_ident() == bulk_thread and "t" in began:
            batches.append(time.perf_counter() - began.pop("t"))
    event.listen(store.engine, "begin", on_begin)  # after the engine's own BEGIN listener
    event.listen(store.engine, "commit", on_commit)

    claimer = Claimer(store)
    claimer.start()
    time.sleep(args.alone)
    before_end = time.perf_counter()
    retried = store.bulk_retry("bench")
    bulk_end = time.perf_counter()
    claimer.stop.set()
    claimer.join(timeout=30)
    before_start = before_end - args.alone + 1.0  # the first second warms up
    print(f"bulk retry: {retried:,} jobs in {bulk_end - before_end:.1f} s, "
          f"{len(batches):,} transactions of up to {admin_store.BULK_BATCH} rows")
    print(f"longest bulk transaction (lock held): {1000 * max(batches):.1f} ms "
          f"(median {1000 * statistics.median(batches):.1f} ms)")
    print(f"claims/s alone: {claimer.rate(before_start, before_end):.0f}; "
          f"during the bulk retry: {claimer.rate(before_end, bulk_end):.0f}")
    print(f"slowest claim alone: {claimer.slowest(before_start, before_end):.1f} ms; "
          f"during: {claimer.slowest(before_end, bulk_end):.1f} ms")
    store.close()
    if folder:
        for name in os.listdir(folder):
            os.remove(os.path.join(folder, name))
        os.rmdir(folder)


if __name__ == "__main__":
    main()
