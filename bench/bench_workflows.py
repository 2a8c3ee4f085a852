"""Workflows' cost (issue 37): jobs that depend on jobs, at the store, on a table of 1M jobs.

    python bench/bench_workflows.py                                  # SQLite FULL and PostgreSQL
    python bench/bench_workflows.py --backends sqlite --rounds 5 --ops 200
    python bench/bench_workflows.py --rebuild                        # build the databases again

Store verbs called directly (as ``bench_store.py``), under SQLite ``synchronous=FULL`` and on
PostgreSQL, on a table of ``--jobs`` (1,000,000) finished jobs (96% completed, 3% failed, 1%
cancelled, three types, with their attempts), as a real table of a queue that has run for a
week. Per backend three databases:

- ``main``: built by today's main (``--main-tree``) at its schema, filled by one
  ``INSERT ... SELECT`` (and the attempts by another);
- ``flow``: a copy of ``main`` (PostgreSQL: ``CREATE DATABASE ... TEMPLATE``; SQLite: the
  backup API), upgraded by the flow branch's code (``--flow-tree``, migration 0013): the same
  rows, the migration's time at this size reported;
- ``small``: a new, empty database at flow's schema (the table-size control of the fan-out).

The first two are kept between runs (``--sqlite-dir``; PostgreSQL databases ``bench_wf_*``),
``--rebuild`` makes them again. What is measured, every figure a median of ``--rounds``
rounds, the sides of a comparison interleaved round by round, first side alternating:

1. **lifecycle, main vs flow**: a plain job's enqueue, claim and complete (three calls), per
   second, each codebase in a subprocess of its own (``PYTHONPATH`` its tree) on its own
   database; the ratio flow / main per round (goal: flow at least 1 / 1.05 of main).
2. **with dependencies vs without** (flow, 1M): a chain parent -> child against two plain
   jobs: each claim's and complete's time (the parent's complete releases its child, the
   child's claim carries its parent), and a job's claim + complete, the ratio.
3. **fan-in / fan-out** (flow): 100 parents, one child: the complete of the last parent (the
   transaction that releases the child), and of all 100 in one ``complete_many``; the child's
   claim (100 parents' results). One parent with 100 and 1,000 dependents: its complete,
   on the 1M table and on the empty one (it grows with the dependents, not the table).
4. **the claim's plan** (each codebase on its database): PostgreSQL ``EXPLAIN (ANALYZE,
   BUFFERS)`` of a one-job claim (any type, and one type) with 1,000 pending jobs, and for
   flow also 100,000 ``blocked`` ones, in a transaction rolled back; SQLite ``EXPLAIN QUERY
   PLAN``.

``--json FILE`` writes every round's figures.
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent.parent
WORKER = "bench-worker"
DAY_US = 86_400 * 1_000_000

# A week of finished jobs: one row of ``i`` (1..n). ``{series}`` is the dialect's row source.
# Integer remainders spelled without ``%`` (a placeholder mark for psycopg).
_R = "(i - i / 100 * 100)"
FILL_JOBS = f"""
INSERT INTO jobs (type, payload, priority, status, attempt, retry_count, max_retries, producer,
                  worker_id, result, error, run_at, claimed_at, created_at, updated_at,
                  finished_at)
{{cte}}SELECT CASE i - i / 3 * 3 WHEN 0 THEN 'email' WHEN 1 THEN 'pdf' ELSE 'sync' END,
       '{{{{"n": ' || i || '}}}}', (i - i / 4 * 4) * 10,
       CASE WHEN {_R} < 3 THEN 'failed' WHEN {_R} = 3 THEN 'cancelled' ELSE 'completed' END,
       CASE WHEN {_R} = 3 THEN 0 ELSE 1 END, 0, 3, 'bench',
       CASE WHEN {_R} = 3 THEN NULL ELSE 'worker-' || (i - i / 8 * 8) END,
       CASE WHEN {_R} > 3 THEN '{{{{"ok": true}}}}' END,
       CASE WHEN {_R} < 3 THEN 'boom' END,
       {{t0}} + i * {{step}}, CASE WHEN {_R} = 3 THEN NULL ELSE {{t0}} + i * {{step}} + 1000000 END,
       {{t0}} + i * {{step}}, {{t0}} + i * {{step}} + 2000000, {{t0}} + i * {{step}} + 2000000
