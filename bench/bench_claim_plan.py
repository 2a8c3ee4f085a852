"""PostgreSQL: the claim's plan and cost when the planner's statistics do not match the queue.

    python bench/bench_claim_plan.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres
    python bench/bench_claim_plan.py --database-url ... --jobs 20000 --consumers 4 --rounds 3

A queue's table changes faster than autovacuum analyzes it: a burst of jobs arrives where the
last ANALYZE saw none pending, or in a new database that was never analyzed. The claim must
stay an index walk of the first jobs in claim order whatever the statistics say. Four states,
each in a database of its own (created here, dropped at the end):

- ``new``: a new database, never analyzed, then a burst of ``--jobs`` pending jobs;
- ``small``: one job, analyzed (the statistics of a table of one row), then a burst;
- ``burst``: ``--jobs`` jobs completed and analyzed, then a burst as many pending;
- ``analyzed``: the burst state, analyzed again (the statistics match).

For each: the scans in the plan of a 100-job claim at the start of the drain, then the drain
through the store in batches of 100 (claim, complete) by ``--consumers`` threads: the claim's
wall time per call (p50 and the mean), and the PostgreSQL backends' CPU per job drained. A
claim that walks every pending job costs in proportion to the backlog, so its mean grows
with ``--jobs`` where an index walk's does not.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import text
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from queuelog import create_app  # noqa: E402
from queuelog.server.store import NewJob, Store  # noqa: E402

STATES = ("new", "small", "burst", "analyzed")
_HZ = os.sysconf("SC_CLK_TCK")


def _admin(url: str) -> psycopg.Connection:
    """An autocommit connection to the server, for CREATE and DROP DATABASE."""
    u = make_url(url)
    return psycopg.connect(host=u.host or "127.0.0.1", port=u.port or 5432,
                           user=u.username or "postgres", dbname=u.database or "postgres",
                           autocommit=True)


def _store(url: str, name: str) -> Store:
    """A queuelog store on the database ``name`` of ``url``'s server (schema created)."""
    app = create_app({"DATABASE_URL": str(make_url(url).set(database=name)),
                      "SECRET_KEY": "bench", "BOOTSTRAP_ADMIN": False}, serving=False)
    return app.extensions["queuelog.store"]


def _backend_cpu(mon: psycopg.Connection, name: str) -> float:
    """CPU seconds so far of the backends serving ``name`` (this monitor's left out)."""
    total = 0.0
    for (pid,) in mon.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s "
                              "AND pid <> pg_backend_pid()", (name,)):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the backend ended meanwhile
            continue
        total += (int(fields[11]) + int(fields[12])) / _HZ
    return total


def _enqueue(store: Store, jobs: int) -> None:
    """``jobs`` pending jobs, in batches of 100."""
    job = NewJob(producer="bench", type="email", payload_json='{"n": 1}', priority=0,
                 max_retries=3)
    for start in range(0, jobs, 100):
        store.enqueue_many([job] * min(100, jobs - start))


def _prepare(store: Store, state: str, jobs: int) -> None:
    """Bring the new database to ``state`` (module docstring)."""
    if state != "new":
        _enqueue(store, 1 if state == "small" else jobs)
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE jobs SET status = 'completed', finished_at = 1"))
            conn.execute(text("ANALYZE jobs"))
    _enqueue(store, jobs)
    if state == "analyzed":
        with store.engine.begin() as conn:
            conn.execute(text("ANALYZE jobs"))


def _plan(store: Store) -> list[str]:
    """The scans of a 100-job claim's plan (run, then rolled back)."""
    stmt = store.jobs._claims["any"]  # the claim any worker without types makes
    sql, args = stmt.bound({"wkr": "plan", "now": store.clock(), "lease_us": None, "n": 100})
    with store.engine.connect() as conn:
        cursor = conn.connection.driver_connection.cursor()
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, args)
        plan = cursor.fetchone()[0]
        conn.rollback()
    scans: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        kind = node["Node Type"]
        if kind == "Bitmap Index Scan" or "Scan" in kind and node.get("Relation Name") == "jobs":
            scans.append(f"{kind}({node.get('Index Name', '-')})")
        for child in node.get("Plans", []):
            walk(child)
    walk(plan[0]["Plan"])
    return scans


def _drain(store: Store, consumers: int) -> tuple[list[float], int]:
    """Claim and complete in batches of 100 until empty; every claim's seconds, jobs done."""
    times: list[float] = []
    done = [0]
    lock = threading.Lock()

    def consume(worker: str) -> None:
        while True:
            started = time.perf_counter()
            got = store.claim_many(worker, 100)
            took = time.perf_counter() - started
            if not got:
                return
            store.complete_many(worker, [(j.id, j.attempt, None) for j in got])
            with lock:
                times.append(took)
                done[0] += len(got)

    threads = [threading.Thread(target=consume, args=(f"w{i}",)) for i in range(consumers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return times, done[0]


def measure(url: str, state: str, jobs: int, consumers: int) -> dict[str, Any]:
    """One state in a database of its own: the plan, then the drain's figures."""
    name = f"queuelog_plan_{os.getpid()}_{state}"
    admin = _admin(url)
    admin.execute(f"DROP DATABASE IF EXISTS {name}")
    admin.execute(f"CREATE DATABASE {name}")
    store = None
    try:
        store = _store(url, name)
        _prepare(store, state, jobs)
        scans = _plan(store)
        mon = _admin(str(make_url(url).set(database=name)))
        cpu = _backend_cpu(mon, name)
        started = time.perf_counter()
        times, done = _drain(store, consumers)
        wall = time.perf_counter() - started
        cpu = _backend_cpu(mon, name) - cpu
        mon.close()
        return {"state": state, "scans": scans, "claim_p50_ms": statistics.median(times) * 1e3,
                "claim_mean_ms": statistics.fmean(times) * 1e3, "jobs_per_s": done / wall,
                "pg_cpu_us_per_job": cpu / done * 1e6}
    finally:
        if store is not None:
            store.engine.dispose()
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


def main() -> None:
    """Measure each state ``--rounds`` times, print each round and the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True,
                        help="a PostgreSQL server's URL (its databases are made here)")
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--consumers", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the rounds as JSON")
    a = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for _ in range(a.rounds):
        for state in STATES:
            row = measure(a.database_url, state, a.jobs, a.consumers)
            rows.append(row)
            print(f"{state:9} claim p50 {row['claim_p50_ms']:6.2f} ms, mean "
                  f"{row['claim_mean_ms']:6.2f} ms; {row['jobs_per_s']:7.0f} jobs/s; "
                  f"PostgreSQL CPU {row['pg_cpu_us_per_job']:5.1f} us/job; "
                  f"{' '.join(row['scans'])}", flush=True)
    print(f"medians of {a.rounds} rounds, {a.jobs} jobs, {a.consumers} consumer(s):")
    for state in STATES:
        mine = [r for r in rows if r["state"] == state]
        print(f"  {state:9} claim mean {statistics.median(r['claim_mean_ms'] for r in mine):6.2f}"
              f" ms, {statistics.median(r['jobs_per_s'] for r in mine):7.0f} jobs/s, "
              f"PostgreSQL CPU {statistics.median(r['pg_cpu_us_per_job'] for r in mine):5.1f}"
              " us/job")
    if a.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
