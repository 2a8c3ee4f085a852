"""Mass lease expiry: 10,000 leases run out at once, then idle workers keep claiming.

    python bench/bench_expiry.py [--leases 10000] [--claimers 2] [--rounds 2] [--pg-url URL]

A worker host that dies with 10,000 jobs in hand leaves 10,000 leases to run out together.
Each claim takes back up to ``EXPIRE_BATCH`` of them in its own transaction, so the claims
that follow carry the take-back. Against ``gunicorn -w 2 --reuse-port``: a producer enqueues
``--leases`` jobs, a worker claims them all (batches of 100, 1 s leases) and answers none;
once the leases have run out, ``--claimers`` threads (one keep-alive connection each) claim
a type with nothing due, as idle workers do, until no job is running. Printed per backend
and round: the claims' p50 / p99 / max, and the seconds and the number of claims until every
lease was taken back. The targets: no claim over 50 ms, all taken back within 10 s.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_loop import backends, fill  # noqa: E402
from bench_wait import Conn  # noqa: E402
from server_process import Server, make_keys  # noqa: E402


def running(admin: Conn, kind: str) -> int:
    """How many jobs of ``kind`` are running (capped at 1: whether any is)."""
    status, page = admin.call("GET", f"/jobs?status=running&type={kind}&limit=1")
    assert status == 200, (status, page)
    return len(page["jobs"])


def measure(url: str, folder: str, leases: int, claimers: int) -> tuple[list[float], float,
                                                                        int]:
    """A fresh server on ``url``: each claim's seconds, the seconds until no lease was
    left, and the number of claims made."""
    tag = f"{random.randrange(10**6)}"
    keys = make_keys(url, {f"p{tag}": "producer", f"w{tag}": "worker", f"a{tag}": "admin"})
    token = {k[0]: v["Authorization"].split()[1] for k, v in keys.items()}
    kind, idle = f"exp{tag}", f"idle{tag}"
    server = Server(url, os.path.join(folder, f"{tag}.log"), workers=2, threads=8,
                    args=("--reuse-port",),
                    env={"QUEUELOG_JOB_TYPES": json.dumps({kind: {}, idle: {}})})
    server.start()
    conns: list[Conn] = []
    try:
        producer, worker = Conn(server.port, token["p"]), Conn(server.port, token["w"])
        conns += [producer, worker]
        fill(producer, kind, leases)
        held = 0
        while held < leases:
            status, got = worker.call("POST", "/jobs/claim", {
                "types": [kind], "max_jobs": 100, "lease_seconds": 1})
            assert status == 200 and got["jobs"], (status, got)
            held += len(got["jobs"])
        time.sleep(1.2)  # every lease has run out
        admin = Conn(server.port, token["a"])  # now: an idle keep-alive would be closed
        conns.append(admin)
        times: list[float] = []
        done = threading.Event()
        began = time.perf_counter()

        def claim_until_done() -> None:
            conn = Conn(server.port, token["w"])
            conns.append(conn)
            while not done.is_set():
                t0 = time.perf_counter()
                status, got = conn.call("POST", "/jobs/claim", {"types": [idle]})
                times.append(time.perf_counter() - t0)
                assert status in (200, 204), (status, got)

        threads = [threading.Thread(target=claim_until_done) for _ in range(claimers)]
        for t in threads:
            t.start()
        while running(admin, kind):
            time.sleep(0.05)
        elapsed = time.perf_counter() - began
        done.set()
        for t in threads:
            t.join()
        return times, elapsed, len(times)
    finally:
        for conn in conns:
            conn.close()
        server.stop()


def main() -> None:
    """Measure each backend's rounds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--leases", type=int, default=10_000)
    parser.add_argument("--claimers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pg-url", default=os.environ.get("QUEUELOG_TEST_DATABASE_URL"))
    opts = parser.parse_args()
    print(f"{opts.leases} leases run out at once, {opts.claimers} idle claimers; load "
          f"average {os.getloadavg()[0]:.2f}\n")
    print("| backend | round | claim p50 | p99 | max | all taken back | claims |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as folder:
        for r in range(1, opts.rounds + 1):
            for name, url in backends(folder, f"exp{r}", opts.pg_url):
                times, elapsed, n = measure(url, folder, opts.leases, opts.claimers)
                ms = sorted(1000 * t for t in times)
                p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
                print(f"| {name} | {r} | {statistics.median(ms):.1f} ms | {p99:.1f} ms | "
                      f"{ms[-1]:.1f} ms | {elapsed:.2f} s | {n} |", flush=True)


if __name__ == "__main__":
    main()
