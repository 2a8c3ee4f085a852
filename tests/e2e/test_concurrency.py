"""V-06 under real contention: 8 threads and 2 processes drain one queue; no job goes out twice."""
from __future__ import annotations

import json
import multiprocessing
import pathlib
import threading
from typing import Any

import pytest
from sqlalchemy import func, select

from queuelog.server.store.tables import job_attempts, jobs
from queuelog.server.store import Store

JOBS = 600
THREADS = 8
PROCESSES = 2


@pytest.fixture
def config() -> dict[str, Any]:
    """fsync per commit is not what this test measures."""
    return {"SQLITE_SYNCHRONOUS": "NORMAL"}


def drain(store: Store, name: str, holding: Any = None) -> list[int]:
    """Claim until the queue answers None; return the ids this worker got.

    ``holding``: a barrier to wait on once this worker holds its first job. SQLite's write
    lock is not fair, so without it one process can drain the queue while the other's
    busy handler sleeps.
    """
    got = []
    while True:
        job = store.claim(name, lease_seconds=600)
        if job is None:
            return got
        assert job.worker_id == name and job.attempt == 1
        got.append(job.id)
        if holding is not None and len(got) == 1:
            holding.wait(timeout=60)


def process_main(url: str, name: str, now: int, start: Any, holding: Any, out: str) -> None:
    """A worker process: its own Store on the same database, then drain."""
    store = Store(url, sqlite_synchronous="NORMAL")
    store.clock = lambda: now  # the parent's fake instant, so no lease looks expired
    try:
        start.wait(timeout=60)
        pathlib.Path(out).write_text(json.dumps(drain(store, name, holding)))
    finally:
        store.close()


def fill(store: Store, count: int) -> list[int]:
    """Insert ``count`` due jobs of mixed priority and type in one statement."""
    now = store.clock()
    with store.engine.begin() as conn:
        conn.execute(jobs.insert(), [
            {"type": ("email", "pdf", "sync")[i % 3], "payload": json.dumps({"i": i}),
             "priority": (i % 4) * 10, "status": "pending", "attempt": 0, "retry_count": 0,
             "max_retries": 3, "producer": "p", "run_at": now - i, "created_at": now,
             "updated_at": now} for i in range(count)])
        return list(conn.execute(select(jobs.c.id)).scalars())


def test_threads_and_processes_claim_each_job_exactly_once(store, db_url, tmp_path):
    """V-06: 8 threads + 2 processes, 600 jobs: every job handed out once, on each backend."""
    ids = fill(store, JOBS)
    # fork (before any thread starts) boots in milliseconds; the child builds its own
    # Store and never touches the parent's pooled connections.
    ctx = multiprocessing.get_context(
        "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    start = ctx.Barrier(PROCESSES + 1)
    outs = [tmp_path / f"proc-{n}.json" for n in range(PROCESSES)]
    holding = ctx.Barrier(PROCESSES + 1)
    procs = [ctx.Process(target=process_main, args=(db_url, f"proc-{n}", store.clock(), start,
                                                     holding, str(out)))
             for n, out in enumerate(outs)]
    for proc in procs:
        proc.start()
    results: dict[str, list[int]] = {}
    go = threading.Barrier(THREADS + 1)

    errors: list[BaseException] = []

    def thread_main(name: str) -> None:
        go.wait(timeout=60)
        try:
            results[name] = drain(store, name)
        except Exception as exc:  # a claim must not fail because others claim too
            errors.append(exc)

    threads = [threading.Thread(target=thread_main, args=(f"thread-{n}",))
               for n in range(THREADS)]
    for thread in threads:
        thread.start()
    start.wait(timeout=60)  # the processes have booted: let them start claiming
    holding.wait(timeout=60)  # once each holds a job, release them and the threads together
    go.wait(timeout=60)
    for thread in threads:
        thread.join(timeout=60)
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    assert errors == []
    for n, out in enumerate(outs):
        results[f"proc-{n}"] = json.loads(out.read_text())

    claimed = [job_id for got in results.values() for job_id in got]
    assert len(claimed) == len(set(claimed)) == JOBS  # none twice, none missed
    assert sorted(claimed) == sorted(ids)
    assert all(results[f"proc-{n}"] for n in range(PROCESSES))  # every process took part
    with store.engine.connect() as conn:
        rows = conn.execute(select(jobs.c.id, jobs.c.worker_id, jobs.c.attempt,
                                   jobs.c.status)).all()
        attempts = conn.execute(select(func.count()).select_from(job_attempts)).scalar_one()
    owner = {job_id: name for name, got in results.items() for job_id in got}
    wrong = [r for r in rows
             if (r.status, r.attempt, r.worker_id) != ("running", 1, owner[r.id])]
    assert wrong == []
    assert attempts == JOBS


def test_each_claim_takes_the_best_due_job_under_contention(store):
    """The order holds under contention: every claim gets a job no worse than any left."""
    fill(store, 120)
    claimed: list[tuple[int, int, int]] = []
    lock = threading.Lock()
    go = threading.Barrier(THREADS)

    def run(name: str) -> None:
        go.wait(timeout=60)
        while True:
            job = store.claim(name, lease_seconds=600)
            if job is None:
                return
            with lock:
                claimed.append((-job.priority, job.run_at, job.id))

    threads = [threading.Thread(target=run, args=(f"w{n}",)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(claimed) == 120
    # Claims commit one after another, so the order they were recorded in can interleave
    # only among claims that were in flight together (at most one per thread).
    for position, key in enumerate(claimed):
        better_later = sum(1 for later in claimed[position + 1:] if later < key)
        assert better_later < THREADS


def test_a_forked_process_does_not_reuse_the_parents_connections(store):
    """After fork (gunicorn --preload, multiprocessing) the child's pool starts empty."""
    store.ping()  # the parent now holds a pooled connection
    assert store.engine.pool.checkedin() >= 1
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()

    def child() -> None:
        from queuelog.server import store as store_module
        pooled = store.engine.pool.checkedin()
        # the parent's pool is kept, its connections neither reused nor closed (SQLite)
        kept = [p for p in store_module._INHERITED if p.checkedin() >= 1]
        store.ping()  # and the child can still talk to the database on its own connection
        out.put((pooled, len(kept)))

    proc = ctx.Process(target=child)
    proc.start()
    proc.join(30)
    pooled, kept = out.get(timeout=5)
    assert proc.exitcode == 0 and pooled == 0 and kept >= 1
    store.ping()  # the parent's connections were left alone