FROM {{series}}
"""
FILL_ATTEMPTS = """
INSERT INTO job_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome, error)
SELECT id, 1, worker_id, claimed_at, finished_at, status, error FROM jobs WHERE attempt = 1
"""
SERIES = {"sqlite": ("WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq "
                     "WHERE i < {n}) ", "seq"),
          "postgresql": ("", "generate_series(CAST(1 AS BIGINT), {n}) AS seq(i)")}


def now_us() -> int:
    """Wall clock as epoch microseconds, like the store's clock."""
    return time.time_ns() // 1_000


def med(xs: list[float]) -> float:
    """The median."""
    return statistics.median(xs)


# -- the databases ----------------------------------------------------------------------------
class Backend:
    """One backend's three databases: their URLs, how to make, copy and drop them."""

    def __init__(self, name: str, sqlite_dir: str, pg_url: str) -> None:
        self.name = name
        self.postgres = name == "postgresql"
        self.pg_url = pg_url.rstrip("/")
        self.sqlite_dir = sqlite_dir

    def url(self, db: str) -> str:
        """The SQLAlchemy URL of database ``db`` (main, flow, small)."""
        if self.postgres:
            return f"{self.pg_url}/bench_wf_{db}"
        return f"sqlite:///{os.path.join(self.sqlite_dir, db + '.sqlite3')}"

    def _admin(self) -> Any:
        import psycopg
        return psycopg.connect(self.pg_url.replace("postgresql+psycopg", "postgresql")
                               + "/postgres", autocommit=True)

    def drop(self, db: str) -> None:
        """Remove database ``db`` if it is there."""
        if self.postgres:
            with self._admin() as conn:
                conn.execute(f"DROP DATABASE IF EXISTS bench_wf_{db} WITH (FORCE)")
        else:
            path = self.url(db)[len("sqlite:///"):]
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.remove(path + suffix)

    def create(self, db: str) -> None:
        """A new empty database ``db`` (SQLite: the store makes the file)."""
        self.drop(db)
        if self.postgres:
            with self._admin() as conn:
                conn.execute(f"CREATE DATABASE bench_wf_{db}")
        else:
            os.makedirs(self.sqlite_dir, exist_ok=True)

    def copy(self, src: str, dst: str) -> None:
        """``dst`` made a copy of ``src`` (no connection to ``src`` may be open)."""
        self.drop(dst)
        if self.postgres:
            with self._admin() as conn:
                conn.execute(f"CREATE DATABASE bench_wf_{dst} TEMPLATE bench_wf_{src}")
        else:
            source = sqlite3.connect(self.url(src)[len("sqlite:///"):])
            target = sqlite3.connect(self.url(dst)[len("sqlite:///"):])
            source.backup(target)
            target.execute("PRAGMA journal_mode=WAL")
            source.close()
            target.close()

    def built(self, jobs: int) -> dict[str, Any] | None:
        """What the last build recorded, if both kept databases hold ``jobs`` jobs."""
        got = []
        for db in ("main", "flow"):
            try:
                got.append(self.raw(db, "SELECT info FROM bench_built")[0][0])
            except Exception:  # noqa: BLE001 - missing database or table: not built
                return None
        info = [json.loads(g) for g in got]
        return info[1] if all(i.get("jobs") == jobs for i in info) and "migrate_s" in info[1] \
            else None

    def raw(self, db: str, sql: str, *, write: bool = False) -> list[Any]:
        """Run ``sql`` on database ``db`` with the bare driver; its rows."""
        if self.postgres:
            import psycopg
            with psycopg.connect(self.url(db).replace("postgresql+psycopg", "postgresql"),
                                 autocommit=True, connect_timeout=5) as conn:
                cur = conn.execute(sql)
                return cur.fetchall() if cur.description else []
        path = self.url(db)[len("sqlite:///"):]
        if not os.path.exists(path):
            raise FileNotFoundError(path)
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            cur = conn.execute(sql)
            return cur.fetchall() if cur.description else []
        finally:
            conn.close()


