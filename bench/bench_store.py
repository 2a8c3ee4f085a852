"""Benchmark the store: ratios within one run, medians of several runs.

  (a) claim+complete through the store vs the raw driver (sqlite3 / psycopg) running the
      same statements in the same transactions;
  (b) claim+complete cost with a small vs a large backlog of pending jobs (about 1.0 means
      the claim is an index walk that does not grow with the table);
  (c) enqueue over HTTP (Flask test client, no network) vs the store's enqueue;
  (d) a claim of one type (``email``) with the large backlog made of another type
      (``pdf``, a higher priority: ahead of it in claim order) vs with the small one.

    python bench/bench_store.py                      # SQLite in a temp dir
    python bench/bench_store.py --database-url postgresql+psycopg://postgres@127.0.0.1/queuelog
    python bench/bench_store.py --only-backlog --small 10000 --large 10000000 --database-url ...

On PostgreSQL the benchmark works in schemas of its own (queuelog_bench_*), dropped at the
end; the database's own tables are never touched.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from sqlalchemy import create_engine, event
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from queuelog import create_app  # noqa: E402
from queuelog.server.store import NewJob, Store  # noqa: E402

WORKER = "bench-worker"
LEASE_US = 300 * 1_000_000

# The raw baseline: the statements the store runs for one claim and one complete, written
# out by hand, in the same transactions (claim: take back expired leases, claim, open the
# attempt; complete: close the job, close the attempt). ``{lock}`` is SKIP LOCKED on PG,
# ``{indexed}``/``{lease_idx}`` the INDEXED BY the store sends on SQLite.
RAW_EXPIRED = ("SELECT id, attempt FROM jobs{lease_idx} WHERE status = 'running' "
               "AND lease_expires_at < :now ORDER BY lease_expires_at LIMIT 100{lock}")
RAW_CLAIM = ("UPDATE jobs SET status = 'running', attempt = attempt + 1, worker_id = :wkr, "
             "claimed_at = :now, lease_expires_at = :now + :lease_us, updated_at = :now "
             "WHERE status = 'pending' AND id = (SELECT cand.id FROM jobs AS cand{indexed} "
             "WHERE cand.status = 'pending' AND cand.run_at <= :now "
             "ORDER BY cand.priority DESC, cand.run_at, cand.id LIMIT 1{lock}) RETURNING *")
RAW_ATTEMPT_START = ("INSERT INTO job_attempts (job_id, attempt, worker_id, started_at, outcome) "
                     "VALUES (:jid, :att, :wkr, :now, 'running')")
RAW_COMPLETE = ("UPDATE jobs SET status = 'completed', result = :res, lease_expires_at = NULL, "
                "finished_at = :now, updated_at = :now WHERE id = :jid AND status = 'running' "
                "AND attempt = :att AND worker_id = :wkr RETURNING *")
RAW_ATTEMPT_END = ("UPDATE job_attempts SET finished_at = :now, outcome = 'completed', "
                   "error = NULL WHERE job_id = :jid AND attempt = :att")


def now_us() -> int:
    """Wall clock as epoch microseconds, like the store's clock."""
    return time.time_ns() // 1_000


