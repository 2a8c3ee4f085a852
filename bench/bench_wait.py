"""Outcome latency: a job's finish -> the answer of a ``GET /jobs/{id}?wait=30`` parked before it.

    python bench/bench_wait.py [--samples 200] [--pg-url URL] [--only-pg] [--out FILE]

Per sample: a job is enqueued and claimed, a waiting ``GET /jobs/{id}?wait=30`` is sent on
one connection and left parked for 0.1-0.3 s, then the worker completes the job on another.
The figure is the time from the complete's answer reaching the worker to the waiting GET's
answer reaching the waiter (both read in this one process, so one clock), p50 / p99; beside
it the same from sending the complete. A negative value means the waiter heard before the
worker did. The waiter and the completer are always in different server processes:

- SQLite, one ``gunicorn -w 2 --reuse-port``: the kernel spreads connections over the two
  workers, so the script opens connections until the waiter's and the worker's are held by
  different worker processes (read from ``/proc``: which pid holds the server's socket);
- PostgreSQL (``--pg-url``, else ``QUEUELOG_TEST_DATABASE_URL``; skipped without one): two
  app servers (``gunicorn -w 1 --reuse-port`` each) on one database, the wait on the first,
  the enqueue, claim and complete on the second.

Each row is a fresh set of servers with a job type of its own. ``--out`` also writes every
sample (JSON) for the results folder.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import sys
import tempfile
import threading
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "bench", "peers"))

from drv_http import server_pid_for, worker_pids  # noqa: E402
from server_process import Server, make_keys  # noqa: E402

PARK = (0.1, 0.3)  # seconds the GET waits before the complete is sent


class Conn:
    """One keep-alive connection with a token, pinned to the server process it landed on."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.http = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.http.connect()

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        """Send one request; return (status, decoded JSON or None)."""
        data = None if body is None else json.dumps(body).encode()
        self.http.request(method, path, body=data, headers=self.headers)
        resp = self.http.getresponse()
        raw = resp.read()
        return resp.status, json.loads(raw) if raw else None

    def pid(self, master: int) -> int | None:
        """The gunicorn worker process (a child of ``master``) holding this connection."""
        assert self.http.sock is not None
        local = self.http.sock.getsockname()[1]
        return server_pid_for(local, self.port, worker_pids(master))

    def close(self) -> None:
        """Close the connection."""
        self.http.close()


def pinned(port: int, token: str, master: int, avoid: int | None) -> tuple[Conn, int]:
    """A connection held by a worker process of ``master`` other than ``avoid``."""
    for _ in range(200):
        conn = Conn(port, token)
        conn.call("GET", "/healthz")  # the worker accepts it: now its socket is in /proc
        pid = conn.pid(master)
        if pid is not None and pid != avoid:
            return conn, pid
        conn.close()
    raise RuntimeError("no connection reached another worker process in 200 tries")


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of ``values`` (seconds), in milliseconds."""
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def one_sample(waiter: Conn, worker: Conn, producer: Conn, kind: str) -> dict[str, float]:
    """Enqueue, claim, park a waiting GET, complete; the sample's times in seconds."""
    status, job = producer.call("POST", "/jobs", {"type": kind, "payload": {}})
    assert status == 201, (status, job)
    status, held = worker.call("POST", "/jobs/claim", {"types": [kind]})
    assert status == 200 and held["id"] == job["id"], (status, held)
    got: dict[str, Any] = {}

    def wait() -> None:
        got["sent"] = time.perf_counter()
        got["status"], got["job"] = waiter.call("GET", f"/jobs/{job['id']}?wait=30")
        got["at"] = time.perf_counter()

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(random.uniform(*PARK))  # parked: the job is running, the GET asleep
    sent = time.perf_counter()
    status, done = worker.call("POST", f"/jobs/{job['id']}/complete",
                               {"attempt": held["attempt"], "result": {}})
    answered = time.perf_counter()
    thread.join(timeout=40)
    assert status == 200 and done["status"] == "completed", (status, done)
    assert got.get("status") == 200 and got["job"]["status"] == "completed", got
    assert got["at"] > sent, "the GET answered before the complete was sent: it was not parked"
    return {"from_answer": got["at"] - answered, "from_send": got["at"] - sent,
            "complete": answered - sent, "parked": sent - got["sent"]}