def run_tree(tree: str, *args: str) -> dict[str, Any]:
    """Run this script's ``args`` in a subprocess on ``tree``'s code; its JSON answer."""
    env = {**os.environ, "PYTHONPATH": tree}
    out = subprocess.run([sys.executable, __file__, *args, "--tree", tree], env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode:
        sys.exit(f"{args[0]} on {tree} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def build(backend: Backend, jobs: int, main_tree: str, flow_tree: str) -> dict[str, Any]:
    """Make ``main`` (main's schema, ``jobs`` finished jobs), then ``flow`` from it."""
    backend.create("main")
    got = run_tree(main_tree, "_build", "--url", backend.url("main"), "--jobs", str(jobs))
    started = time.perf_counter()
    backend.copy("main", "flow")
    got["copy_s"] = time.perf_counter() - started
    got.update(run_tree(flow_tree, "_migrate", "--url", backend.url("flow")))
    backend.raw("flow", f"UPDATE bench_built SET info = '{json.dumps(got)}'", write=True)
    return got


# -- the subprocesses: each runs on the code of its PYTHONPATH ---------------------------------
def _store(url: str) -> Any:
    """The store on ``url`` (SQLite FULL), from whichever tree is on the path."""
    from queuelog.server.store import Store
    return Store(url, sqlite_synchronous="FULL")


def _new(**kw: Any) -> Any:
    """A plain job (``kw``: flow's fields, depends_on)."""
    from queuelog.server.store import NewJob
    return NewJob(producer="bench", type=kw.pop("type", "email"), payload_json='{"to": "x"}',
                  priority=0, max_retries=3, **kw)


def sub_build(url: str, jobs: int) -> dict[str, Any]:
    """The schema (this tree's), then ``jobs`` finished jobs and their attempts."""
    store = _store(url)
    started = time.perf_counter()
    store.create_schema()
    dialect = store.engine.dialect.name
    cte, series = SERIES[dialect]
    t0 = now_us() - 7 * DAY_US
    sql = FILL_JOBS.format(cte=cte.format(n=jobs), series=series.format(n=jobs), t0=t0,
                           step=7 * DAY_US // jobs)
    with store.engine.begin() as conn:
        driver = conn.connection.driver_connection
        cur = driver.cursor()
        cur.execute(sql)
        cur.execute(FILL_ATTEMPTS)
        cur.execute("CREATE TABLE bench_built (info TEXT)")
        cur.close()
    fill_s = time.perf_counter() - started
    if dialect == "postgresql":
        with store.engine.connect() as conn:
            conn.connection.driver_connection.autocommit = True
            conn.connection.driver_connection.execute("VACUUM ANALYZE")
    info = {"jobs": jobs, "fill_s": fill_s, "vacuum_s": time.perf_counter() - started - fill_s}
    with store.engine.begin() as conn:
        conn.connection.driver_connection.cursor().execute(
            f"INSERT INTO bench_built VALUES ('{json.dumps(info)}')")
    store.close()
    return info


def sub_migrate(url: str) -> dict[str, Any]:
    """This tree's migrations on a copy of main's database, timed."""
    store = _store(url)
    started = time.perf_counter()
    store.create_schema()
    took = time.perf_counter() - started
    if store.engine.dialect.name == "postgresql":
        with store.engine.connect() as conn:
            conn.connection.driver_connection.autocommit = True
            conn.connection.driver_connection.execute("VACUUM ANALYZE")
    store.close()
    return {"migrate_s": took}


def sub_lifecycle(url: str) -> dict[str, Any]:
    """Serve slices of plain jobs' lifecycles (enqueue, claim, complete) on stdin's
    demand: a line ``N`` runs N and answers, on a line, their wall time and each call's
    times; an empty line ends. The two codebases' servers take turns slice by slice."""
    store = _store(url)
    clock = time.perf_counter
    for _ in range(20):  # warm: statements compiled, pool filled, pages cached
        job, _ = store.enqueue(_new())
        got = store.claim(WORKER, lease_seconds=300)
        store.complete(got.id, WORKER, got.attempt, '{"ok":true}')
    print("ready", flush=True)
    for line in sys.stdin:
        if not line.strip():
            break
        times: dict[str, list[float]] = {"enqueue": [], "claim": [], "complete": []}
        started, cpu = clock(), time.process_time()
        for _ in range(int(line)):
            t0 = clock()
            job, _ = store.enqueue(_new())
            t1 = clock()
            got = store.claim(WORKER, lease_seconds=300)
            t2 = clock()
            store.complete(got.id, WORKER, got.attempt, '{"ok":true}')
            t3 = clock()
            assert got.id == job.id, "another job was pending"
            times["enqueue"].append(t1 - t0)
            times["claim"].append(t2 - t1)
            times["complete"].append(t3 - t2)
        print(json.dumps({"wall": clock() - started, "cpu": time.process_time() - cpu,
                          **times}), flush=True)
    store.close()
    return {}


class Turns:
    """A lifecycle server (``sub_lifecycle``) of one codebase, fed slice by slice."""

    def __init__(self, tree: str, url: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "_lifecycle", "--url", url, "--tree", tree],
            env={**os.environ, "PYTHONPATH": tree}, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready", f"{tree}: no start"
        self.wall = self.cpu = 0.0
        self.ops = 0
        self.times: dict[str, list[float]] = {"enqueue": [], "claim": [], "complete": []}

    def slice(self, n: int) -> None:
        """Run ``n`` lifecycles and add up their times."""
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        got = json.loads(self.proc.stdout.readline())
        self.wall += got["wall"]
        self.cpu += got["cpu"]
        self.ops += n
        for k in self.times:
            self.times[k] += got[k]

    def close(self) -> dict[str, Any]:
        """End the server; the round's rate and each call's median and mean (ms)."""
        self.proc.stdin.write("\n")
        self.proc.stdin.close()
        self.proc.wait()
        return {"per_s": self.ops / self.wall, "cpu_ms": self.cpu / self.ops * 1e3,
                **{k: med(v) * 1e3 for k, v in self.times.items()},
                **{f"{k}_mean": statistics.fmean(v) * 1e3 for k, v in self.times.items()}}


def lifecycle_round(be: "Backend", main_tree: str, flow_tree: str, ops: int,
                    slices: int, first: str) -> dict[str, Any]:
    """One round: both codebases' servers, ``slices`` turns each of ``ops / slices``
    lifecycles, taking turns (who goes first alternating turn by turn)."""
    servers = {"main": Turns(main_tree, be.url("main")), "flow": Turns(flow_tree, be.url("flow"))}
    order = [first, "flow" if first == "main" else "main"]
    for i in range(slices):
        for side in (order if i % 2 == 0 else order[::-1]):
            servers[side].slice(max(1, ops // slices))
    got: dict[str, Any] = {side: s.close() for side, s in servers.items()}
    got["ratio"] = got["flow"]["per_s"] / got["main"]["per_s"]
    p50 = {side: sum(got[side][k] for k in ("enqueue", "claim", "complete"))
           for side in ("main", "flow")}
    got["ratio_p50"] = p50["main"] / p50["flow"]  # as a rate: above 1, flow is faster
    got["ratio_cpu"] = got["main"]["cpu_ms"] / got["flow"]["cpu_ms"]  # the same
    return got


def sub_plan(url: str, blocked: int) -> dict[str, Any]:
    """The claim's plan, one job of any type and of one, with 1,000 pending jobs (and
    ``blocked`` blocked ones) added in a transaction rolled back."""
    store = _store(url)
    pg = store.engine.dialect.name == "postgresql"
    cte, series = SERIES[store.engine.dialect.name]
    now = now_us()
    rows = ("INSERT INTO jobs (type, payload, priority, status, attempt, retry_count, "
            "max_retries, producer, run_at, created_at, updated_at{extra}) {cte}"
            "SELECT CASE i - i / 3 * 3 WHEN 0 THEN 'email' WHEN 1 THEN 'pdf' ELSE 'sync' END, "
            "'{{}}', (i - i / 4 * 4) * 10, '{status}', 0, 0, 3, 'bench', {now} - i, {now}, "
            "{now}{values} FROM {series}")
    out: dict[str, Any] = {}
    with store.engine.connect() as conn:
        cur = conn.connection.driver_connection.cursor()
        if not pg:
            cur.execute("BEGIN")
        cur.execute(rows.format(extra="", values="", status="pending", now=now,
                                cte=cte.format(n=1000), series=series.format(n=1000)))
        if blocked:
            cur.execute(rows.format(extra=", waiting_for", values=", 1", status="blocked",
                                    now=now, cte=cte.format(n=blocked),
                                    series=series.format(n=blocked)))
        if pg:
            cur.execute("ANALYZE jobs")
        for kind, types in (("any", None), ("one", ["pdf"])):
            from queuelog.server.store.jobs import claim_params
            params = claim_params(now, "plan", 1, 300, types)
            sql, args = store.jobs._claims[kind].bound(params)
            if pg:
                cur.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF) "
                            + sql, args)
            else:
                cur.execute("EXPLAIN QUERY PLAN " + sql, args)
            lines = [r[0] if pg else r[-1] for r in cur.fetchall()]
            out[kind] = lines
        cur.close()
        conn.connection.driver_connection.rollback()
    store.close()
    return out


def sub_flows(url: str, small_url: str, rounds: int, chains: int) -> dict[str, Any]:
    """Parts 2 and 3 on flow's code: every round's figures (ms)."""
    from queuelog.server.store.enqueue import Item  # noqa: F401 - flow's code only
    big, small = _store(url), _store(small_url)
    small.create_schema()
    out: dict[str, list[Any]] = {"chain": [], "fan_in": [], "fan_out": []}
    clock = time.perf_counter

    def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
        t0 = clock()
        got = fn()
        return got, (clock() - t0) * 1e3

    def drain(store: Any) -> None:  # nothing left pending by a round
        while got := store.claim_many(WORKER, 100, lease_seconds=300):
            store.complete_many(WORKER, [(j.id, j.attempt, None) for j in got])

    def plain(store: Any) -> dict[str, float]:
        t: dict[str, list[float]] = {"enqueue": [], "claim": [], "complete": []}
        for _ in range(2 * chains):
            t["enqueue"].append(timed(lambda: store.enqueue(_new()))[1])
        for _ in range(2 * chains):
            job, ms = timed(lambda: store.claim(WORKER, lease_seconds=300))
            assert not job.depends_on
            t["claim"].append(ms)
            t["complete"].append(timed(lambda: store.complete(job.id, WORKER, job.attempt,
                                                              '{"ok":true}'))[1])
        return {k: med(v) for k, v in t.items()}

    def step(store: Any, kind: str, t: dict[str, list[float]], role: str) -> None:
        job, ms = timed(lambda: store.claim(WORKER, lease_seconds=300, types=[kind]))
        assert bool(job.depends_on) == (role == "child"), role
        assert role != "child" or job.parents[0]["status"] == "completed"
        t[f"claim_{role}"].append(ms)
        t[f"complete_{role}"].append(timed(lambda: store.complete(
            job.id, WORKER, job.attempt, '{"ok":true}'))[1])

    def chain(store: Any) -> dict[str, float]:
        """Chains (type sync) and plain jobs (type pdf) taken turn by turn, job by job."""
        t: dict[str, list[float]] = {k: [] for k in (
            "enqueue_plain", "enqueue_parent", "enqueue_child", "claim_plain",
            "complete_plain", "claim_parent", "complete_parent", "claim_child",
            "complete_child")}
        parents = []
        for _ in range(chains):
            (job, _), ms = timed(lambda: store.enqueue(_new(type="sync")))
            parents.append(job.id)
            t["enqueue_parent"].append(ms)
            for _ in range(2):
                t["enqueue_plain"].append(timed(lambda: store.enqueue(_new(type="pdf")))[1])
        for pid in parents:
            (job, _), ms = timed(lambda: store.enqueue(_new(type="sync", depends_on=(pid,))))
            assert job.status == "blocked"
            t["enqueue_child"].append(ms)
        for role in ("parent", "child"):
            for i in range(chains):
                for kind, who in ((("pdf", "plain"), ("sync", role)) if i % 2 == 0 else
                                  (("sync", role), ("pdf", "plain"))):
                    step(store, kind, t, who)
        return {k: med(v) for k, v in t.items()}

    def fan_in(store: Any) -> dict[str, float]:
        got: dict[str, float] = {}
        for batch in (False, True):
            parents, _ = store.enqueue_many([_new(type="pdf") for _ in range(100)])
            (child, _), got["enqueue_child_100"] = timed(lambda: store.enqueue(
                _new(depends_on=tuple(p.id for p in parents))))
            held = store.claim_many(WORKER, 100, lease_seconds=300)
            assert len(held) == 100 and child.status == "blocked"
            if batch:
                _, got["complete_many_100"] = timed(lambda: store.complete_many(
                    WORKER, [(j.id, j.attempt, '{"ok":true}') for j in held]))
            else:
                firsts = [timed(lambda: store.complete(j.id, WORKER, j.attempt,
                                                       '{"ok":true}'))[1] for j in held[:-1]]
                got["complete_not_last"] = med(firsts)
                last = held[-1]
                _, got["complete_last"] = timed(lambda: store.complete(
                    last.id, WORKER, last.attempt, '{"ok":true}'))
            job, ms = timed(lambda: store.claim(WORKER, lease_seconds=300))
            assert job.id == child.id and len(job.parents) == 100
            got["claim_child_100" + ("_b" if batch else "")] = ms
            store.complete(job.id, WORKER, job.attempt, None)
        return got

    def fan_out(store: Any, n: int) -> dict[str, float]:
        (parent, _) = store.enqueue(_new())
        started = clock()
        for start in range(0, n, 500):
            store.enqueue_many([_new(depends_on=(parent.id,))
                                for _ in range(min(500, n - start))])
        enqueue = (clock() - started) * 1e3
        started = clock()  # the same number of plain jobs, as a reference (claimed below)
        for start in range(0, n, 500):
            store.enqueue_many([_new(type="sync") for _ in range(min(500, n - start))])
        enqueue_plain = (clock() - started) * 1e3
        while held := store.claim_many(WORKER, 500, lease_seconds=300, types=["sync"]):
            store.complete_many(WORKER, [(j.id, j.attempt, None) for j in held])
        job = store.claim(WORKER, lease_seconds=300)
        assert job.id == parent.id
        _, ms = timed(lambda: store.complete(job.id, WORKER, job.attempt, '{"ok":true}'))
        pending = store.claim_many(WORKER, n + 1, lease_seconds=300)
        assert len(pending) == n, len(pending)
        store.complete_many(WORKER, [(j.id, j.attempt, None) for j in pending])
        return {"enqueue_dependents": enqueue, "enqueue_plain": enqueue_plain, "complete": ms}

    for store in (big, small):  # warm
        drain(store)
        plain(store)
        chain(store)
    for r in range(rounds):
        c = chain(big)
        out["chain"].append({"chain": c, "plain": {k: c[f"{k}_plain"] for k in (
            "enqueue", "claim", "complete")}})
        out["fan_in"].append(fan_in(big))
        fo: dict[str, Any] = {}
        for label, store in ((("1M", big), ("empty", small)) if r % 2 == 0 else
                             (("empty", small), ("1M", big))):
            fo[label] = {n: fan_out(store, n) for n in (100, 1000)}
            fo[label]["plain_complete"] = plain(store)["complete"]
        out["fan_out"].append(fo)
        print(f"flows round {r + 1}", file=sys.stderr, flush=True)
    big.close()
    small.close()
    return out


# -- the report ----------------------------------------------------------------------------
def fmt_ms(x: float) -> str:
    """Milliseconds, two decimals."""
    return f"{x:.2f}"


def main() -> None:
    """Build or reuse the databases, run the four parts, print every round and the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cmd", nargs="?", default="run", help=argparse.SUPPRESS)
    p.add_argument("--backends", default="sqlite,postgresql")
    p.add_argument("--sqlite-dir", default="/tmp/bench_workflows")
    p.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432")
    p.add_argument("--jobs", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--ops", type=int, default=200, help="lifecycles per round and codebase")
    p.add_argument("--slices", type=int, default=10,
                   help="turns each codebase takes in a lifecycle round")
    p.add_argument("--chains", type=int, default=50, help="parent -> child chains per round")
    p.add_argument("--main-tree", default="/work/main")
    p.add_argument("--flow-tree", default=str(HERE))
    p.add_argument("--rebuild", action="store_true")
    p.add_argument("--skip", default="", help="parts to leave out: lifecycle,flows,plan")
    p.add_argument("--json", help="write every round's figures here")
    # the subprocesses' own
    p.add_argument("--tree", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--small-url", help=argparse.SUPPRESS)
    p.add_argument("--blocked", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.cmd != "run":
        sys.path.insert(0, a.tree)
        got = {"_build": lambda: sub_build(a.url, a.jobs),
               "_migrate": lambda: sub_migrate(a.url),
               "_lifecycle": lambda: sub_lifecycle(a.url),
               "_plan": lambda: sub_plan(a.url, a.blocked),
               "_flows": lambda: sub_flows(a.url, a.small_url, a.rounds, a.chains)}[a.cmd]()
        print(json.dumps(got))
        return
    skip = set(filter(None, a.skip.split(",")))
    commits = {t: subprocess.run(["git", "-C", t, "log", "-1", "--format=%h %s"],
                                 capture_output=True, text=True).stdout.strip()
               for t in (a.main_tree, a.flow_tree)}
    print(f"main: {a.main_tree} at {commits[a.main_tree]}")
    print(f"flow: {a.flow_tree} at {commits[a.flow_tree]}")
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    report: dict[str, Any] = {"commits": commits, "args": vars(a), "backends": {}}
    for name in a.backends.split(","):
        name = {"pg": "postgresql"}.get(name, name)
        be = Backend(name, a.sqlite_dir, a.pg_url)
        rep: dict[str, Any] = {}
        report["backends"][name] = rep
        info = None if a.rebuild else be.built(a.jobs)
        if info is None:
            print(f"[{name}] building {a.jobs:,} jobs ...", flush=True)
            info = build(be, a.jobs, a.main_tree, a.flow_tree)
            info["built_now"] = True
        rep["build"] = info
        print(f"[{name}] build: fill {info['fill_s']:.1f} s (jobs and attempts), vacuum "
              f"{info['vacuum_s']:.1f} s, copy {info['copy_s']:.1f} s, migration 0013 on the "
              f"copy {info['migrate_s']:.2f} s"
              + (" (built now)" if info.get("built_now") else " (kept)"),
              flush=True)
        if "lifecycle" not in skip:
            rounds = []
            for r in range(a.rounds):
                sides = ["main", "flow"] if r % 2 == 0 else ["flow", "main"]
                got = lifecycle_round(be, a.main_tree, a.flow_tree, a.ops, a.slices, sides[0])
                rounds.append(got)
                print(f"[{name}] lifecycle round {r + 1} ({sides[0]} first): main "
                      f"{got['main']['per_s']:.0f}/s, flow {got['flow']['per_s']:.0f}/s, "
                      f"flow/main {got['ratio']:.3f} (by the calls' p50s "
                      f"{got['ratio_p50']:.3f}, by this process's CPU {got['ratio_cpu']:.3f}: "
                      f"{got['main']['cpu_ms']:.2f} / {got['flow']['cpu_ms']:.2f} ms a job); "
                      "p50 ms enqueue/claim/complete main "
                      + "/".join(fmt_ms(got["main"][k]) for k in ("enqueue", "claim", "complete"))
                      + ", flow "
                      + "/".join(fmt_ms(got["flow"][k]) for k in ("enqueue", "claim", "complete")),
                      flush=True)
            rep["lifecycle"] = rounds
            print(f"[{name}] lifecycle medians: main "
                  f"{med([g['main']['per_s'] for g in rounds]):.0f}"
                  f"/s, flow {med([g['flow']['per_s'] for g in rounds]):.0f}/s, flow/main "
                  f"{med([g['ratio'] for g in rounds]):.3f} (rounds "
                  + ", ".join(f"{g['ratio']:.3f}" for g in rounds) + "); by the calls' p50s "
                  f"{med([g['ratio_p50'] for g in rounds]):.3f} (rounds "
                  + ", ".join(f"{g['ratio_p50']:.3f}" for g in rounds) + "); by the client's CPU "
                  f"{med([g['ratio_cpu'] for g in rounds]):.3f} (rounds "
                  + ", ".join(f"{g['ratio_cpu']:.3f}" for g in rounds) + ")", flush=True)
        if "flows" not in skip:
            be.create("small")
            flows = run_tree(a.flow_tree, "_flows", "--url", be.url("flow"), "--small-url",
                             be.url("small"), "--rounds", str(a.rounds), "--chains",
                             str(a.chains))
            be.drop("small")
            rep["flows"] = flows
            report_flows(name, flows)
        if "plan" not in skip:
            rep["plan"] = {"main": run_tree(a.main_tree, "_plan", "--url", be.url("main")),
                           "flow": run_tree(a.flow_tree, "_plan", "--url", be.url("flow"),
                                            "--blocked", "100000")}
            for side in ("main", "flow"):
                for kind, lines in rep["plan"][side].items():
                    print(f"[{name}] plan, {side}, claim of {kind} type"
                          + (" (100,000 blocked)" if side == "flow" else "") + ":")
                    print("\n".join("    " + line for line in lines), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))


def report_flows(name: str, flows: dict[str, Any]) -> None:
    """Print parts 2 and 3: each round and the medians."""
    chain = flows["chain"]
    for i, r in enumerate(chain):
        c, pl = r["chain"], r["plain"]
        job_c = (c["claim_parent"] + c["complete_parent"] + c["claim_child"]
                 + c["complete_child"]) / 2
        r["ratio"] = job_c / (pl["claim"] + pl["complete"])
        print(f"[{name}] chain round {i + 1}: ms plain claim {fmt_ms(pl['claim'])} complete "
              f"{fmt_ms(pl['complete'])} enqueue {fmt_ms(pl['enqueue'])}; parent claim "
              f"{fmt_ms(c['claim_parent'])} complete {fmt_ms(c['complete_parent'])}; child "
              f"enqueue {fmt_ms(c['enqueue_child'])} claim {fmt_ms(c['claim_child'])} complete "
              f"{fmt_ms(c['complete_child'])}; a chain's job / a plain job {r['ratio']:.2f}",
              flush=True)

    def m(side: str, key: str) -> float:
        return med([r[side][key] for r in chain])
    print(f"[{name}] chain medians (ms): plain claim {fmt_ms(m('plain', 'claim'))}, complete "
          f"{fmt_ms(m('plain', 'complete'))}, enqueue {fmt_ms(m('plain', 'enqueue'))}; "
          f"complete of a parent (releases 1) {fmt_ms(m('chain', 'complete_parent'))} "
          f"({m('chain', 'complete_parent') / m('plain', 'complete'):.2f}x); claim of a child "
          f"(its parent read) {fmt_ms(m('chain', 'claim_child'))} "
          f"({m('chain', 'claim_child') / m('plain', 'claim'):.2f}x); enqueue of a child "
          f"{fmt_ms(m('chain', 'enqueue_child'))} "
          f"({m('chain', 'enqueue_child') / m('plain', 'enqueue'):.2f}x); a chain's job / a "
          f"plain job {med([r['ratio'] for r in chain]):.2f}x", flush=True)
    fi = flows["fan_in"]
    for key in ("complete_not_last", "complete_last", "complete_many_100", "claim_child_100",
                "enqueue_child_100"):
        print(f"[{name}] fan-in of 100, {key}: median {fmt_ms(med([r[key] for r in fi]))} ms"
              f" (rounds " + ", ".join(fmt_ms(r[key]) for r in fi) + ")", flush=True)
    fo = flows["fan_out"]
    for table in ("1M", "empty"):
        for n in ("100", "1000"):
            xs = [r[table][n]["complete"] for r in fo]
            es = [r[table][n]["enqueue_dependents"] for r in fo]
            print(f"[{name}] fan-out, {table} table, {n} dependents: the parent's complete "
                  f"{fmt_ms(med(xs))} ms (rounds " + ", ".join(fmt_ms(x) for x in xs)
                  + f"); their enqueue {fmt_ms(med(es))} ms, as many plain jobs' "
                  f"{fmt_ms(med([r[table][n]['enqueue_plain'] for r in fo]))} ms", flush=True)
        print(f"[{name}] fan-out, {table} table: a plain complete "
              f"{fmt_ms(med([r[table]['plain_complete'] for r in fo]))} ms", flush=True)


if __name__ == "__main__":
    main()
