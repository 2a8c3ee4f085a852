"""Multi-process load: gunicorn with 4 workers, 16 client threads, 600 jobs end to end."""
from __future__ import annotations

import collections
import http.client
import threading
import time
from typing import Any

import pytest

from server_process import Server, make_keys, request, table_rows

# What the test proves (one claim per job, no 5xx, no "database is locked") depends on how
# many requests are in flight at once (16 threads on 4 processes), not on how long they keep
# going: 400 jobs are ~1,200 requests with all 16 threads busy from start to end, each worker
# thread claiming ~50 times against 7 rivals. 2,000 jobs took five times as long, proving the
# same contention for longer (600, the size before, cost CI 5 s more per backend).
JOBS = 400
PRODUCERS = 8
WORKERS = 8          # 16 client threads in all
TIME_BOX = 150.0     # seconds: a guard against hangs (a run takes ~10 s on 2 cores)


@pytest.mark.slow
def test_load_no_double_claims_no_errors(db_url: str, tmp_path: Any) -> None:
    """Every job is claimed once, completed once; no 5xx, no "database is locked"."""
    names = {f"p{i}": "producer" for i in range(PRODUCERS)}
    names.update({f"w{i}": "worker" for i in range(WORKERS)})
    headers = make_keys(db_url, names)
    server = Server(db_url, str(tmp_path / "server.log"), workers=4, threads=4).start()
    lock = threading.Lock()
    statuses: collections.Counter[int] = collections.Counter()
    claims: list[tuple[int, int, str]] = []   # (job id, attempt, worker)
    completed: list[int] = []
    enqueued: list[int] = []
    problems: list[str] = []
    producers_done = threading.Event()
    deadline = time.monotonic() + TIME_BOX

    def call(conn: http.client.HTTPConnection, method: str, path: str, body: Any,
             hdrs: dict[str, str]) -> tuple[int, Any]:
        status, answer = request(server.port, method, path, body, hdrs, conn=conn)
        with lock:
            statuses[status] += 1
            if status >= 500 or "locked" in str(answer):
                problems.append(f"{method} {path}: {status} {answer}")
        return status, answer

    def produce(name: str, count: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        for n in range(count):
            status, job = call(conn, "POST", "/jobs",
                               {"type": "email", "payload": {"p": name, "n": n}}, headers[name])
            if status == 201:
                with lock:
                    enqueued.append(job["id"])
        conn.close()

    def work(name: str) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        while time.monotonic() < deadline:
            status, job = call(conn, "POST", "/jobs/claim", {"wait": 1}, headers[name])
            if status == 204:
                with lock:
                    if producers_done.is_set() and len(completed) >= len(enqueued):
                        break
                continue
            if status != 200:
                continue
            with lock:
                claims.append((job["id"], job["attempt"], name))
            status, _ = call(conn, "POST", f"/jobs/{job['id']}/complete",
                             {"attempt": job["attempt"], "result": {"by": name}}, headers[name])
            if status == 200:
                with lock:
                    completed.append(job["id"])
        conn.close()

    started = time.monotonic()
    try:
        producers = [threading.Thread(target=produce, args=(f"p{i}", JOBS // PRODUCERS))
                     for i in range(PRODUCERS)]
        workers = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(WORKERS)]
        for t in producers + workers:
            t.start()
        for t in producers:
            t.join()
        producers_done.set()
        for t in workers:
            t.join()
    finally:
        server.stop()
    elapsed = time.monotonic() - started
    log = server.log()

    per_job = collections.Counter(job_id for job_id, _, _ in claims)
    double = {job_id: n for job_id, n in per_job.items() if n > 1}
    rows = table_rows(db_url, "SELECT status, COUNT(*) FROM jobs GROUP BY status")
    print(f"\n[load {db_url.split(':')[0]}] {JOBS} jobs, 16 threads, 4 gunicorn workers: "
          f"{elapsed:.1f}s, {sum(statuses.values())} requests, statuses {dict(statuses)}, "
          f"double claims {len(double)}, table {dict(rows)}")
    assert len(enqueued) == JOBS
    assert not double, f"jobs claimed more than once: {double}"
    assert not problems, problems[:5]
    assert "database is locked" not in log and "Traceback" not in log, log[-3000:]
    assert sorted(completed) == sorted(enqueued)
    assert dict(rows) == {"completed": JOBS}
    assert all(attempt == 1 for _, attempt, _ in claims)
