"""Dashboard speed at scale: /ui/, deep pages, /types, /workers, /metrics by table size (SQLite).

    python bench/bench_dashboard.py [--runs 31] [--sizes 1000,1000000] [--keep DIR [--reuse]]
    python bench/bench_dashboard.py --sizes 1000,1000000,10000000 --keep /tmp/qb   # the 10M row

Fills a fresh SQLite database per size with one INSERT ... SELECT over a recursive CTE
(20 to 40 seconds for a million jobs), then times pages through Flask's test client
in turns (so a busy machine slows both sizes alike), and prints medians and the ratio
of each larger size to the smallest (target <= 1.5x). The fill goes through the count
triggers (migration 0008) like any insert.
Jobs arrive at a steady rate (one every 3.6 s, the newest now), so both databases
have the same last hour: what grows is history, which is what a dashboard must not scan.
"""
from __future__ import annotations

import argparse
import base64
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from queuelog import create_app  # noqa: E402
from queuelog.server.auth import hash_password  # noqa: E402

NOW = 1_780_000_000_000_000       # a fixed "now" (epoch microseconds) for every run
SPACING = 3_600_000               # 3.6 s between jobs: 1,000 jobs per hour
PASSWORD = "bench-password"

# Older than an hour: mostly completed, some failed or cancelled. The last hour also has
# pending, scheduled and running jobs. Every claimed job has its attempt row.
FILL = """
WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < :count),
aged AS (SELECT n, :now - (:count - n) * :spacing AS created,
                CASE WHEN (:count - n) * :spacing > 3600000000 THEN
                    CASE WHEN n % 20 = 0 THEN 'failed' WHEN n % 50 = 1 THEN 'cancelled'
                         ELSE 'completed' END
                ELSE CASE n % 10 WHEN 0 THEN 'pending' WHEN 1 THEN 'pending'
                     WHEN 2 THEN 'running' WHEN 3 THEN 'failed' ELSE 'completed' END
                END AS status
         FROM seq)
INSERT INTO jobs (id, type, payload, priority, status, attempt, retry_count, max_retries,
                  producer, worker_id, run_at, claimed_at, lease_expires_at, result, error,
                  created_at, updated_at, finished_at)
SELECT n, CASE n % 3 WHEN 0 THEN 'email' WHEN 1 THEN 'pdf' ELSE 'sync' END,
       '{"to": "user' || n || '@example.com", "template": "welcome"}',
       (n % 4) * 10, status,
       CASE WHEN status IN ('pending', 'cancelled') THEN 0 ELSE 1 END, 0, 3, 'billing',
       CASE WHEN status IN ('pending', 'cancelled') THEN NULL ELSE 'worker-' || (n % 8) END,
       CASE WHEN status = 'pending' AND n % 20 = 0 THEN created + 7200000000 ELSE created END,
       CASE WHEN status IN ('pending', 'cancelled') THEN NULL ELSE created + 1000000 END,
       CASE WHEN status = 'running' THEN created + 301000000 END,
       CASE WHEN status = 'completed' THEN '{"ok": true}' END,
       CASE WHEN status = 'failed' THEN 'SMTP 550: mailbox unavailable' END,
       created, created + 2000000,
       CASE WHEN status IN ('completed', 'failed', 'cancelled') THEN created + 2000000 END
FROM aged
"""
ATTEMPTS = """
INSERT INTO job_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome, error)
SELECT id, 1, worker_id, claimed_at, finished_at,
       CASE status WHEN 'running' THEN 'running' ELSE status END, error
FROM jobs WHERE attempt = 1
"""


def build(size: int, folder: str, reuse: bool = False) -> Any:
    """An app whose SQLite database holds ``size`` jobs (filled afresh unless reused)."""
    path = os.path.join(folder, f"bench-{size}.sqlite3")
    existed = reuse and os.path.exists(path)
    for suffix in ("", "-wal", "-shm"):
        if not existed and os.path.exists(path + suffix):
            os.remove(path + suffix)
    app = create_app({"DATABASE_URL": f"sqlite:///{path}", "SECRET_KEY": "bench",
                      "BOOTSTRAP_ADMIN": False, "SQLITE_SYNCHRONOUS": "OFF",
                      "AUTH_CACHE_SECONDS": 3600})
    store = app.extensions["queuelog.store"]
    store.clock = lambda: NOW
    if existed:
        print(f"  reusing {path}", flush=True)
        return app
    started = time.perf_counter()
    with store.engine.begin() as conn:
        params = {"count": size, "now": NOW, "spacing": SPACING}
        sql = FILL
        for name, value in params.items():  # literal ints: the CTE needs no driver params
            sql = sql.replace(f":{name}", str(int(value)))
        conn.exec_driver_sql(sql)
        conn.exec_driver_sql(ATTEMPTS)
        conn.exec_driver_sql("ANALYZE")
    print(f"  filled {size:,} jobs in {time.perf_counter() - started:.1f} s", flush=True)
    store.accounts.create_user("bench", hash_password(PASSWORD), "admin")
    return app


