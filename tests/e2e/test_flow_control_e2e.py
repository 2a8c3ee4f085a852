"""Flow control across real servers: a type's limit holds over every app server and process.

Two gunicorn app servers (2 worker processes each) share one database, so four processes
claim from it. The concurrency limit of ``pdf`` must hold over all four (CONTRACT.md, Flow
control: "Limits are global"), and a slot freed on one server must wake a claim waiting on
the other (a freed concurrency slot is one of the wake-ups), not leave it to a periodic look.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import json
import threading
import time
from typing import Any, Iterator

import pytest

from server_process import Server, make_keys, request, table_rows

pytestmark = pytest.mark.slow

PDF_AT_ONCE = 3      # test 1: pdf's concurrency
PDF_JOBS = 30
EMAIL_JOBS = 10      # unlimited: claimed while pdf is at its limit, not held up by it
CLIENTS = 10         # client threads, more than the limit, so it is tested
RUN_SECONDS = 0.2    # how long a client "runs" each pdf job
CLAIM_WAIT = 1       # each claim's wait: the drain's tail after the last job, at most
DRAIN_BOUND = 30.0   # seconds; the drain takes 3 to 5 (30 x 0.2 s / 3 at once = 2, + HTTP)

WAIT = 20            # test 2: the waiting claim's wait
LOOK = 30            # the safety-net look, slowed beyond WAIT: a quick answer is a wake-up
PARKED = 1.0         # time given to the claim to find pdf at its limit and go to sleep
WOKEN_WITHIN = 2.0   # a wake-up answers within this


@contextlib.contextmanager
def two_servers(db_url: str, folder: Any, job_types: dict[str, Any],
                env: dict[str, str] | None = None) -> Iterator[tuple[Server, Server]]:
    """Servers A and B (2 workers each) on ``db_url``, configured with ``job_types``."""
    env = {"QUEUELOG_JOB_TYPES": json.dumps(job_types), **(env or {})}
    # 8 threads against LONG_POLL_SLOTS' 4: waiting claims never hold every thread, so a
    # complete always finds one.
    a, b = (Server(db_url, str(folder / f"{name}.log"), workers=2, threads=8, env=env)
            for name in "ab")
    # Started and stopped side by side: each takes a couple of seconds on a busy machine.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        try:
            for started in [pool.submit(a.start), pool.submit(b.start)]:
                started.result()  # a server that did not start raises here
            yield a, b
        finally:
            for stopped in [pool.submit(a.stop), pool.submit(b.stop)]:
                stopped.result()


def call(server: Server, method: str, path: str, body: Any, headers: dict[str, str],
         expect: int = 200, timeout: float = 10) -> Any:
    """One request; assert its status and return the decoded body."""
    status, got = request(server.port, method, path, body, headers, timeout=timeout)
    assert status == expect, (status, got)
    return got


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals that hold one instant in common (an end before a start at a tie)."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    most = now = 0
    for _, delta in events:
        now += delta
        most = max(most, now)
    return most


def test_concurrency_holds_across_two_servers_and_four_processes(db_url: str,
                                                                 tmp_path: Any) -> None:
    """10 clients drain 30 pdf jobs (0.2 s each) and 10 emails through both servers, claiming
    with ``wait`` from each in turn: each job is completed once, and no more than 3 pdf runs
    overlap (while at least 2 do: the clients can see overlap)."""
    keys = make_keys(db_url, {"producer": "producer", "worker": "worker"})
    with two_servers(db_url, tmp_path, {"pdf": {"concurrency": PDF_AT_ONCE}, "email": {}}
                     ) as (a, b):
        made = call(a, "POST", "/jobs/batch",
                    {"jobs": [{"type": "pdf"}] * PDF_JOBS + [{"type": "email"}] * EMAIL_JOBS},
                    keys["producer"], expect=201)["jobs"]
        total = len(made)
        lock = threading.Lock()
        runs: list[tuple[int, str, float, float]] = []   # (id, type, start, end)
        errors: list[Any] = []
        done = threading.Event()
        deadline = time.monotonic() + DRAIN_BOUND

        def client(i: int) -> None:
            turn = i
            while not done.is_set() and time.monotonic() < deadline:
                server = (a, b)[turn % 2]
                turn += 1
                try:
                    status, job = request(server.port, "POST", "/jobs/claim",
                                          {"wait": CLAIM_WAIT}, keys["worker"],
                                          timeout=CLAIM_WAIT + 10)
                    if status == 204:  # the wait ran out, or no slot to wait in (Retry-After)
                        time.sleep(0.05)
                        continue
                    if status != 200:
                        raise AssertionError(("claim", status, job))
                    # The client's interval lies inside the job's running time in the
                    # database (claim committed before, complete committed after).
                    start = time.monotonic()
                    if job["type"] == "pdf":
                        time.sleep(RUN_SECONDS)
                    end = time.monotonic()
                    status, got = request(server.port, "POST", f"/jobs/{job['id']}/complete",
                                          {"attempt": job["attempt"]}, keys["worker"])
                    if status != 200:
                        raise AssertionError(("complete", job["id"], status, got))
                except Exception as exc:  # noqa: BLE001 - reported by the test thread
                    with lock:
                        errors.append(exc)
                    done.set()
                    return
                with lock:
                    runs.append((job["id"], job["type"], start, end))
                    if len(runs) == total:
                        done.set()

        threads = [threading.Thread(target=client, args=(i,), daemon=True)
                   for i in range(CLIENTS)]
        began = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=DRAIN_BOUND + CLAIM_WAIT + 15)
        took = time.monotonic() - began

    assert not errors, errors
    assert sorted(r[0] for r in runs) == sorted(j["id"] for j in made), (took, len(runs))
    rows = table_rows(db_url, "SELECT j.status, j.attempt, COUNT(a.attempt) FROM jobs j "
                      "JOIN job_attempts a ON a.job_id = j.id GROUP BY j.id, j.status, j.attempt")
    assert len(rows) == total and {tuple(r) for r in rows} == {("completed", 1, 1)}, rows
    overlap = max_overlap([(s, e) for _, t, s, e in runs if t == "pdf"])
    assert 2 <= overlap <= PDF_AT_ONCE, overlap


def test_a_slot_freed_on_one_server_wakes_a_claim_waiting_on_the_other(db_url: str,
                                                                       tmp_path: Any) -> None:
    """pdf at most 1 at once: a claim waiting on B for the second pdf job is answered within
    2 s of the first being completed on A, far below B's 30 s look: it was woken."""
    keys = make_keys(db_url, {"producer": "producer", "worker": "worker"})
    with two_servers(db_url, tmp_path, {"pdf": {"concurrency": 1}, "email": {}},
                     {"QUEUELOG_LONG_POLL_LOOK_SECONDS": str(LOOK)}) as (a, b):
        first, second = call(a, "POST", "/jobs/batch", {"jobs": [{"type": "pdf"}] * 2},
                             keys["producer"], expect=201)["jobs"]
        held = call(a, "POST", "/jobs/claim", None, keys["worker"])
        assert held["id"] == first["id"]
        answer: dict[str, Any] = {}

        def wait_on_b() -> None:
            answer["status"], answer["job"] = request(
                b.port, "POST", "/jobs/claim", {"wait": WAIT}, keys["worker"],
                timeout=WAIT + 10)
            answer["at"] = time.monotonic()

        thread = threading.Thread(target=wait_on_b, daemon=True)
        thread.start()
        time.sleep(PARKED)
        assert not answer, answer  # pdf is at its limit: the claim waits
        freed = time.monotonic()
        call(a, "POST", f"/jobs/{first['id']}/complete", {"attempt": held["attempt"]},
             keys["worker"])
        thread.join(timeout=WAIT + 15)

    assert answer.get("status") == 200, answer
    assert answer["job"]["id"] == second["id"]
    # Without a wake-up the claim sleeps to its deadline (20 s; its look is 30 s) and takes
    # the job at its last look there.
    assert answer["at"] - freed < WOKEN_WITHIN, answer["at"] - freed