class Slot:
    """One benchmark database: a SQLite file in a temp dir, or a PostgreSQL schema."""

    def __init__(self, base_url: str | None, tmpdir: str, name: str, synchronous: str) -> None:
        self.postgres = base_url is not None and \
            make_url(base_url).get_backend_name() == "postgresql"
        self.synchronous = synchronous
        if base_url is None:
            self.path = os.path.join(tmpdir, f"{name}.sqlite3")
            self.url = f"sqlite:///{self.path}"
        elif self.postgres:
            # Our own schema: the database's real tables are never touched.
            self.schema = f"queuelog_bench_{name}"
            self.url = make_url(base_url).update_query_dict(
                {"options": f"-csearch_path={self.schema}"}).render_as_string(False)
            self.base_url = base_url
        else:
            sys.exit("--database-url: only postgresql+psycopg:// URLs (SQLite is the default)")

    def reset(self) -> Store:
        """Empty the database and return a fresh store on it."""
        if self.postgres:
            engine = create_engine(self.base_url)
            with engine.begin() as conn:
                conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
                conn.exec_driver_sql(f"CREATE SCHEMA {self.schema}")
            engine.dispose()
        else:
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(self.path + suffix):
                    os.remove(self.path + suffix)
        store = Store(self.url, sqlite_synchronous=self.synchronous)
        store.create_schema()
        return store

    def drop(self) -> None:
        """Remove the benchmark schema (PostgreSQL; temp files go with their dir)."""
        if self.postgres:
            engine = create_engine(self.base_url)
            with engine.begin() as conn:
                conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
            engine.dispose()

    def fill(self, store: Store, n: int, type: str = "email", priority: str = "") -> float:
        """Insert ``n`` due pending jobs in one statement, of mixed priority unless
        ``priority`` (SQL) is given; return seconds."""
        started = time.perf_counter()
        now = now_us()
        cols = ("INSERT INTO jobs (type, payload, priority, status, attempt, retry_count, "
                "max_retries, producer, run_at, created_at, updated_at) ")
        # Priority (i mod 4) * 10, spelled so that SQLite and PostgreSQL both take it.
        row = (f"SELECT '{type}', '{{\"to\": \"a@b.c\"}}', {priority or '(i - i / 4 * 4) * 10'}, "
               f"'pending', "
               f"0, 0, 3, 'bench', {now - 60_000_000} + i, {now}, {now}")
        if self.postgres:
            sql = cols + row + f" FROM generate_series(1, {int(n)}) AS s(i)"
        else:
            sql = (cols + f"WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq "
                   f"WHERE i < {int(n)}) " + row + " FROM seq")
        with store.engine.begin() as conn:
            conn.exec_driver_sql(sql)
        if self.postgres:
            # Autovacuum would have analyzed a table this size; SQLite, by contrast, runs
            # with no statistics unless someone runs ANALYZE, so we leave it without.
            with store.engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE")
        return time.perf_counter() - started

    def raw(self) -> "RawQueue":
        """The raw-driver baseline on this database."""
        return RawQueue(self.url, self.postgres, self.synchronous)


class RawQueue:
    """claim+complete with the bare DB-API driver: the floor the store is measured against."""

    def __init__(self, url: str, postgres: bool, synchronous: str) -> None:
        self.postgres = postgres
        marks = ({"{lock}": " FOR UPDATE SKIP LOCKED", "{indexed}": "", "{lease_idx}": ""}
                 if postgres else
                 {"{lock}": "", "{indexed}": " INDEXED BY ix_jobs_claim",
                  "{lease_idx}": " INDEXED BY ix_jobs_lease"})
        sqls = []
        for sql in (RAW_EXPIRED, RAW_CLAIM, RAW_ATTEMPT_START, RAW_COMPLETE, RAW_ATTEMPT_END):
            for mark, value in marks.items():
                sql = sql.replace(mark, value)
            sqls.append(sql)
        if postgres:
            import psycopg
            sqls = [re.sub(r":(\w+)", r"%(\1)s", s) for s in sqls]
            self.conn: Any = psycopg.connect(make_url(url).set(drivername="postgresql")
                                             .render_as_string(hide_password=False))
        else:
            self.conn = sqlite3.connect(make_url(url).database, isolation_level=None,
                                        timeout=30, check_same_thread=False)
            for pragma in ("journal_mode=WAL", "busy_timeout=30000",
                           f"synchronous={synchronous}", "foreign_keys=ON"):
                self.conn.execute(f"PRAGMA {pragma}")
        self.expired, self.claim_sql, self.start, self.complete_sql, self.end = sqls

    def _begin(self) -> Any:
        cur = self.conn.cursor()
        if not self.postgres:  # psycopg begins implicitly
            cur.execute("BEGIN IMMEDIATE")
        return cur

    def _commit(self, cur: Any) -> None:
        if self.postgres:
            self.conn.commit()
        else:
            cur.execute("COMMIT")
        cur.close()

    def claim_complete(self) -> None:
        """One claim and one complete, two transactions, as a worker does them."""
        cur = self._begin()
        now = now_us()
        cur.execute(self.expired, {"now": now})
        cur.fetchall()
        cur.execute(self.claim_sql, {"now": now, "wkr": WORKER, "lease_us": LEASE_US})
        row = cur.fetchone()
        cur.execute(self.start, {"jid": row[0], "att": row[5], "wkr": WORKER, "now": now})
        self._commit(cur)
        cur = self._begin()
        params = {"jid": row[0], "att": row[5], "wkr": WORKER, "now": now_us(),
                  "res": '{"ok":true}'}
        cur.execute(self.complete_sql, params)
        assert cur.fetchone() is not None
        cur.execute(self.end, params)
        self._commit(cur)

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


