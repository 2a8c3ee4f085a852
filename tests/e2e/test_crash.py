"""Crashes over real HTTP: the server SIGKILLed mid-burst, and a worker that dies holding a job."""
from __future__ import annotations

import collections
import http.client
import json
import threading
import time
from typing import Any

import pytest

from server_process import Server, make_keys, request, table_rows

CLIENTS = 8
KILL_AFTER = 120         # acknowledged enqueues before the SIGKILL
KEYS_PER_CLIENT = 40
NETWORK_ERRORS = (OSError, http.client.HTTPException)

pytestmark = pytest.mark.slow


def _acked_until(counter: list[Any], target: int, timeout: float = 30) -> None:
    """Wait (real time: another process is working) until ``target`` answers arrived."""
    deadline = time.monotonic() + timeout
    while len(counter) < target and time.monotonic() < deadline:
        time.sleep(0.005)
    assert len(counter) >= target, f"only {len(counter)} answers before the deadline"


def test_server_killed_mid_burst_keeps_every_acknowledged_job(db_url: str,
                                                              tmp_path: Any) -> None:
    """Every job whose POST got 201 is in the table after SIGKILL and restart, exactly once.

    A worker holding a job when the server dies never answers again; after the restart its
    lease runs out and another worker finishes the job as attempt 2.
    """
    keys = make_keys(db_url, {"producer": "producer", "dead": "worker", "alive": "worker",
                              "root": "admin"})
    headers = keys["producer"]
    server = Server(db_url, str(tmp_path / "server.log"), workers=2,
                    env={"QUEUELOG_RETRY_BACKOFF_SECONDS": "0.05"}).start()
    acked: list[tuple[int, int, int]] = []  # (client, seq, job id)
    bad: list[Any] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(c: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        seq = 0
        while not stop.is_set():
            try:
                status, job = request(server.port, "POST", "/jobs",
                                      {"type": "email", "payload": {"c": c, "n": seq}},
                                      headers, conn=conn)
            except NETWORK_ERRORS:
                return  # the server is gone; this request's fate is unknown
            with lock:
                if status != 201:
                    bad.append((status, job))
                    return
                acked.append((c, seq, job["id"]))
            seq += 1

    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    try:
        status, held = request(server.port, "POST", "/jobs", {"type": "pdf"}, headers)
        assert status == 201
        status, claimed = request(server.port, "POST", "/jobs/claim",
                                  {"types": ["pdf"], "lease_seconds": 1}, keys["dead"])
        assert status == 200 and claimed["id"] == held["id"]
        for t in threads:
            t.start()
        _acked_until(acked, KILL_AFTER)
        server.kill()
        stop.set()
        for t in threads:
            t.join()
        server.start()  # recovery: the database opens again after the crash
        seen = _finish_dead_workers_job(server.port, held["id"], keys)
    finally:
        stop.set()
        server.stop()
    assert [(a["attempt"], a["worker_id"], a["outcome"], a["error"]) for a in seen["attempts"]] \
        == [(1, "dead", "lease_expired", "lease expired"), (2, "alive", "completed", None)]

    rows = table_rows(db_url, "SELECT id, payload FROM jobs WHERE type = 'email'")
    found = {r.id: json.loads(r.payload) for r in rows}
    by_request = collections.Counter((p["c"], p["n"]) for p in found.values())
    duplicates = sum(n - 1 for n in by_request.values() if n > 1)
    missing = [a for a in acked if found.get(a[2]) != {"c": a[0], "n": a[1]}]
    print(f"\n[crash {db_url.split(':')[0]}] acknowledged {len(acked)}, "
          f"found {len(acked) - len(missing)} of them ({len(found)} rows in all, "
          f"{len(found) - len(acked) + len(missing)} committed but unanswered), "
          f"duplicates {duplicates}")
    assert not bad, bad[:5]
    assert not missing, f"acknowledged but lost: {missing[:10]}"
    assert duplicates == 0


def _finish_dead_workers_job(port: int, job_id: int, keys: dict[str, Any]) -> Any:
    """Claim the dead worker's job once its lease is over, finish it; return it as admin."""
    # A real server's clock: the 1 s lease must really pass; the long poll waits for it.
    status, again = request(port, "POST", "/jobs/claim", {"types": ["pdf"], "wait": 10},
                            keys["alive"], timeout=15)
    assert status == 200 and again["id"] == job_id and again["attempt"] == 2
    status, late = request(port, "POST", f"/jobs/{job_id}/complete", {"attempt": 1},
                           keys["dead"])
    assert status == 409, late  # fenced: the stale holder's answer changes nothing
    status, done = request(port, "POST", f"/jobs/{job_id}/complete",
                           {"attempt": 2, "result": {"ok": True}}, keys["alive"])
    assert status == 200 and done["status"] == "completed"
    return request(port, "GET", f"/jobs/{job_id}", None, keys["root"])[1]


def test_clients_retrying_with_idempotency_keys_get_one_job_per_key(db_url: str,
                                                                     tmp_path: Any) -> None:
    """A client that retries every unanswered request ends with exactly one job per key."""
    headers = make_keys(db_url, {"producer": "producer"})["producer"]
    server = Server(db_url, str(tmp_path / "server.log"), workers=2).start()
    answers: list[tuple[str, int, int]] = []  # (key, status, job id)
    bad: list[Any] = []
    lock = threading.Lock()
    unanswered = collections.Counter[str]()
    deadline = time.monotonic() + 60

    def client(c: int) -> None:
        conn: http.client.HTTPConnection | None = None
        for n in range(KEYS_PER_CLIENT):
            key = f"c{c}-k{n}"
            while time.monotonic() < deadline:
                conn = conn or http.client.HTTPConnection("127.0.0.1", server.port,
                                                          timeout=10)
                try:
                    status, job = request(server.port, "POST", "/jobs",
                                          {"type": "email", "payload": {"key": key}},
                                          {**headers, "Idempotency-Key": key}, conn=conn)
                except NETWORK_ERRORS:
                    conn.close()
                    conn = None
                    with lock:
                        unanswered[key] += 1
                    time.sleep(0.02)  # the server is restarting; real time must pass
                    continue
                with lock:
                    if status not in (200, 201):
                        bad.append((status, job))
                        return
                    answers.append((key, status, job["id"]))
                break

    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    try:
        for t in threads:
            t.start()
        _acked_until(answers, KILL_AFTER // 2)
        server.kill()
        server.start()  # same database, new port: the clients pick it up on retry
        for t in threads:
            t.join()
    finally:
        server.stop()

    rows = table_rows(db_url, "SELECT id, idempotency_key FROM jobs")
    per_key = collections.Counter(r.idempotency_key for r in rows)
    ids = {r.idempotency_key: r.id for r in rows}
    keys = {f"c{c}-k{n}" for c in range(CLIENTS) for n in range(KEYS_PER_CLIENT)}
    replays = sum(1 for _, status, _ in answers if status == 200)
    print(f"\n[crash+keys {db_url.split(':')[0]}] keys {len(keys)}, answered {len(answers)}, "
          f"requests without answer {sum(unanswered.values())}, replays (200) {replays}, "
          f"jobs found {len(rows)}, duplicates {sum(n - 1 for n in per_key.values())}")
    assert not bad, bad[:5]
    assert len(answers) == len(keys) == len({k for k, _, _ in answers})
    assert set(per_key) == keys and set(per_key.values()) == {1}
    assert all(ids[key] == job_id for key, _, job_id in answers)