def run_row(name: str, url: str, folder: str, servers_args: list[tuple[int, tuple[str, ...]]],
            n: int) -> dict[str, Any]:
    """Start the row's servers, take ``n`` samples, stop; the row's figures and samples."""
    tag = f"{random.randrange(10**6)}"
    keys = make_keys(url, {f"p{tag}": "producer", f"w{tag}": "worker"})
    token = {k[0]: v["Authorization"].split()[1] for k, v in keys.items()}
    kind = f"wait{tag}"  # this run's own type: a shared database may hold others' jobs
    env = {"QUEUELOG_JOB_TYPES": json.dumps({kind: {}})}
    servers = [Server(url, os.path.join(folder, f"{tag}-{i}.log"), workers=w, threads=8,
                      args=args, env=env).start() for i, (w, args) in enumerate(servers_args)]
    conns: list[Conn] = []
    try:
        # The wait on the first server, the worker's calls on the last one; where there is
        # one server, on a worker process other than the waiter's.
        first, last = servers[0], servers[-1]
        assert first.proc is not None and last.proc is not None
        waiter, wpid = pinned(first.port, token["p"], first.proc.pid, None)
        worker, kpid = pinned(last.port, token["w"], last.proc.pid,
                              wpid if first is last else None)
        producer = Conn(last.port, token["p"])
        conns += [waiter, worker, producer]
        samples = [one_sample(waiter, worker, producer, kind) for _ in range(n)]
        # Still held by the same processes: the split held for every sample.
        assert waiter.pid(first.proc.pid) == wpid and worker.pid(last.proc.pid) == kpid
    finally:
        for conn in conns:
            conn.close()
        for server in servers:
            server.stop()
    return {"row": name, "waiter_pid": wpid, "worker_pid": kpid, "samples": samples}


def summary(row: dict[str, Any]) -> str:
    """The row's Markdown table line."""
    s = row["samples"]
    after = [x["from_answer"] for x in s]
    sent = [x["from_send"] for x in s]
    comp = [x["complete"] for x in s]
    return (f"| {row['row']} | {pct(after, 50):.1f} | {pct(after, 99):.1f} | "
            f"{pct(sent, 50):.1f} / {pct(sent, 99):.1f} | {pct(comp, 50):.1f} | "
            f"{1000 * min(after):.1f} / {1000 * max(after):.1f} | {len(s)} |")


def main() -> None:
    """Measure every row and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--pg-url", default=os.environ.get("QUEUELOG_TEST_DATABASE_URL"))
    parser.add_argument("--only-pg", action="store_true", help="the PostgreSQL row alone")
    parser.add_argument("--out", help="write every sample here (JSON)")
    opts = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        if not opts.only_pg:
            rows.append(run_row("SQLite, `gunicorn -w 2 --reuse-port`, other worker process",
                                f"sqlite:///{folder}/wait.sqlite3", folder,
                                [(2, ("--reuse-port",))], opts.samples))
        if opts.pg_url:
            rows.append(run_row("PostgreSQL, two app servers (`-w 1` each)", opts.pg_url,
                                folder, [(1, ("--reuse-port",)), (1, ("--reuse-port",))],
                                opts.samples))
    print(f"{opts.samples} samples per row; milliseconds; load average at the end "
          f"{os.getloadavg()[0]:.2f}\n")
    print("| setup | after the complete's answer p50 | p99 | after its send p50 / p99 "
          "| complete p50 | min / max | n |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(summary(row) for row in rows))
    if opts.out:
        with open(opts.out, "w") as fh:
            json.dump({"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "loadavg": os.getloadavg(), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
