"""Wake-up latency: enqueue -> a waiting claim answered, and enqueue -> the runner's command
starts, per deployment; a delayed job's lateness; the CPU an idle server spends waiting.

    python bench/bench_latency.py [--samples 30] [--pg-url URL]

Rows (each a fresh gunicorn, gthread, 8 threads per worker; the claim waits on one server
while the enqueue goes to another where there are two):

- one process (``gunicorn -w 1``, what ``queuelog run`` is), SQLite;
- ``gunicorn -w 2 --reuse-port``, SQLite (the kernel spreads the connections, so the
  enqueue and the claim are often answered by different workers);
- two app servers (``-w 1`` each) on one PostgreSQL (``--pg-url``, else
  ``QUEUELOG_TEST_DATABASE_URL``; skipped without one).

Per row: claim p50/p99 (a claim with ``wait`` parked for 0.2-0.6 s, then an enqueue: the
time from sending the enqueue until the claim's answer arrives), runner p50/p99
(``queuelog work -- date +%s%N``: from sending the enqueue until the command's own clock
reading), the delayed job (``delay_seconds: 2``: how long after its ``run_at`` the waiting
claim got it, p50/max), and idle CPU (the servers' processes, with one claim waiting all
along, in CPU ms per second).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from queuelog.client import Client  # noqa: E402
from server_process import Server, make_keys  # noqa: E402

IDLE_SECONDS = 10
KIND = "email"  # the job type of the row being measured (run_row sets its own)


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of ``values``, in milliseconds."""
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def drain(worker: Client) -> None:
    """Claim whatever is pending, so that every sample's claim gets its own new job."""
    while worker.claim(types=[KIND], max_jobs=100):
        pass


def claim_samples(producer: Client, worker_url: str, token: str, n: int,
                  body: Callable[[], dict[str, Any]]) -> list[tuple[float, dict[str, Any]]]:
    """(seconds from sending the enqueue to the claim's answer, the job) per sample."""
    out = []
    for _ in range(n):
        got: dict[str, Any] = {}
        waiter = Client(worker_url, token)

        def poll() -> None:
            got["job"] = waiter.claim(types=[KIND], wait=10)
            got["at"] = time.perf_counter()

        thread = threading.Thread(target=poll)
        thread.start()
        time.sleep(random.uniform(0.2, 0.6))  # parked: found nothing, asleep
        sent = time.perf_counter()
        producer.enqueue(KIND, None, **body())
        thread.join()
        assert got["job"] is not None, "the waiting claim got nothing"
        out.append((got["at"] - sent, got["job"]))
    return out


def runner_samples(producer: Client, admin: Client, url: str, token: str, n: int) -> list[float]:
    """Seconds from sending an enqueue until the runner's command reads the clock."""
    env = {**os.environ, "QUEUELOG_TOKEN": token}
    runner = subprocess.Popen([sys.executable, "-m", "queuelog", "work", "--url", url,
                               "--types", KIND, "--", "date", "+%s%N"],
                              env=env, stderr=subprocess.DEVNULL)
    out = []
    try:
        time.sleep(2)  # started and long-polling
        for _ in range(n):
            time.sleep(random.uniform(0.2, 0.6))
            sent = time.time_ns()
            job = producer.enqueue(KIND)
            deadline = time.monotonic() + 10
            # The first look well after the command's start: a GET every 10 ms meanwhile
            # would take CPU from the path being measured (2 cores, 3 processes on it).
            time.sleep(0.1)
            while (got := admin.get(job["id"]))["status"] != "completed":
                assert time.monotonic() < deadline, got
                time.sleep(0.01)
            out.append((int(got["result"]["stdout"].strip()) - sent) / 1e9)
    finally:
        runner.terminate()
        runner.wait(timeout=40)
    return out


