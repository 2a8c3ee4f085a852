"""queuelog over HTTP, measured from outside beside a no-op Flask route on the same gunicorn.

    python bench/bench_http.py --quick                  # SQLite, about a minute
    python bench/bench_http.py                          # SQLite, full (several minutes)
    python bench/bench_http.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/queuelog_bench

Both servers run ``gunicorn -w 2 -k gthread --threads 8 --reuse-port`` on 127.0.0.1; load
comes from ``wrk`` (16 connections) for single calls, and from Python threads for batches and
the drain. Rounds alternate between queuelog and the no-op route, so drift on a busy machine
hits both; each figure is the median of the rounds, and the single calls are reported as a
ratio to the no-op route's req/s, which is what to compare between machines and runs.

What it prints: single calls (enqueue, claim, complete) as req/s and ratio; the batch
lifecycle (enqueue 100, claim 100, complete 100 per request) as jobs/s and ratio; claim at
10k vs 1M (100k with --quick) pending; on PostgreSQL a drain by 4 workers (claim+complete)
with its last 10 s over its first 10 s; the peak RSS of a gunicorn worker. The PostgreSQL
database must be one for benchmarks: its queuelog tables are emptied.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

GUNICORN = ["-w", "2", "-k", "gthread", "--threads", "8", "--reuse-port"]
CONNECTIONS = 16
NOOP_APP = "bench.noop_app:app"


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Gunicorn:
    """gunicorn serving ``target`` on 127.0.0.1, in its own process group."""

    def __init__(self, target: str, env: dict[str, str], log: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", *GUNICORN, "-b", f"127.0.0.1:{self.port}",
             "--graceful-timeout", "2", target],
            cwd=ROOT, env={**os.environ, **env}, stdout=open(log, "ab"),
            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                status, _ = request(self.port, "GET", "/healthz", None, {})
                if status in (200, 404):
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"gunicorn {target} did not start; see {log}")

    def worker_pids(self) -> list[int]:
        """The worker processes (children of the master)."""
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)],
                             capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def peak_rss_mb(self) -> float:
        """The largest peak resident set (VmHWM) among the workers, in MiB."""
        peaks = []
        for pid in self.worker_pids():
            try:
                with open(f"/proc/{pid}/status") as fh:
                    peaks += [int(line.split()[1]) / 1024 for line in fh
                              if line.startswith("VmHWM:")]
            except OSError:
                pass
        return max(peaks, default=0.0)

    def stop(self) -> None:
        """SIGTERM the group, then SIGKILL what is left."""
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# Seconds each request through ``request`` took, by route (ids as {id}): the batch
# lifecycle's per-call latency, printed as p50 / p99 / max.
LATENCIES: dict[str, list[float]] = {}


def request(port: int, method: str, path: str, body: Any, headers: dict[str, str],
            conn: http.client.HTTPConnection | None = None) -> tuple[int, Any]:
    """One HTTP request; the status and the decoded JSON body (None when empty)."""
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    route = f"{method} {re.sub(r'/[0-9]+', '/{id}', path)}"
    if isinstance(body, dict) and "max_jobs" in body:
        route += f" max_jobs={body['max_jobs']}"
    start = time.perf_counter()
    try:
        data = None if body is None else json.dumps(body)
        conn.request(method, path, body=data, headers={"Content-Type": "application/json",
                                                       **headers})
        resp = conn.getresponse()
        raw = resp.read()
        LATENCIES.setdefault(route, []).append(time.perf_counter() - start)
        return resp.status, (json.loads(raw) if raw else None)
    finally:
        if own:
            conn.close()


# -- wrk ----------------------------------------------------------------------------------
WRK_SCRIPT = r"""
local ids, n, i = {}, 0, 0
local path0, body0, token, mode = "%(path)s", '%(body)s', "%(token)s", "%(mode)s"
function setup(thread) thread:set("slot", %(slot)s); %(slot)s = %(slot)s + 1 end
function init(args)
  if mode == "complete" then
    for id in string.gmatch(io.open("%(ids)s"):read("*a"), "%%d+") do
      n = n + 1
      if n %% %(threads)d == slot then ids[#ids + 1] = id end
    end
  end
end
local held, held_attempt = nil, nil  -- lifecycle: the job this connection holds
function response(status, headers, body)
  if mode ~= "lifecycle" then return end
  if held ~= nil then held = nil return end  -- the complete's answer
  if status == 200 then
    held = string.match(body, '"id":%%s*(%%d+)')
    held_attempt = string.match(body, '"attempt":%%s*(%%d+)')
  end
end
function request()
  local headers = {["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json"}
  if mode == "lifecycle" and held ~= nil then
    return wrk.format("POST", "/jobs/" .. held .. "/complete", headers,
                      '{"attempt": ' .. held_attempt .. '}')
  end
  if mode == "complete" then
    i = i + 1
    local id = ids[i]
    if id == nil then id = "999999999" end
    return wrk.format("POST", "/jobs/" .. id .. "/complete", headers, body0)
  end
  return wrk.format("POST", path0, headers, body0)
end
"""


def wrk(port: int, seconds: float, *, path: str = "/noop", body: str = "{}", token: str = "",
        mode: str = "plain", ids_file: str = "", threads: int = 2) -> float:
    """Requests per second that wrk measured (only 2xx, else the run is refused)."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as fh:
        fh.write(WRK_SCRIPT % {"path": path, "body": body, "token": token, "mode": mode,
                               "ids": ids_file, "threads": threads, "slot": "slot_counter"})
        script = fh.name
    with open(script, "a") as fh:
        fh.write("\nslot_counter = 0\n")
    try:
        out = subprocess.run(["wrk", "-t", str(threads), "-c", str(CONNECTIONS),
                              "-d", f"{max(1, round(seconds))}s", "-s", script,
                              f"http://127.0.0.1:{port}"],
                             capture_output=True, text=True, timeout=seconds + 60).stdout
    finally:
        os.unlink(script)
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if bad and mode != "complete":
        raise RuntimeError(f"{bad.group(1)} non-2xx answers on {path}:\n{out}")
    return rate


# -- the database -------------------------------------------------------------------------
def completed(url: str) -> int:
    """How many jobs are completed."""
    from sqlalchemy import create_engine, text
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM jobs WHERE status = "
                                         "'completed'")).scalar_one())
    finally:
        engine.dispose()