PAGES = {
    "/ui/ (counts, chart, first page)": "/ui/",
    "deep page via cursor (before=N/2)": "/ui/?before={deep}",
    "older page from the deep page": "/ui/?before={older}",
    "failed jobs, first page": "/ui/?status=failed",
    "one job": "/ui/jobs/{deep}",
    # status + type; "completed", so that both sizes fill a whole page of 50 rows
    "completed pdf jobs (status + type)": "/ui/?status=completed&type=pdf",
    # search and the producer/worker filters (every job is billing's; worker-3 holds 1/8)
    "search by id (q=N/2)": "/ui/?q={deep}",
    "search by a key no job has (admin)": "/ui/?q=no-such-key",
    "worker filter (worker-3)": "/ui/?worker=worker-3",
    "producer filter (billing)": "/ui/?producer=billing",
    # exact counts of every job: read from the trigger-kept job_counts, not the index
    "GET /metrics (every job counted)": "/metrics",
    # per type: counts per status, the oldest due job, the last hour
    "GET /types": "/types",
    "/ui/types": "/ui/types",
    # running jobs, a day of claims, an hour of outcomes
    "GET /workers": "/workers",
    "/ui/workers": "/ui/workers",
}


def measure(apps: dict[int, Any], runs: int) -> dict[int, dict[str, float]]:
    """Median milliseconds per page and size; sizes take turns, so load hits both alike."""
    clients = {size: app.test_client() for size, app in apps.items()}
    auth = {"Authorization": "Basic " + base64.b64encode(
        f"bench:{PASSWORD}".encode()).decode()}
    out: dict[int, dict[str, float]] = {size: {} for size in apps}
    for name, template in PAGES.items():
        samples: dict[int, list[float]] = {size: [] for size in apps}
        for turn in range(runs + 1):  # the first turn warms caches and is dropped
            for size, client in clients.items():
                url = template.format(deep=size // 2, older=size // 2 - 50)
                t0 = time.perf_counter()
                resp = client.get(url, headers=auth)
                elapsed = (time.perf_counter() - t0) * 1000
                assert resp.status_code == 200, (url, resp.status_code)
                if turn:
                    samples[size].append(elapsed)
        for size in apps:
            out[size][name] = statistics.median(samples[size])
    return out


def main() -> None:
    """Run the benchmark and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument("--sizes", default="1000,1000000")
    parser.add_argument("--keep", default=None, help="folder for the databases (kept)")
    parser.add_argument("--reuse", action="store_true",
                        help="with --keep: reuse databases filled by an earlier run")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    folder = args.keep or tempfile.mkdtemp(prefix="queuelog-bench-")
    os.makedirs(folder, exist_ok=True)
    apps = {}
    for size in sizes:
        print(f"{size:,} jobs:", flush=True)
        apps[size] = build(size, folder, reuse=args.reuse)
    results = measure(apps, args.runs)
    for app in apps.values():
        app.extensions["queuelog.store"].close()
    small, larger = min(sizes), sorted(sizes)[1:]
    print(f"\nmedian of {args.runs} runs, ms (SQLite, Flask test client)")
    print(f"{'page':<36} {small:>10,}" + "".join(f" {n:>12,}   ratio" for n in larger))
    for name in results[small]:
        a = results[small][name]
        row = f"{name:<36} {a:>10.2f}"
        for n in larger:
            b = results[n][name]
            row += f" {b:>12.2f}   {b / a:4.2f}x {'ok' if b <= 1.5 * a else 'SLOW'}"
        print(row)
    if not args.keep:  # the databases, their WAL files and wake-up folders
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
