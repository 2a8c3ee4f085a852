"""Dashboard speed at scale: /ui/, deep pages, /types, /workers, /metrics by table size.

    python bench/bench_dashboard.py [--runs 31] [--sizes 1000,1000000] [--keep DIR [--reuse]]
    python bench/bench_dashboard.py --sizes 1000,1000000,10000000 --keep /tmp/qb   # the 10M row
    python bench/bench_dashboard.py --sizes 1000,10000 --busy-hour 270000    # a busy last hour
    python bench/bench_dashboard.py --pg-url postgresql+psycopg://postgres@127.0.0.1:5432/bench_scale

Fills a fresh database per size with INSERT ... SELECT over a sequence (a recursive CTE on
SQLite, ``generate_series`` on PostgreSQL; 20 to 40 seconds for a million jobs on SQLite),
in chunks of a million, then times pages through Flask's test client
in turns (so a busy machine slows both sizes alike), and prints medians and the ratio
of each larger size to the smallest (target <= 1.5x). The fill goes through the count
triggers (migration 0008) like any insert, and the attempts of the last two hours end by an
UPDATE, as a complete or a fail ends them, so the per-minute rollup's trigger (migration
0015, where the code has it) counts them.
Jobs arrive at a steady rate (one every 3.6 s, the newest now), so both databases
have the same last hour: what grows is history, which is what a dashboard must not scan.

``--busy-hour N`` adds N jobs finished in the last hour (one attempt each, one in ten
failed, over the same types and workers) to every size but the smallest, which stays the
quiet reference: the ratio then says what history and a busy hour cost together.

``--pg-url``: PostgreSQL instead, one schema per size in that database
(``queuelog_dash_<size>``), dropped at the end unless ``--keep`` (then ``--reuse`` reuses
them); the database itself is never dropped. The fill ends with VACUUM ANALYZE.
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

from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from queuelog import create_app  # noqa: E402
from queuelog.server.auth import hash_password  # noqa: E402

NOW = 1_780_000_000_000_000       # a fixed "now" (epoch microseconds) for every run
SPACING = 3_600_000               # 3.6 s between jobs: 1,000 jobs per hour
HOUR = 3_600_000_000
RECENT = NOW - 2 * HOUR           # attempts that ended after this end by an UPDATE
CHUNK = 1_000_000                 # jobs per INSERT: no transition table of ten million rows
PASSWORD = "bench-password"

# The numbers lo..hi, as ``seq(n)``: SQLite has no generate_series by default.
SEQ = {"sqlite": "seq(n) AS (SELECT :lo UNION ALL SELECT n + 1 FROM seq WHERE n < :hi)",
       "postgresql": "seq(n) AS (SELECT generate_series(CAST(:lo AS BIGINT), :hi))"}

# Older than an hour: mostly completed, some failed or cancelled. The last hour also has
# pending, scheduled and running jobs. Every claimed job has its attempt row.
FILL = """
WITH RECURSIVE {seq},
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
# A busy last hour: :busy more jobs (ids after :count), finished at even steps within the
# hour, one in ten failed.
BUSY = """
WITH RECURSIVE {seq},
busy AS (SELECT n, :now - (n - :count) * 3600000000 / (:busy + 1) AS finished,
                CASE WHEN n % 10 = 0 THEN 'failed' ELSE 'completed' END AS status FROM seq)
INSERT INTO jobs (id, type, payload, priority, status, attempt, retry_count, max_retries,
                  producer, worker_id, run_at, claimed_at, lease_expires_at, result, error,
                  created_at, updated_at, finished_at)
SELECT n, CASE n % 3 WHEN 0 THEN 'email' WHEN 1 THEN 'pdf' ELSE 'sync' END,
       '{"to": "user' || n || '@example.com", "template": "welcome"}',
       (n % 4) * 10, status, 1, 0, 3, 'billing', 'worker-' || (n % 8),
       finished - 3000000, finished - 1000000, NULL,
       CASE WHEN status = 'completed' THEN '{"ok": true}' END,
       CASE WHEN status = 'failed' THEN 'SMTP 550: mailbox unavailable' END,
       finished - 3000000, finished, finished
FROM busy
"""
# Every claimed job's attempt; those that ended in the last two hours are inserted running
# and ended by END (below), as the product ends them.
ATTEMPTS = """
INSERT INTO job_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome, error)
SELECT id, 1, worker_id, claimed_at,
       CASE WHEN finished_at >= :recent THEN NULL ELSE finished_at END,
       CASE WHEN status = 'running' OR finished_at >= :recent THEN 'running' ELSE status END,
       CASE WHEN finished_at >= :recent THEN NULL ELSE error END
FROM jobs WHERE attempt = 1 AND id BETWEEN :lo AND :hi
"""
END = """
UPDATE job_attempts SET finished_at = j.finished_at, outcome = j.status, error = j.error
FROM jobs AS j
WHERE j.id = job_attempts.job_id AND job_attempts.outcome = 'running'
  AND j.status IN ('completed', 'failed')
"""