def store_claim_complete(store: Store, types: list[str] | None = None) -> None:
    """One claim (of ``types``, else any) and one complete through the store."""
    job = store.claim(WORKER, lease_seconds=300, types=types)
    assert job is not None, "the benchmark ran out of jobs"
    store.complete(job.id, WORKER, job.attempt, '{"ok":true}')


def rate(op: Callable[[], None], n: int) -> float:
    """Operations per second of ``n`` calls."""
    start = time.perf_counter()
    for _ in range(n):
        op()
    return n / (time.perf_counter() - start)


def count_statements(store: Store) -> int:
    """Statements the store sends for one claim+complete (the raw loop sends 5 + BEGIN/COMMIT)."""
    seen: list[str] = []

    def record(*args: Any) -> None:
        seen.append(args[2])
    event.listen(store.engine, "before_cursor_execute", record)
    try:
        store_claim_complete(store)
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    return sum(1 for s in seen if not s.startswith(("BEGIN", "COMMIT")))


def bench_vs_raw(slot: Slot, runs: int, ops: int) -> dict[str, Any]:
    """(a) store claim+complete rate over the raw driver's, per run, alternating who goes first."""
    ratios, store_rates, raw_rates = [], [], []
    statements = 0
    for i in range(runs):
        store = slot.reset()
        slot.fill(store, 2 * ops + 10)
        raw = slot.raw()
        statements = count_statements(store)
        rates = {}
        for who in (("store", "raw") if i % 2 == 0 else ("raw", "store")):
            op = raw.claim_complete if who == "raw" else lambda: store_claim_complete(store)
            rates[who] = rate(op, ops)
        raw.close()
        store.close()
        store_rates.append(rates["store"])
        raw_rates.append(rates["raw"])
        ratios.append(rates["store"] / rates["raw"])
    return {"store": statistics.median(store_rates), "raw": statistics.median(raw_rates),
            "ratio": statistics.median(ratios), "statements": statements}


def claim_plan(slot: Slot, store: Store) -> str:
    """The query plan of the claim statement the store really sends."""
    captured: list[tuple[str, Any]] = []

    def record(_conn: Any, _cur: Any, statement: str, parameters: Any, *_: Any) -> None:
        # PostgreSQL's claim is a CTE (WITH claimed AS (UPDATE ...)): the first UPDATE sent.
        if "UPDATE JOBS SET STATUS" in statement.upper():
            captured.append((statement, parameters))
    event.listen(store.engine, "before_cursor_execute", record)
    try:
        store_claim_complete(store)
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    statement, parameters = captured[0]
    raw = store.engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute(("EXPLAIN " if slot.postgres else "EXPLAIN QUERY PLAN ") + statement,
                    parameters)
        rows = cur.fetchall()
        raw.rollback()
    finally:
        raw.close()
    lines = ([str(r[0]) for r in rows if "Scan" in str(r[0])] if slot.postgres
             else [str(r[-1]) for r in rows])
    return " | ".join(line.strip() for line in lines)


