"""``queuelog work --concurrency 8 -- true``: jobs per second, next to the API's own rate.

    python bench/bench_runner.py [--jobs 2000] [--concurrency 8] [--database-url URL]

Starts gunicorn (4 workers x 8 threads, as tests/server_process.py does) on a fresh database,
enqueues the jobs, then times:

- **runner**: ``queuelog work --concurrency N -- true`` from its start until every job is
  completed (one process started per job: the runner's real cost);
- **API, batch**: claim up to 100 jobs at once (``max_jobs``) and complete them with one
  ``POST /jobs/complete``, N threads, no process started: the ceiling the runner is held to.
- **API, batch of N**: one thread claiming N jobs at once (``max_jobs`` = the concurrency)
  and completing them in one request: the same jobs in flight as the runner has.
- **API, single**: claim one job, complete it, N threads, no process started.

``--server-root DIR`` serves another checkout (its ``app.py``) instead of this one.

Prints jobs/s for each. The default database is SQLite in a temp dir (FULL, the default).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from queuelog.client import Client, ProblemError  # noqa: E402
import server_process  # noqa: E402
from server_process import Server, make_keys  # noqa: E402


def fill(producer: Client, count: int, kind: str) -> None:
    """Enqueue ``count`` jobs of type ``kind``, in batches where the server has them."""
    items = [{"type": kind, "payload": {"n": n}} for n in range(count)]
    try:
        for start in range(0, count, 500):
            producer.enqueue_many(items[start:start + 500])
    except ProblemError as exc:
        if exc.status not in (404, 405):
            raise
        for item in items:  # a server without POST /jobs/batch
            producer.enqueue(item["type"], item["payload"])


def unfinished(admin: Client, kind: str) -> bool:
    """True while a job of this type is pending or running (one small page each)."""
    return any(next(iter(admin.list(type=kind, status=status, limit=1)), None)
               for status in ("pending", "running"))


def time_runner(url: str, token: str, kind: str, jobs: int, concurrency: int,
                admin: Client) -> float:
    """Seconds for ``queuelog work`` to complete ``jobs`` jobs (``true`` as the command)."""
    env = {**os.environ, "PYTHONPATH": ROOT, "QUEUELOG_URL": url, "QUEUELOG_TOKEN": token}
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "queuelog", "work", "--types", kind,
                             "--concurrency", str(concurrency), "--", "true"],
                            env=env, stderr=subprocess.DEVNULL)
    try:
        while unfinished(admin, kind):
            time.sleep(0.2)
        return time.monotonic() - began
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def time_api(url: str, token: str, kind: str, concurrency: int,
             one_round: Callable[[Client], int]) -> float:
    """Seconds for ``concurrency`` threads to drain the queue of ``kind`` through the API."""
    errors: list[ProblemError] = []

    def drain() -> None:
        client = Client(url, token)
        try:
            while one_round(client):
                pass
        except ProblemError as exc:  # an older server without the batch routes
            errors.append(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=drain) for _ in range(concurrency)]
    began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.monotonic() - began


def main() -> None:
    """Run the three measurements and print jobs/s."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--server-root", default=None, help="a checkout whose app.py to serve")
    args = parser.parse_args()
    server_env = {"QUEUELOG_JOB_TYPES": '{"runner": {}, "batch": {}, "batch_n": {}, "single": {}}'}
    if args.server_root:
        server_process.ROOT = os.path.abspath(args.server_root)
        server_env["PYTHONPATH"] = server_process.ROOT
    tmp = tempfile.mkdtemp(prefix="queuelog-bench-runner-")
    db = args.database_url or f"sqlite:///{tmp}/bench.sqlite3"
    keys = make_keys(db, {"producer": "producer", "worker": "worker", "root": "admin"})
    tokens = {n: h["Authorization"].split()[1] for n, h in keys.items()}
    server = Server(db, os.path.join(tmp, "server.log"), workers=4, threads=8, env=server_env)
    server.start()
    url = f"http://127.0.0.1:{server.port}"
    producer, admin = Client(url, tokens["producer"]), Client(url, tokens["root"])
    try:
        def batch_round(c: Client, kind: str = "batch", size: int = 100) -> int:
            got: list[dict[str, Any]] = c.claim([kind], max_jobs=size)  # type: ignore
            if got:
                c.complete_many([{"id": j["id"], "attempt": j["attempt"]} for j in got])
            return len(got)

        def single_round(c: Client) -> int:
            job = c.claim(["single"])
            if job:
                c.complete(job)  # type: ignore[arg-type]
            return 1 if job else 0

        results: dict[str, float] = {}
        fill(producer, args.jobs, "runner")
        results["runner"] = time_runner(url, tokens["worker"], "runner", args.jobs,
                                        args.concurrency, admin)
        fill(producer, args.jobs, "batch")
        try:
            results["API, batch"] = time_api(url, tokens["worker"], "batch",
                                             args.concurrency, batch_round)
        except ProblemError as exc:
            print(f"API, batch: not measured ({exc})")
        fill(producer, args.jobs, "batch_n")
        try:
            results[f"API, batch of {args.concurrency}"] = time_api(
                url, tokens["worker"], "batch_n", 1,
                lambda c: batch_round(c, "batch_n", args.concurrency))
        except ProblemError as exc:
            print(f"API, batch of {args.concurrency}: not measured ({exc})")
        fill(producer, args.jobs, "single")
        results["API, single"] = time_api(url, tokens["worker"], "single",
                                          args.concurrency, single_round)
        print(f"{args.jobs} jobs, concurrency {args.concurrency}, {db.split(':')[0]}:")
        for name, seconds in results.items():
            print(f"  {name:<16} {args.jobs / seconds:8.0f} jobs/s  ({seconds:.1f} s)")
    finally:
        for c in (producer, admin):
            c.close()
        server.stop()


if __name__ == "__main__":
    main()