def fill(url: str, n: int, status: str = "pending", worker: str = "bench-worker") -> list[int]:
    """Insert ``n`` jobs with direct SQL (fast); return their ids when they are running."""
    from sqlalchemy import create_engine, text
    engine = create_engine(url)
    now = time.time_ns() // 1000
    cols = ("type, payload, priority, status, attempt, retry_count, max_retries, producer, "
            "worker_id, run_at, claimed_at, lease_expires_at, created_at, updated_at")
    running = status == "running"
    values = (f"'email', '{{\"n\": 1}}', (g % 4) * 10, '{status}', {1 if running else 0}, 0, 3, "
              f"'bench', {':w' if running else 'NULL'}, :now - g, "
              f"{':now' if running else 'NULL'}, {':far' if running else 'NULL'}, :now, :now")
    if engine.dialect.name == "postgresql":
        sql = f"INSERT INTO jobs ({cols}) SELECT {values} FROM generate_series(1, :n) AS g"
    else:
        sql = (f"WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < :n) "
               f"INSERT INTO jobs ({cols}) SELECT {values} FROM s")
    with engine.begin() as conn:
        first = conn.execute(text("SELECT coalesce(max(id), 0) FROM jobs")).scalar_one()
        conn.execute(text(sql), {"n": n, "now": now, "w": worker, "far": now + 3600 * 10**6})
        ids: list[int] = []
        if running:
            ids = list(conn.execute(text("SELECT id FROM jobs WHERE id > :f AND status = "
                                         "'running' ORDER BY id"), {"f": first}).scalars())
            conn.execute(text("INSERT INTO job_attempts (job_id, attempt, worker_id, "
                              "started_at, outcome) SELECT id, 1, :w, :now, 'running' FROM jobs "
                              "WHERE id > :f AND status = 'running'"),
                         {"w": worker, "now": now, "f": first})
    with engine.connect() as conn:
        # Settle the fill before measuring: PostgreSQL's statistics and visibility map;
        # SQLite's WAL, which would otherwise be checkpointed during the next round.
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
            "VACUUM ANALYZE jobs" if engine.dialect.name == "postgresql"
            else "PRAGMA wal_checkpoint(TRUNCATE)")
    engine.dispose()
    return ids


