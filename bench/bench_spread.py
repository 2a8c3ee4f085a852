"""Batch enqueues under gunicorn -w 2, by how the clients' connections spread over the workers.

    python bench/bench_spread.py                      # SQLite FULL in a temp dir, 6 rounds
    python bench/bench_spread.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/bench
    python bench/bench_spread.py --single             # one job per request instead
    python bench/bench_spread.py --single --trace-turns   # and SQLite's write turns traced

Each round starts a fresh server (``gunicorn -w 2 -k gthread --threads 8 --reuse-port``, as
bench/peers does), then 4 producer processes, one keep-alive connection each, send
``--requests`` enqueues each (batches of 100 unless ``--single``). It prints jobs/s, the
workers' CPU per request (from ``/proc``) and the spread: how many connections each worker
holds (2+2, 3+1 or 4+0, the kernel's pick with ``--reuse-port``). A rate is comparable only
with rates of the same spread. The PostgreSQL database is emptied first. ``--trace-turns``
(SQLite) adds a line a round: how long each write waited for the lock between processes and
how long it held it (bench/turns_trace.py).
"""
from __future__ import annotations

import argparse
import glob
import http.client
import json
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "peers"))
import drv_http  # noqa: E402  (the peers' helpers: worker pids, which worker holds a socket)

PRODUCERS = 4


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def producer(port: int, token: str, pids: list[int], requests: int, single: bool,
             start: Any, out: Any) -> None:
    """Send ``requests`` enqueues on one connection; report the worker that served it."""
    conn = http.client.HTTPConnection("127.0.0.1", port)
    headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
    conn.request("GET", "/healthz")
    conn.getresponse().read()
    served_by = drv_http.server_pid_for(conn.sock.getsockname()[1], port, pids)
    start.wait()
    for n in range(requests):
        if single:
            path, body = "/jobs", {"type": "email", "payload": {"n": n}}
        else:
            path, body = "/jobs/batch", {"jobs": [{"type": "email", "payload": {"n": i}}
                                                  for i in range(100)]}
        conn.request("POST", path, json.dumps(body).encode(), headers)
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 201, resp.status
    out.put(served_by)


def turns_summary(folder: str, seconds: float) -> str:
    """bench/turns_trace.py's records in one line: the turns' wait and hold (us, p50 / p90 /
    mean), the holder's CPU, and the share of ``seconds`` the lock was held."""
    rows = []
    for path in glob.glob(f"{folder}/turns-*.txt"):
        with open(path) as fh:
            rows.extend(tuple(map(float, line.split())) for line in fh)
    if not rows:
        return "no turns traced"

    def stat(values: list[float]) -> str:
        values = sorted(values)
        return (f"{values[len(values) // 2] * 1e6:.0f} / "
                f"{values[len(values) * 9 // 10] * 1e6:.0f} / {statistics.mean(values) * 1e6:.0f}")
    cpu = [c for _, _, c in rows if c >= 0]
    held = sum(h for _, h, _ in rows)
    return (f"{len(rows)} turns; wait {stat([w for w, _, _ in rows])}, held "
            f"{stat([h for _, h, _ in rows])}, the holder's CPU {stat(cpu) if cpu else '-'} us"
            f" (p50 / p90 / mean); held {held / seconds:.0%} of the time")


def one_round(url: str, requests: int, single: bool, trace: str | None = None) -> str:
    """Start a server, run the producers, stop it; one line of results."""
    env = {**os.environ, "QUEUELOG_DATABASE_URL": url, "QUEUELOG_SECRET_KEY": "bench",
           "QUEUELOG_BOOTSTRAP_ADMIN": "false", "QUEUELOG_SQLITE_SYNCHRONOUS": "FULL"}
    made = subprocess.run([sys.executable, "-m", "queuelog", "keys", "create", "--name",
                           f"p{time.time_ns()}", "--role", "producer"], env=env,
                          capture_output=True, text=True)
    if made.returncode:
        raise SystemExit(f"queuelog keys create failed: {made.stderr.strip()}")
    token = made.stdout.strip().splitlines()[-1]
    port = free_port()
    config = ["-c", os.path.join("bench", "turns_trace.py")] if trace else []
    if trace:
        env["TURNS_TRACE_DIR"] = trace
    server = subprocess.Popen([sys.executable, "-m", "gunicorn", "-w", "2", "-k", "gthread",
                               "--threads", "8", "--reuse-port", "-b", f"127.0.0.1:{port}",
                               *config, "app:app"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pids: list[int] = []
        for _ in range(200):
            pids = drv_http.worker_pids(server.pid)
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200 and len(pids) == 2:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        time.sleep(0.5)
        start, out = mp.Event(), mp.Queue()
        procs = [mp.Process(target=producer, args=(port, token, pids, requests, single,
                                                   start, out)) for _ in range(PRODUCERS)]
        for p in procs:
            p.start()
        time.sleep(0.5)
        cpu0, t0 = sum(cpu_seconds(p) for p in pids), time.perf_counter()
        start.set()
        served = [out.get(timeout=300) for _ in procs]
        wall, cpu1 = time.perf_counter() - t0, sum(cpu_seconds(p) for p in pids)
        for p in procs:
            p.join()
    finally:
        server.terminate()
        server.wait(timeout=30)
    n = requests * PRODUCERS
    spread = "+".join(str(c) for c in sorted((served.count(p) for p in pids), reverse=True))
    line = (f"{n * (1 if single else 100) / wall:8.0f} jobs/s  server CPU "
            f"{(cpu1 - cpu0) / n * 1e3:5.2f} ms/request  spread {spread}")
    if trace:
        line += "\n    " + turns_summary(trace, wall)
    return line


def main() -> None:
    """Run the rounds; print one line each."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--database-url")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--requests", type=int, default=100, help="per producer and round")
    ap.add_argument("--single", action="store_true")
    ap.add_argument("--trace-turns", action="store_true",
                    help="SQLite: trace the write turns (bench/turns_trace.py)")
    args = ap.parse_args()
    for _ in range(args.rounds):
        folder = None if args.database_url else tempfile.mkdtemp(prefix="ql-spread-")
        url = args.database_url or f"sqlite:///{folder}/q.db"
        if url.startswith("postgresql"):
            from sqlalchemy import create_engine, text
            from queuelog import create_app
            create_app({"DATABASE_URL": url, "SECRET_KEY": "bench", "BOOTSTRAP_ADMIN": False},
                       serving=False)  # the schema
            with create_engine(url).begin() as conn:
                conn.execute(text("TRUNCATE jobs, job_attempts, api_keys, job_counts, "
                                  "job_count_deltas CASCADE"))
        trace = tempfile.mkdtemp(prefix="ql-turns-") if args.trace_turns else None
        try:
            print(one_round(url, args.requests, args.single, trace), flush=True)
        finally:
            # The database, its WAL and its wake-up folder; the turns' records.
            for made in (folder, trace):
                if made is not None:
                    shutil.rmtree(made, ignore_errors=True)


if __name__ == "__main__":
    main()