def bench_backlog(small: Slot, large: Slot, sizes: tuple[int, int], runs: int,
                  ops: int) -> dict[str, Any]:
    """(b) claim+complete with a small and a large backlog, measured in alternation."""
    stores, out = [], {}
    for slot, size in zip((small, large), sizes):
        store = slot.reset()
        out[f"fill_{size}"] = slot.fill(store, size + (runs + 1) * ops + 10)
        stores.append(store)
    rates: list[list[float]] = [[], []]
    for i in range(runs):
        for k in ((0, 1) if i % 2 == 0 else (1, 0)):
            rates[k].append(rate(lambda: store_claim_complete(stores[k]), ops))
    out["plan"] = claim_plan(large, stores[1])
    for store in stores:
        store.close()
    out["small"], out["large"] = (statistics.median(r) for r in rates)
    out["ratio"] = statistics.median(b / a for a, b in zip(*rates))
    return out


def bench_other_type(small: Slot, large: Slot, sizes: tuple[int, int], runs: int,
                     ops: int) -> dict[str, Any]:
    """(d) claims of ``email`` behind ``sizes[1]`` pending ``pdf`` jobs, against behind
    ``sizes[0]``; measured in alternation."""
    stores = []
    for slot, size in zip((small, large), sizes):
        store = slot.reset()
        slot.fill(store, size, type="pdf", priority="50")
        slot.fill(store, (runs + 1) * ops + 10)
        stores.append(store)
    rates: list[list[float]] = [[], []]
    for i in range(runs):
        for k in ((0, 1) if i % 2 == 0 else (1, 0)):
            rates[k].append(rate(lambda: store_claim_complete(stores[k], ["email"]), ops))
    for store in stores:
        store.close()
    small_rate, large_rate = (statistics.median(r) for r in rates)
    return {"small": small_rate, "large": large_rate,
            "ratio": statistics.median(b / a for a, b in zip(*rates))}


def bench_http(slot: Slot, runs: int, ops: int) -> dict[str, Any]:
    """(c) enqueue through the HTTP stack (test client) vs the store's enqueue."""
    slot.reset().close()  # the app creates its own store on the same (empty) database
    app = create_app({"TESTING": True, "DATABASE_URL": slot.url, "SECRET_KEY": "bench",
                      "BOOTSTRAP_ADMIN": False, "SQLITE_SYNCHRONOUS": slot.synchronous})
    app_store: Store = app.extensions["queuelog.store"]
    _, token = app_store.accounts.create_key("bench", "producer")
    client = app.test_client()
    headers = {"Authorization": f"Bearer {token}"}
    body = {"type": "email", "payload": {"to": "a@b.c"}}
    new = NewJob(producer="bench", type="email", payload_json=json.dumps(body["payload"]),
                 priority=0, max_retries=3)

    def over_http() -> None:
        answer = client.post("/jobs", json=body, headers=headers)
        if answer.status_code != 201:
            sys.exit(f"enqueue over HTTP answered {answer.status}: {answer.get_data(True)[:300]}")

    http_rates, store_rates, ratios = [], [], []
    for _ in range(runs):
        http_rates.append(rate(over_http, ops))
        store_rates.append(rate(lambda: app_store.enqueue(new), ops))
        ratios.append(http_rates[-1] / store_rates[-1])
    app_store.close()
    return {"http": statistics.median(http_rates), "store": statistics.median(store_rates),
            "ratio": statistics.median(ratios)}