def reset(url: str) -> None:
    """Empty queuelog's tables (PostgreSQL) so every run starts alike; a new database gets them."""
    from sqlalchemy import create_engine, text

    from queuelog.server.store import Store
    store = Store(url)
    store.create_schema()
    store.close()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE jobs, job_attempts RESTART IDENTITY CASCADE"))
    engine.dispose()


def pending(url: str) -> int:
    """How many jobs are pending."""
    from sqlalchemy import create_engine, text
    engine = create_engine(url)
    with engine.connect() as conn:
        got = conn.execute(text("SELECT count(*) FROM jobs WHERE status = 'pending'")).scalar_one()
    engine.dispose()
    return int(got)


class Queuelog:
    """A database with its schema and keys, and gunicorn serving queuelog on it."""

    def __init__(self, url: str, workdir: str, name: str,
                 env: dict[str, str] | None = None) -> None:
        from queuelog.server.store import Store
        self.url = url
        store = Store(url)
        store.create_schema()
        self.tokens = {}
        for role in ("producer", "worker"):
            _, self.tokens[role] = store.accounts.create_key(
                f"bench-{role}-{time.time_ns()}", role, max_priority=30)
        self.worker_name = next(k.name for k in store.accounts.list_keys()
                                if k.role == "worker" and k.revoked_at is None
                                and k.token_hash == __import__("hashlib").sha256(
                                    self.tokens["worker"].encode()).hexdigest())
        store.close()
        self.server = Gunicorn("app:app", {
            "QUEUELOG_DATABASE_URL": url, "QUEUELOG_SECRET_KEY": "bench",
            "QUEUELOG_BOOTSTRAP_ADMIN": "false", **(env or {})},
            os.path.join(workdir, f"{name}.log"))

    def auth(self, role: str) -> dict[str, str]:
        """The Authorization header of a role's key."""
        return {"Authorization": f"Bearer {self.tokens[role]}"}


# -- the measurements ---------------------------------------------------------------------
def interleaved(rounds: int, sides: dict[str, Callable[[], float]]) -> dict[str, float]:
    """Each side once per round, in turn; the median of each side's rounds."""
    got: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, run in sides.items():
            got[name].append(run())
    return {name: statistics.median(v) for name, v in got.items()}


def single_calls(q: Queuelog, noop: Gunicorn, seconds: float, rounds: int,
                 workdir: str) -> dict[str, float]:
    """enqueue, claim and complete req/s (wrk, 16 connections), each beside the no-op."""
    port = q.server.port
    enqueue_body = '{"type": "email", "payload": {"to": "a@example.com"}, "priority": "high"}'

    def enqueue() -> float:
        return wrk(port, seconds, path="/jobs", body=enqueue_body, token=q.tokens["producer"])

    def claim() -> float:
        fill(q.url, int(seconds * 4000))  # more than a round can claim: never a 204
        return wrk(port, seconds, path="/jobs/claim", body="{}", token=q.tokens["worker"])

    def complete() -> float:
        ids = fill(q.url, int(seconds * 4000), status="running", worker=q.worker_name)
        ids_file = os.path.join(workdir, "ids.txt")
        with open(ids_file, "w") as fh:
            fh.write("\n".join(map(str, ids)))
        return wrk(port, seconds, body='{"attempt": 1}', token=q.tokens["worker"],
                   mode="complete", ids_file=ids_file)

    def noop_rate() -> float:
        return wrk(noop.port, seconds)

    return interleaved(rounds, {"noop": noop_rate, "enqueue": enqueue, "claim": claim,
                                "complete": complete})


