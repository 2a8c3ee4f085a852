"""A write lock held elsewhere (SQLite): writes answer 503 within the wait, /healthz says so."""
from __future__ import annotations

import sqlite3
import time
from typing import Any

import pytest

from helpers import post_job, problem

WAIT = 0.5  # WRITE_LOCK_WAIT_SECONDS here: the client's 10 s are far away either way


@pytest.fixture
def config() -> dict[str, Any]:
    return {"WRITE_LOCK_WAIT_SECONDS": WAIT}


@pytest.fixture
def held(backend: str, db_url: str) -> Any:
    """A second connection (another program: no queuelog turn) holding the write lock."""
    if backend != "sqlite":
        pytest.skip("PostgreSQL has no database-wide write lock")
    other = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    yield other
    other.close()


def test_a_write_that_cannot_get_the_lock_answers_503_within_the_wait(client, producer, held):
    start = time.monotonic()
    resp = post_job(client, producer)
    took = time.monotonic() - start
    body = problem(resp, 503, "unavailable")
    assert resp.headers["Retry-After"] == "1" and "Retry" in body["detail"]
    assert took < 5 * WAIT  # the wait, not the old busy timeout of 30 s
    held.execute("ROLLBACK")
    assert post_job(client, producer).status_code == 201


def test_writers_queued_behind_a_held_lock_each_answer_within_the_wait(client, producer, held,
                                                                      app):
    """Threads of one process wait for their turn one after the other: each gives up at
    its own deadline, not one wait after the other's."""
    import threading
    codes: list[tuple[int, float]] = []

    def write() -> None:
        with app.test_client() as own:
            start = time.monotonic()
            codes.append((post_job(own, producer).status_code, time.monotonic() - start))

    threads = [threading.Thread(target=write) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert [code for code, _ in codes] == [503] * 6
    assert max(took for _, took in codes) < 4 * WAIT  # one after the other: 6 waits
    held.execute("ROLLBACK")
    assert post_job(client, producer).status_code == 201


def test_healthz_says_when_writes_are_impossible(client, held):
    resp = client.get("/healthz")
    assert resp.status_code == 200  # the database answers reads: alive, as the contract has it
    assert resp.json["status"] == "ok" and resp.json["writes"] == "unavailable"
    assert "lock" in resp.json["writes_detail"]
    held.execute("ROLLBACK")
    assert client.get("/healthz").json == {"status": "ok"}