def cpu_seconds(servers: list[Server]) -> float:
    """User + system CPU of every process of the servers (masters and workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for server in servers:
        assert server.proc is not None
        pids = [server.proc.pid]
        with open(f"/proc/{server.proc.pid}/task/{server.proc.pid}/children") as fh:
            pids += [int(p) for p in fh.read().split()]
        for pid in pids:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / tick


def idle_cpu(servers: list[Server], worker_url: str, token: str) -> float:
    """CPU ms per second the servers spend while one claim waits (and nothing comes)."""
    stop = threading.Event()

    def poll() -> None:
        waiter = Client(worker_url, token)
        while not stop.is_set():
            waiter.claim(types=[KIND], wait=5)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    time.sleep(1)
    before = cpu_seconds(servers)
    time.sleep(IDLE_SECONDS)
    used = cpu_seconds(servers) - before
    stop.set()
    thread.join(timeout=10)
    return 1000 * used / IDLE_SECONDS


def run_row(name: str, url: str, folder: str, servers_args: list[tuple[int, tuple[str, ...]]],
            n: int) -> str:
    """Start the row's servers, measure, stop; return its Markdown table row."""
    tag = f"{random.randrange(10**6)}"
    keys = make_keys(url, {f"p{tag}": "producer", f"w{tag}": "worker", f"a{tag}": "admin"})
    token = {k[0]: v["Authorization"].split()[1] for k, v in keys.items()}
    # A job type of this run's own: a job left due later in a shared database by anyone
    # else (a test's backoff) cannot be the one a sample's claim gets.
    global KIND
    KIND = f"bench{tag}"
    env = {"QUEUELOG_JOB_TYPES": json.dumps({KIND: {}})}
    servers = [Server(url, os.path.join(folder, f"{name[:3]}{i}.log"), workers=w, threads=8,
                      args=args, env=env).start() for i, (w, args) in enumerate(servers_args)]
    try:
        # Enqueue on the last server, claim on the first (the same one in single rows).
        wurl = f"http://127.0.0.1:{servers[0].port}"
        purl = f"http://127.0.0.1:{servers[-1].port}"
        producer, admin = Client(purl, token["p"]), Client(purl, token["a"])
        drain(Client(wurl, token["w"]))
        claims = [t for t, _ in claim_samples(producer, wurl, token["w"], n, dict)]
        delayed = []
        for _, job in claim_samples(producer, wurl, token["w"], max(5, n // 3),
                                    lambda: {"delay_seconds": 2}):
            run_at = datetime.datetime.fromisoformat(job["run_at"].replace("Z", "+00:00"))
            delayed.append(job_claimed_late(job, run_at))
        runner = runner_samples(producer, admin, wurl, token["w"], n)
        cpu = idle_cpu(servers, wurl, token["w"])
    finally:
        for server in servers:
            server.stop()
    return (f"| {name} | {pct(claims, 50):.1f} | {pct(claims, 99):.1f} | "
            f"{pct(runner, 50):.1f} | {pct(runner, 99):.1f} | "
            f"{pct(delayed, 50):.1f} / {pct(delayed, 100):.1f} | {cpu:.1f} |")


def job_claimed_late(job: dict[str, Any], run_at: datetime.datetime) -> float:
    """Seconds between the job's run_at and its claim (claimed_at, the server's clock)."""
    claimed = datetime.datetime.fromisoformat(job["claimed_at"].replace("Z", "+00:00"))
    return (claimed - run_at).total_seconds()


def main() -> None:
    """Measure every row and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--pg-url", default=os.environ.get("QUEUELOG_TEST_DATABASE_URL"))
    parser.add_argument("--only-pg", action="store_true", help="the PostgreSQL row alone")
    opts = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        if not opts.only_pg:
            one = f"sqlite:///{folder}/one.sqlite3"
            rows.append(run_row("one process (`gunicorn -w 1`), SQLite", one, folder,
                                [(1, ())], opts.samples))
            two = f"sqlite:///{folder}/two.sqlite3"
            rows.append(run_row("`gunicorn -w 2 --reuse-port`, SQLite", two, folder,
                                [(2, ("--reuse-port",))], opts.samples))
        if opts.pg_url:
            rows.append(run_row("two app servers, one PostgreSQL", opts.pg_url, folder,
                                [(1, ()), (1, ())], opts.samples))
    print(f"{opts.samples} samples per row; milliseconds; idle CPU in CPU-ms per second\n")
    print("| setup | claim p50 | claim p99 | runner p50 | runner p99 | delayed p50 / max "
          "| idle CPU |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