def literal(sql: str, dialect: str, **params: int) -> str:
    """``sql`` with its sequence for ``dialect`` and every parameter as a literal integer
    (the CTEs need no driver parameters)."""
    sql = sql.replace("{seq}", SEQ[dialect])
    for name, value in sorted(params.items(), key=lambda kv: -len(kv[0])):
        sql = sql.replace(f":{name}", str(int(value)))
    # psycopg reads ``%`` as a placeholder even with no parameters: the modulo doubled.
    return sql.replace("%", "%%") if dialect == "postgresql" else sql


def chunks(lo: int, hi: int) -> list[tuple[int, int]]:
    """lo..hi in ranges of at most CHUNK."""
    return [(a, min(a + CHUNK - 1, hi)) for a in range(lo, hi + 1, CHUNK)]


class Place:
    """Where one size's database lives: a SQLite file, or a PostgreSQL schema."""

    def __init__(self, size: int, busy: int, folder: str, pg_url: str | None) -> None:
        self.pg_url, self.name = pg_url, f"{size}" + (f"_busy{busy}" if busy else "")
        self.path = os.path.join(folder, f"bench-{self.name}.sqlite3")
        self.schema = f"queuelog_dash_{self.name}"

    @property
    def url(self) -> str:
        """The database URL the app opens."""
        if not self.pg_url:
            return f"sqlite:///{self.path}"
        return make_url(self.pg_url).update_query_dict(
            {"options": f"-csearch_path={self.schema}"}).render_as_string(hide_password=False)

    def exists(self) -> bool:
        """Whether an earlier run left it."""
        if not self.pg_url:
            return os.path.exists(self.path)
        with self._admin() as conn:
            return bool(conn.exec_driver_sql(
                "SELECT 1 FROM pg_namespace WHERE nspname = %(s)s", {"s": self.schema}).first())

    def wipe(self) -> None:
        """Remove it (files, or the schema and everything in it)."""
        if not self.pg_url:
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(self.path + suffix):
                    os.remove(self.path + suffix)
            return
        with self._admin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")

    def create(self) -> None:
        """An empty schema (PostgreSQL; a SQLite file is made by opening it)."""
        if self.pg_url:
            with self._admin() as conn:
                conn.exec_driver_sql(f"CREATE SCHEMA {self.schema}")

    def _admin(self) -> Any:
        return create_engine(self.pg_url, isolation_level="AUTOCOMMIT").connect()