def table(rows: list[tuple[str, str, str]]) -> str:
    """A small Markdown table."""
    header = ("measurement", "result", "ratio")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    fmt = "| " + " | ".join(f"{{:<{w}}}" for w in widths) + " |"
    lines = [fmt.format(*header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    return "\n".join([*lines, *(fmt.format(*r) for r in rows)])


def main(argv: list[str] | None = None) -> None:
    """Run the benchmarks and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default=None,
                        help="postgresql+psycopg://... (own schemas); default: SQLite temp files")
    parser.add_argument("--synchronous", default="NORMAL",
                        help="SQLite synchronous: NORMAL (default; measures the code, not the "
                             "disk's fsync) or FULL (queuelog's default)")
    parser.add_argument("--runs", type=int, default=5, help="runs per measurement (median)")
    parser.add_argument("--ops", type=int, default=None,
                        help="claim+complete per timed run (default 1000; 300 on PostgreSQL, "
                             "whose every commit waits for its WAL flush)")
    parser.add_argument("--small", type=int, default=1_000, help="small backlog")
    parser.add_argument("--large", type=int, default=100_000, help="large backlog")
    parser.add_argument("--http-ops", type=int, default=300, help="enqueues per HTTP run")
    parser.add_argument("--skip-http", action="store_true")
    parser.add_argument("--only-backlog", action="store_true",
                        help="(b) alone: one fill of --large (ten million take minutes)")
    args = parser.parse_args(argv)
    if args.ops is None:
        args.ops = 300 if args.database_url else 1000

    with tempfile.TemporaryDirectory(prefix="queuelog-bench-") as tmpdir:
        slots = {name: Slot(args.database_url, tmpdir, name, args.synchronous.upper())
                 for name in ("raw", "small", "large", "http")}
        try:
            run(args, slots)
        finally:
            for slot in slots.values():
                slot.drop()


def run(args: argparse.Namespace, slots: dict[str, Slot]) -> None:
    """The four measurements, printed as one table."""
    postgres = slots["raw"].postgres
    backend = "PostgreSQL" if postgres else \
        f"SQLite {sqlite3.sqlite_version}, synchronous={slots['raw'].synchronous}"
    print(f"queuelog store benchmark: {backend}; medians of {args.runs} runs", flush=True)
    started = time.perf_counter()
    rows = []
    if not args.only_backlog:
        a = bench_vs_raw(slots["raw"], args.runs, args.ops)
        driver = "psycopg" if postgres else "sqlite3"
        rows += [(f"claim+complete, raw {driver}", f"{a['raw']:,.0f}/s", "1.00"),
                 (f"claim+complete, store ({a['statements']} statements, raw 5)",
                  f"{a['store']:,.0f}/s", f"{a['ratio']:.2f} of raw")]
    b = bench_backlog(slots["small"], slots["large"], (args.small, args.large), args.runs,
                      args.ops)
    rows += [(f"claim+complete, {args.small:,} pending", f"{b['small']:,.0f}/s", "1.00"),
             (f"claim+complete, {args.large:,} pending", f"{b['large']:,.0f}/s",
              f"{b['ratio']:.2f} of {args.small:,}")]
    if not args.only_backlog:
        d = bench_other_type(slots["small"], slots["large"], (args.small, args.large),
                             args.runs, args.ops)
        rows += [(f"claim of one type, {args.small:,} of another ahead",
                  f"{d['small']:,.0f}/s", "1.00"),
                 (f"claim of one type, {args.large:,} of another ahead",
                  f"{d['large']:,.0f}/s", f"{d['ratio']:.2f} of {args.small:,}")]
    if not args.skip_http and not args.only_backlog:
        c = bench_http(slots["http"], args.runs, args.http_ops)
        rows += [("enqueue, store", f"{c['store']:,.0f}/s", "1.00"),
                 ("enqueue, HTTP (Flask test client)", f"{c['http']:,.0f}/s",
                  f"{c['ratio']:.2f} of store")]
    print(table(rows))
    print(f"\nclaim plan, {args.large:,} pending: {b['plan']}")
    print(f"filling {args.large:,} jobs took {b[f'fill_{args.large}']:.1f} s; "
          f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
