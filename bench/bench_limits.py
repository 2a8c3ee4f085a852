"""What flow control costs a claim: claim+complete through the store, with and without limits.

    python bench/bench_limits.py                      # SQLite in a temp dir
    python bench/bench_limits.py --database-url postgresql+psycopg://postgres@127.0.0.1/db

"Limits set": every type has a concurrency and a rate limit high enough never to bind, so
each claim pays the whole policy (read the limits, lock the limiter rows, count running
jobs, refill and write back the bucket) while claiming the same jobs. Medians of 5 runs;
the ratio is limits / none (the issue's bound: 1.2).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from queuelog.model.limits import Limits  # noqa: E402
from queuelog.server.store import NewJob, Store  # noqa: E402
from queuelog.server.store.tables import metadata  # noqa: E402

TYPES = ("email", "pdf", "sync")
LIMITED = {t: Limits(concurrency=100_000, rate="1000000/s", burst=1_000_000) for t in TYPES}


def run_once(url: str, limits: dict[str, Limits] | None, jobs: int, batch: int) -> float:
    """Seconds per claimed job: enqueue ``jobs``, then claim (``batch`` at a time) and
    complete them all."""
    # NORMAL: without an fsync per commit the policy's own cost is not hidden by the disk.
    store = Store(url, type_limits=limits, sqlite_synchronous="NORMAL")
    with store.engine.begin() as conn:
        for t in reversed(metadata.sorted_tables):
            conn.execute(text(f"DELETE FROM {t.name}"))
    store.enqueue_many([NewJob("bench", TYPES[i % 3], "{}", 0, 3) for i in range(jobs)])
    start = time.perf_counter()
    done = 0
    while done < jobs:
        got = store.claim_many("w", batch)
        if batch == 1:
            for j in got:
                store.complete(j.id, "w", j.attempt)
        else:
            store.complete_many("w", [(j.id, j.attempt, None) for j in got])
        done += len(got)
    took = time.perf_counter() - start
    store.close()
    return took / jobs


def main() -> None:
    """Print the per-job cost without and with limits, single and batch claims."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url")
    parser.add_argument("--jobs", type=int, default=600)
    args = parser.parse_args()
    url = args.database_url or f"sqlite:///{tempfile.mkdtemp()}/bench.sqlite3"
    Store(url).create_schema()
    for batch in (1, 50):
        runs: dict[str, list[float]] = {"none": [], "limits": []}
        for _ in range(5):  # interleaved, so drift in the machine's load hits both alike
            runs["none"].append(run_once(url, None, args.jobs, batch))
            runs["limits"].append(run_once(url, LIMITED, args.jobs, batch))
        none, lim = (statistics.median(runs[k]) for k in ("none", "limits"))
        print(f"batch {batch:>3}: none {none * 1e6:8.1f} us/job  limits {lim * 1e6:8.1f} "
              f"us/job  ratio {lim / none:.2f}")


if __name__ == "__main__":
    main()
