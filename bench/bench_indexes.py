"""What the job table's list indexes cost a job's life: the store with them and without.

    python bench/bench_indexes.py [--database-url postgresql+psycopg://...] [--runs 5]

Issue 39's lever "index writes per job": on PostgreSQL no claim or complete is a HOT update
(the status is in the claim indexes), so each writes a new entry into every index of
``jobs``; SQLite writes only the indexes whose columns changed. Two databases side by side
(SQLite files, or PostgreSQL schemas of their own), one as migrated and one without the
list indexes that carry no claim, lease or retention query (``--drop``; by default
``LIST_INDEXES``: the keyset pages by type, priority, producer and status). Each run alternates the two, measuring
through the store (no HTTP) the jobs per second of: 100-job batches (enqueue_many,
claim_many, complete_many) and single jobs (enqueue, claim, complete). The figure is the
median over runs of each, and the lean database's speed as a ratio to the full one.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_store import Slot  # noqa: E402
from queuelog.server.store import NewJob, Store  # noqa: E402

LIST_INDEXES = ("ix_jobs_type_id", "ix_jobs_priority_id", "ix_jobs_producer_id",
                "ix_jobs_status_id")
WORKER = "bench-worker"
BATCH = 100


def new_job(i: int) -> NewJob:
    """A small job of one producer."""
    return NewJob(producer="bench", type="email", payload_json=f'{{"n": {i}}}', priority=0,
                  max_retries=3)


def batches(store: Store, jobs: int) -> float:
    """Jobs per second of whole lives in 100-job requests: enqueue, claim, complete."""
    start = time.perf_counter()
    for _ in range(jobs // BATCH):
        store.enqueue_many([new_job(i) for i in range(BATCH)])
    for _ in range(jobs // BATCH):
        got = store.claim_many(WORKER, BATCH, lease_seconds=300)
        store.complete_many(WORKER, [(j.id, j.attempt, "{}") for j in got])
    return jobs / (time.perf_counter() - start)


def singles(store: Store, jobs: int) -> float:
    """Jobs per second of whole lives one call at a time: enqueue, claim, complete."""
    start = time.perf_counter()
    for i in range(jobs):
        store.enqueue(new_job(i))
    for _ in range(jobs):
        job = store.claim(WORKER, lease_seconds=300)
        assert job is not None
        store.complete(job.id, WORKER, job.attempt, "{}")
    return jobs / (time.perf_counter() - start)


def lean(store: Store, names: list[str]) -> None:
    """Drop the indexes ``names`` from this database."""
    with store.engine.begin() as conn:
        for name in names:
            conn.exec_driver_sql(f"DROP INDEX {name}")


def main(argv: list[str] | None = None) -> None:
    """Run both databases alternately and print the medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default=None, help="PostgreSQL (else SQLite files)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batch-jobs", type=int, default=5000)
    parser.add_argument("--single-jobs", type=int, default=500)
    parser.add_argument("--drop", default=",".join(LIST_INDEXES),
                        help="the indexes the lean database lacks (comma-separated)")
    parser.add_argument("--drop-fk", action="store_true",
                        help="the lean database lacks job_attempts' foreign key to jobs too "
                             "(PostgreSQL: its check is a trigger per attempt a claim opens)")
    args = parser.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="ql-indexes-")
    slots = {name: Slot(args.database_url, tmp, f"idx_{name}", "FULL")
             for name in ("full", "lean")}
    stores = {name: slot.reset() for name, slot in slots.items()}
    dropped = [name for name in args.drop.split(",") if name]
    lean(stores["lean"], dropped)
    if args.drop_fk:
        with stores["lean"].engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE job_attempts DROP CONSTRAINT "
                                 "job_attempts_job_id_fkey")
        dropped.append("job_attempts_job_id_fkey")
    measures: dict[str, Callable[[Store, int], float]] = {"batches": batches,
                                                          "singles": singles}
    sizes = {"batches": args.batch_jobs, "singles": args.single_jobs}
    got: dict[tuple[str, str], list[float]] = {}
    try:
        for run in range(args.runs):
            order = ("full", "lean") if run % 2 == 0 else ("lean", "full")
            for what, measure in measures.items():
                for name in order:
                    got.setdefault((what, name), []).append(measure(stores[name], sizes[what]))
    finally:
        for name, store in stores.items():
            store.close()
            slots[name].drop()
    backend = "PostgreSQL" if args.database_url else "SQLite FULL"
    print(f"{backend}, through the store; {args.runs} runs alternated; jobs/s, medians "
          f"(min-max); without: {', '.join(dropped)}")
    print("| lifecycle | as migrated | without them | ratio |")
    print("| --- | --- | --- | --- |")
    for what in measures:
        full, thin = got[(what, "full")], got[(what, "lean")]
        print(f"| {what} | {cell(full)} | {cell(thin)} | "
              f"{statistics.median(thin) / statistics.median(full):.2f} |")


def cell(values: list[float]) -> str:
    """A median with its range (bench_batch_cost.py prints with it too)."""
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


if __name__ == "__main__":
    main()
