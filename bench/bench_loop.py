"""A worker's loop: one job's complete and the next claim as two requests, or as one.

    python bench/bench_loop.py [--jobs 300] [--rounds 2] [--pg-url URL]

One worker, one keep-alive connection, sequential, against ``gunicorn -w 1`` (gthread, 8
threads): per job either ``POST /jobs/{id}/complete`` then ``POST /jobs/claim`` (two
requests), or ``POST /jobs/{id}/complete`` with ``"next": {...}`` (one request, the claim
made after the finish commits). The two forms alternate job by job in one run, so the
machine's noise falls on both alike; the figure is the median time per job of each and their
ratio, per backend (SQLite FULL in a temporary folder; PostgreSQL with ``--pg-url``, else
``QUEUELOG_TEST_DATABASE_URL``), a fresh server each round.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_wait import Conn  # noqa: E402
from server_process import Server, make_keys  # noqa: E402


def backends(folder: str, stem: str, pg_url: str | None) -> list[tuple[str, str]]:
    """A round's backends by name and URL: SQLite FULL in ``folder`` (a new file named
    ``stem``), then PostgreSQL when ``pg_url`` is given."""
    urls = [("SQLite FULL", f"sqlite:///{folder}/{stem}.sqlite3")]
    return urls + [("PostgreSQL", pg_url)] if pg_url else urls


def fill(producer: Conn, kind: str, n: int) -> None:
    """Enqueue ``n`` jobs of ``kind`` in batches of 100."""
    for start in range(0, n, 100):
        items = [{"type": kind, "payload": {}}] * min(100, n - start)
        status, answer = producer.call("POST", "/jobs/batch", {"jobs": items})
        assert status == 201, (status, answer)


def two_requests(worker: Conn, job: dict[str, Any], kind: str) -> dict[str, Any]:
    """Complete ``job``, then claim the next one: the next job."""
    status, answer = worker.call("POST", f"/jobs/{job['id']}/complete",
                                 {"attempt": job["attempt"]})
    assert status == 200, (status, answer)
    status, answer = worker.call("POST", "/jobs/claim", {"types": [kind]})
    assert status == 200, (status, answer)
    return answer


def one_request(worker: Conn, job: dict[str, Any], kind: str) -> dict[str, Any]:
    """Complete ``job`` with ``next``: the next job, from the same answer."""
    status, answer = worker.call("POST", f"/jobs/{job['id']}/complete",
                                 {"attempt": job["attempt"], "next": {"types": [kind]}})
    assert status == 200 and answer["next"] is not None, (status, answer)
    return answer["next"]


def measure(url: str, folder: str, jobs: int) -> tuple[float, float]:
    """A fresh server on ``url``; median seconds per job of the two forms, alternated."""
    tag = f"{random.randrange(10**6)}"
    keys = make_keys(url, {f"p{tag}": "producer", f"w{tag}": "worker"})
    token = {k[0]: v["Authorization"].split()[1] for k, v in keys.items()}
    kind = f"loop{tag}"  # this run's own type: a shared database may hold others' jobs
    server = Server(url, os.path.join(folder, f"{tag}.log"), workers=1, threads=8,
                    args=("--reuse-port",), env={"QUEUELOG_JOB_TYPES": json.dumps({kind: {}})})
    server.start()
    conns: list[Conn] = []
    try:
        producer, worker = Conn(server.port, token["p"]), Conn(server.port, token["w"])
        conns += [producer, worker]
        fill(producer, kind, 2 * jobs + 2)
        status, job = worker.call("POST", "/jobs/claim", {"types": [kind]})
        assert status == 200, (status, job)
        times: dict[str, list[float]] = {"two": [], "one": []}
        for _ in range(jobs):
            for name, step in (("two", two_requests), ("one", one_request)):
                began = time.perf_counter()
                job = step(worker, job, kind)
                times[name].append(time.perf_counter() - began)
        return statistics.median(times["two"]), statistics.median(times["one"])
    finally:
        for conn in conns:
            conn.close()
        server.stop()


def main() -> None:
    """Measure each backend's rounds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=300, help="jobs per form and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pg-url", default=os.environ.get("QUEUELOG_TEST_DATABASE_URL"))
    opts = parser.parse_args()
    print(f"{opts.jobs} jobs per form a round; ms per job, p50; load average "
          f"{os.getloadavg()[0]:.2f}\n")
    print("| backend | round | complete, then claim | complete with next | ratio |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as folder:
        for r in range(1, opts.rounds + 1):
            # The backends alternate too, round by round.
            for name, url in backends(folder, f"loop{r}", opts.pg_url):
                two, one = measure(url, folder, opts.jobs)
                print(f"| {name} | {r} | {1000 * two:.2f} | {1000 * one:.2f} | "
                      f"{one / two:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