def fill(store: Any, size: int, busy: int) -> None:
    """``size`` jobs of history and ``busy`` more in the last hour, their attempts, and the
    recent attempts ended by an UPDATE; then the planner's statistics."""
    dialect = store.engine.dialect.name
    with store.engine.begin() as conn:
        for lo, hi in chunks(1, size):
            conn.exec_driver_sql(literal(FILL, dialect, count=size, now=NOW, spacing=SPACING,
                                         lo=lo, hi=hi))
        for lo, hi in chunks(size + 1, size + busy):
            conn.exec_driver_sql(literal(BUSY, dialect, count=size, now=NOW, busy=busy,
                                         lo=lo, hi=hi))
        for lo, hi in chunks(1, size + busy):
            conn.exec_driver_sql(literal(ATTEMPTS, dialect, recent=RECENT, lo=lo, hi=hi))
        conn.exec_driver_sql(END)
        if dialect == "postgresql":  # ids were given: the next enqueue's id follows them
            conn.exec_driver_sql("SELECT setval(pg_get_serial_sequence('jobs', 'id'), "
                                 "(SELECT max(id) FROM jobs))")
    if dialect == "postgresql":  # the visibility map too, as autovacuum leaves a table
        with store.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql("VACUUM ANALYZE jobs, job_attempts")
            conn.exec_driver_sql("ANALYZE")
    else:
        with store.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")


def build(size: int, folder: str, reuse: bool = False, busy: int = 0,
          pg_url: str | None = None) -> Any:
    """An app whose database holds ``size`` jobs and ``busy`` more finished in the last hour
    (filled afresh unless reused)."""
    place = Place(size, busy, folder, pg_url)
    existed = reuse and place.exists()
    if not existed:
        place.wipe()
        place.create()
    app = create_app({"DATABASE_URL": place.url, "SECRET_KEY": "bench",
                      "BOOTSTRAP_ADMIN": False, "SQLITE_SYNCHRONOUS": "OFF",
                      "AUTH_CACHE_SECONDS": 3600})
    store = app.extensions["queuelog.store"]
    store.clock = lambda: NOW
    app.extensions["queuelog.bench.place"] = place
    if existed:
        print(f"  reusing {place.url}", flush=True)
        return app
    started = time.perf_counter()
    fill(store, size, busy)
    print(f"  filled {size:,} jobs" + (f" and {busy:,} in the last hour" if busy else "")
          + f" in {time.perf_counter() - started:.1f} s", flush=True)
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
    parser.add_argument("--busy-hour", type=int, default=0, metavar="N",
                        help="N more jobs finished in the last hour, in every size but the "
                             "smallest")
    parser.add_argument("--pg-url", default=None,
                        help="PostgreSQL database to work in (a schema per size)")
    parser.add_argument("--keep", default=None,
                        help="folder for the SQLite databases (kept); with --pg-url: keep "
                             "the schemas")
    parser.add_argument("--reuse", action="store_true",
                        help="with --keep: reuse databases filled by an earlier run")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    folder = args.keep or tempfile.mkdtemp(prefix="queuelog-bench-")
    os.makedirs(folder, exist_ok=True)
    small = min(sizes)
    apps = {}
    for size in sizes:
        busy = args.busy_hour if size != small else 0
        print(f"{size:,} jobs" + (f" + {busy:,} in the last hour" if busy else "") + ":",
              flush=True)
        apps[size] = build(size, folder, reuse=args.reuse, busy=busy, pg_url=args.pg_url)
    results = measure(apps, args.runs)
    for app in apps.values():
        app.extensions["queuelog.store"].close()
    larger = sorted(sizes)[1:]
    backend = "PostgreSQL" if args.pg_url else "SQLite"
    busy_note = (f"; larger sizes + {args.busy_hour:,} jobs finished in the last hour"
                 if args.busy_hour else "")
    print(f"\nmedian of {args.runs} runs, ms ({backend}, Flask test client{busy_note})")
    print(f"{'page':<36} {small:>10,}" + "".join(f" {n:>12,}   ratio" for n in larger))
    for name in results[small]:
        a = results[small][name]
        row = f"{name:<36} {a:>10.2f}"
        for n in larger:
            b = results[n][name]
            row += f" {b:>12.2f}   {b / a:4.2f}x {'ok' if b <= 1.5 * a else 'SLOW'}"
        print(row)
    if not args.keep:  # the databases (SQLite: their WAL files and wake-up folders too)
        if args.pg_url:
            for app in apps.values():
                app.extensions["queuelog.bench.place"].wipe()
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