def _rate(run: Callable[[int], None], done: list[int], seconds: float) -> float:
    """Run ``run(slot)`` in a thread per slot of ``done``; the jobs they did per second."""
    began = time.monotonic()
    workers = [threading.Thread(target=run, args=(n,)) for n in range(len(done))]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=seconds + 120)
    return sum(done) / (time.monotonic() - began)


def batch_lifecycle(q: Queuelog, seconds: float, threads: int = 4, size: int = 100) -> float:
    """Jobs per second through enqueue 100 / claim 100 / complete 100, from ``threads``."""
    done = [0] * threads
    stop = time.monotonic() + seconds

    def run(slot: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", q.server.port, timeout=60)
        items = [{"type": "email", "payload": {"n": n}} for n in range(size)]
        while time.monotonic() < stop:
            status, _ = request(q.server.port, "POST", "/jobs/batch", {"jobs": items},
                                q.auth("producer"), conn)
            assert status == 201, status
            status, got = request(q.server.port, "POST", "/jobs/claim", {"max_jobs": size},
                                  q.auth("worker"), conn)
            assert status == 200, status
            jobs = [{"id": j["id"], "attempt": j["attempt"]} for j in got["jobs"]]
            if jobs:
                status, _ = request(q.server.port, "POST", "/jobs/complete", {"jobs": jobs},
                                    q.auth("worker"), conn)
                assert status == 200, status
                done[slot] += len(jobs)
        conn.close()

    return _rate(run, done, seconds)


# Limits that never bind (so both servers claim the same jobs), but that every claim pays
# for: its type's limiter row read, locked and written back, its running jobs counted
# (issue 16's cost bound: 1.2x). Claims alone pile up running jobs (~20,000 in a round),
# so their cap must be higher still, and the count walks them all; claim-and-complete
# keeps 16 running at most, under a cap a team would set.
def _limits(concurrency: int) -> dict[str, str]:
    return {"QUEUELOG_JOB_TYPES": json.dumps({t: {"concurrency": concurrency,
                                                  "rate": "1000000/s", "burst": 1_000_000}
                                              for t in ("email", "pdf", "sync")})}


LIMITS, LIMITS_LIFECYCLE = _limits(100_000), _limits(1000)


def batch_claims(q: Queuelog, seconds: float, threads: int = 4, size: int = 100) -> float:
    """Jobs per second through claim 100 / complete 100 from ``threads``, on a full queue."""
    fill(q.url, int(seconds * 8000))
    done = [0] * threads
    stop = time.monotonic() + seconds

    def run(slot: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", q.server.port, timeout=60)
        while time.monotonic() < stop:
            status, got = request(q.server.port, "POST", "/jobs/claim", {"max_jobs": size},
                                  q.auth("worker"), conn)
            jobs = [{"id": j["id"], "attempt": j["attempt"]} for j in got["jobs"]]
            if not jobs:
                break
            request(q.server.port, "POST", "/jobs/complete", {"jobs": jobs}, q.auth("worker"),
                    conn)
            done[slot] += len(jobs)
        conn.close()

    return _rate(run, done, seconds)


def limits_cost(workdir: str, pg: str | None, seconds: float, rounds: int
                ) -> list[tuple[str, str, str]]:
    """Single claims (wrk: claims alone, and claim-then-complete per connection) and batch
    claims with limits in force beside none, interleaved (SQLite: two servers; PostgreSQL:
    one database, so one server at a time)."""
    rates: dict[str, list[float]] = {}
    kinds = {"single claims": ("claim", LIMITS), "single claim + complete": ("lifecycle",
             LIMITS_LIFECYCLE), "batch claim + complete": ("batch", LIMITS_LIFECYCLE)}
    for n in range(rounds):
        for kind, (how, limits) in kinds.items():
            for name, env in (("none", None), ("limits", limits)):
                if pg:
                    reset(pg)
                q = Queuelog(pg or f"sqlite:///{workdir}/limits-{name}-{how}-{n}.sqlite3",
                             workdir, f"limits-{name}", env)
                try:
                    if how == "batch":
                        rate = batch_claims(q, seconds)
                    else:
                        fill(q.url, int(seconds * 4000))
                        rate = wrk(q.server.port, seconds, path="/jobs/claim", body="{}",
                                   token=q.tokens["worker"], mode=how,
                                   threads=CONNECTIONS if how == "lifecycle" else 2)
                        if how == "lifecycle" and completed(q.url) < rate * seconds / 4:
                            raise RuntimeError("claim + complete: the completes did not land")
                    rates.setdefault(f"{name} {kind}", []).append(rate)
                finally:
                    q.server.stop()
    med = {k: statistics.median(v) for k, v in rates.items()}
    return [(f"limits in force, {kind}",
             f"{med['limits ' + kind]:,.0f} vs {med['none ' + kind]:,.0f} "
             f"{'jobs' if kind.startswith('batch') else 'req'}/s",
             f"{med['none ' + kind] / med['limits ' + kind]:.2f}x the cost")
            for kind in kinds]


def drain(q: Queuelog, seconds: float, threads: int = 4) -> tuple[float, float, int]:
    """4 workers claim+complete single jobs for ``seconds``: (first 10 s, last 10 s) rates."""
    stamps: list[float] = []
    lock = threading.Lock()
    began = time.monotonic()
    stop = began + seconds

    def run() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", q.server.port, timeout=60)
        while time.monotonic() < stop:
            status, job = request(q.server.port, "POST", "/jobs/claim", {}, q.auth("worker"),
                                  conn)
            if status != 200:
                continue
            status, _ = request(q.server.port, "POST", f"/jobs/{job['id']}/complete",
                                {"attempt": job["attempt"]}, q.auth("worker"), conn)
            if status == 200:
                with lock:
                    stamps.append(time.monotonic() - began)
        conn.close()

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=seconds + 60)
    window = min(10.0, seconds / 3)
    first = sum(1 for s in stamps if s < window) / window
    last = sum(1 for s in stamps if s >= seconds - window) / window
    return first, last, len(stamps)


def main() -> None:
    """Run every measurement and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="PostgreSQL for benchmarks (emptied); "
                                               "default: SQLite files in a temp folder")
    parser.add_argument("--quick", action="store_true", help="about a minute")
    parser.add_argument("--seconds", type=float, help="per wrk round")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--large", type=int, help="the big backlog (default 1M; 100k quick)")
    parser.add_argument("--limits-only", action="store_true",
                        help="only the cost of flow control on claims (issue 16)")
    args = parser.parse_args()
    seconds = args.seconds or (2 if args.quick else 5)
    rounds = args.rounds or (2 if args.quick else 3)
    large = args.large or (100_000 if args.quick else 1_000_000)
    workdir = tempfile.mkdtemp(prefix="queuelog-bench-http-")
    pg = args.database_url
    servers: list[Gunicorn] = []
    results: list[tuple[str, str, str]] = []
    try:
        noop = Gunicorn(NOOP_APP, {}, os.path.join(workdir, "noop.log"))
        servers.append(noop)
        if pg:
            reset(pg)
        if args.limits_only:
            results += limits_cost(workdir, pg, seconds, rounds)
            return _print(results, rounds, seconds, pg)
        url = pg or f"sqlite:///{workdir}/small.sqlite3"
        q = Queuelog(url, workdir, "queuelog")
        servers.append(q.server)
        single = single_calls(q, noop, seconds, rounds, workdir)
        for call in ("enqueue", "claim", "complete"):
            results.append((f"{call} (single)", f"{single[call]:,.0f} req/s",
                            f"{single[call] / single['noop']:.2f}"))
        results.append(("no-op Flask route", f"{single['noop']:,.0f} req/s", "1.00"))
        lifecycle = statistics.median(batch_lifecycle(q, seconds * 2) for _ in range(rounds))
        results.append(("batch lifecycle (100 per request)", f"{lifecycle:,.0f} jobs/s",
                        f"{lifecycle / single['noop']:.2f}"))
        # Claim at 10k and at the large backlog: two servers, rounds alternating.
        q.server.stop()
        servers.remove(q.server)
        if pg:
            reset(pg)
        small_url = pg or f"sqlite:///{workdir}/claim-small.sqlite3"
        claims = {}
        for label, size, db in (("10k", 10_000, "claim-small"), ("large", large, "claim-large")):
            if pg:
                reset(pg)
            u = pg or f"sqlite:///{workdir}/{db}.sqlite3"
            qq = Queuelog(u, workdir, db)
            fill(u, size)
            servers.append(qq.server)
            claims[label] = qq
            if pg:  # one PostgreSQL database: measure this size now, before the next fill
                claims[label + "_rate"] = statistics.median(
                    wrk(qq.server.port, seconds, path="/jobs/claim", body="{}",
                        token=qq.tokens["worker"]) for _ in range(rounds))
                qq.server.stop()
                servers.remove(qq.server)
        del small_url
        if pg:
            small, big = claims["10k_rate"], claims["large_rate"]
        else:
            rates = interleaved(rounds, {
                name: (lambda qq=claims[name]: wrk(qq.server.port, seconds, path="/jobs/claim",
                                                   body="{}", token=qq.tokens["worker"]))
                for name in ("10k", "large")})
            small, big = rates["10k"], rates["large"]
        results.append(("claim, 10k pending", f"{small:,.0f} req/s", ""))
        results.append((f"claim, {large:,} pending", f"{big:,.0f} req/s",
                        f"{small / big:.2f}x the cost at 10k"))
        peak = max(s.peak_rss_mb() for s in servers if s is not noop) if len(servers) > 1 \
            else q.server.peak_rss_mb()
        if pg:
            reset(pg)
            dq = Queuelog(pg, workdir, "drain")
            servers.append(dq.server)
            span = 20.0 if args.quick else 60.0
            fill(pg, int(span * 1500))
            first, last, total = drain(dq, span)
            results.append((f"drain {span:.0f} s, 4 workers: first / last "
                            f"{min(10.0, span / 3):.0f} s", f"{first:,.0f} / {last:,.0f} jobs/s",
                            f"{last / first:.2f}"))
            peak = max(peak, dq.server.peak_rss_mb())
        results.append(("peak RSS of a gunicorn worker", f"{peak:.0f} MiB", ""))
        results += limits_cost(workdir, pg, seconds, rounds)
    finally:
        for s in servers:
            s.stop()
    _print(results, rounds, seconds, pg)


def _print(results: list[tuple[str, str, str]], rounds: int, seconds: float,
           pg: str | None) -> None:
    """The table, and the per-call latencies of the Python clients."""
    backend = "PostgreSQL" if pg else "SQLite (SYNCHRONOUS=FULL)"
    print(f"\nqueuelog over HTTP, {backend}; gunicorn {' '.join(GUNICORN)}; "
          f"wrk {CONNECTIONS} connections; {rounds} round(s) of {seconds:g} s, medians")
    print("| measurement | rate | ratio |\n| --- | --- | --- |")
    for name, rate, ratio in results:
        print(f"| {name} | {rate} | {ratio} |")
    print("\nper call (Python clients: the batch lifecycle and the drain), ms")
    print("| route | calls | p50 | p99 | max |\n| --- | --- | --- | --- | --- |")
    for route, took in sorted(LATENCIES.items()):
        if len(took) >= 20:  # set-up calls (keys, fills) are not a distribution
            ordered = sorted(took)
            p50, p99 = (ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in (.5, .99))
            print(f"| {route} | {len(took)} | {p50 * 1e3:.1f} | {p99 * 1e3:.1f} | "
                  f"{ordered[-1] * 1e3:.1f} |")


if __name__ == "__main__":
    main()
