"""A batch's cost per job by its size: the batch verbs of 1 to 2,000 jobs.

    python bench/bench_batch_cost.py [--database-url postgresql+psycopg://...] [--runs 5]

A request's cost must grow with its size and no faster. Through the store (no HTTP), each
run times, for each size ``n``, one ``enqueue_many`` of ``n`` jobs, one ``claim_many`` of
them and one ``complete_many`` of them all; then the same with ``fail_many`` (no retry) in
place of the complete. The figure is microseconds per job, the median of the runs (the
enqueue and the claim: of both lives); a batch of one is a single call's cost. On
PostgreSQL it runs twice over in one sitting, alternating run by run: with the
per-minute rollup's trigger function of migration 0015 (its transition tables joined in
nested loops: quadratic in the batch) and with 0016's (linear), each in a schema of its own.
SQLite (the default) has one function only: its row trigger.
"""
from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_indexes import WORKER, cell, new_job  # noqa: E402
from bench_store import Slot  # noqa: E402
from queuelog.server.store import Store  # noqa: E402

SIZES = (1, 100, 500, 2000)  # 1: a single call's cost, the hot path
VERSIONS = "queuelog.server.migrations.versions."


def lifecycle(store: Store, n: int, verb: str) -> dict[str, float]:
    """Microseconds per job of each request of a batch's life: ``enqueue_many`` of ``n``
    jobs, ``claim_many`` of them, then ``verb`` ("complete" or "fail") of them all."""
    took: dict[str, float] = {}
    start = time.perf_counter()
    store.enqueue_many([new_job(i) for i in range(n)])
    took["enqueue"], start = time.perf_counter() - start, time.perf_counter()
    got = store.claim_many(WORKER, n, lease_seconds=300)
    took["claim"], start = time.perf_counter() - start, time.perf_counter()
    assert len(got) == n, "the benchmark ran out of jobs"
    if verb == "complete":
        store.complete_many(WORKER, [(j.id, j.attempt, "{}") for j in got])
    else:
        store.fail_many(WORKER, [(j.id, j.attempt, "boom", False, None) for j in got])
    took[verb] = time.perf_counter() - start
    return {k: v * 1e6 / n for k, v in took.items()}


def with_function(store: Store, revision: str) -> None:
    """Install the rollup's trigger function of ``revision`` (a module of versions/)."""
    ddl = importlib.import_module(VERSIONS + revision).PG_FUNCTION
    with store.engine.begin() as conn:
        conn.connection.dbapi_connection.execute(ddl)  # as written: its % are SQL's


def main(argv: list[str] | None = None) -> None:
    """Measure and print a table of microseconds per job."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default=None, help="PostgreSQL (else SQLite)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="ql-batch-cost-")
    variants = (["0015_attempt_minutes", "0016_linear_minute_trigger"] if args.database_url
                else ["SQLite"])
    slots = {v: Slot(args.database_url, tmp, f"cost{i}", "FULL") for i, v in enumerate(variants)}
    stores = {v: slot.reset() for v, slot in slots.items()}
    if args.database_url:
        for v, store in stores.items():
            with_function(store, v)
    got: dict[tuple[str, str, int], list[float]] = {}
    try:
        for run in range(args.runs):
            order = variants if run % 2 == 0 else variants[::-1]
            for n in SIZES:
                for verb in ("complete", "fail"):
                    for v in order:
                        for step, us in lifecycle(stores[v], n, verb).items():
                            got.setdefault((v, step, n), []).append(us)
    finally:
        for v, store in stores.items():
            store.close()
            slots[v].drop()
    _print(got, variants, args.runs)


def _print(got: dict[tuple[str, str, int], list[float]], variants: list[str], runs: int) -> None:
    """The table: a row per variant and verb, a column per size."""
    print(f"microseconds per job, medians of {runs} runs (min-max)")
    print("| trigger function | verb | " + " | ".join(f"{n:,} jobs" for n in SIZES) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in SIZES) + " |")
    for v in variants:
        for verb in ("enqueue", "claim", "complete", "fail"):
            cells = [cell(got[(v, verb, n)]) for n in SIZES]
            print(f"| {v} | {verb}_many | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
