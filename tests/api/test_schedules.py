"""Time on enqueue (run_at, delay_seconds) and after failure (backoff, retry_in, retry: false)."""
from __future__ import annotations

import datetime as dt
import random
from typing import Any

import pytest

from helpers import claim, enqueue, post_job
from queuelog import create_app
from queuelog.model.jobs import backoff_seconds, isoformat, to_datetime

BASE, CAP = 10, 50


@pytest.fixture
def config() -> dict[str, Any]:
    """A backoff base and cap small enough to reach the cap in a few retries."""
    return {"RETRY_BACKOFF_SECONDS": BASE, "RETRY_BACKOFF_MAX_SECONDS": CAP}


def at(clock: Any, seconds: float) -> str:
    """The fake clock's now plus ``seconds``, as the API writes it."""
    return isoformat(clock.now + int(seconds * 1_000_000))  # type: ignore[return-value]


# -- run_at and delay_seconds --------------------------------------------------------
@pytest.mark.parametrize("offset", [dt.timezone(dt.timedelta(hours=2)),
                                    dt.timezone(dt.timedelta(hours=-5, minutes=-30)),
                                    dt.timezone.utc])
def test_run_at_with_an_offset_is_stored_in_utc_and_not_claimable_before(
        client, producer, worker, clock, offset):
    when = to_datetime(clock.now + 3_600_000_000).astimezone(offset)
    text = when.isoformat()
    created = post_job(client, producer, run_at=text)
    assert created.status_code == 201
    assert created.json["run_at"] == at(clock, 3600)
    clock.advance(3599.999999)
    assert claim(client, worker).status_code == 204
    clock.advance(0.000001)
    assert claim(client, worker).json["id"] == created.json["id"]


def test_run_at_with_z(client, producer, worker, clock):
    text = at(clock, 90)  # "...Z"
    assert text.endswith("Z")
    created = post_job(client, producer, run_at=text)
    assert created.json["run_at"] == text
    assert claim(client, worker).status_code == 204


def test_run_at_in_the_past_is_due_at_once(client, producer, worker, clock):
    created = post_job(client, producer, run_at=at(clock, -86_400))
    assert claim(client, worker).json["id"] == created.json["id"]


def test_delay_seconds(client, producer, worker, clock):
    created = post_job(client, producer, delay_seconds=30.5)
    assert created.json["run_at"] == at(clock, 30.5)
    clock.advance(30)
    assert claim(client, worker).status_code == 204
    clock.advance(0.5)
    assert claim(client, worker).status_code == 200


def test_a_scheduled_job_does_not_block_a_due_one_behind_it(client, producer, admin, worker):
    enqueue(client, admin, delay_seconds=60, priority="high")
    due = enqueue(client, producer)
    assert claim(client, worker).json["id"] == due["id"]


@pytest.mark.parametrize("body, field", [
    ({"run_at": "2026-06-01T12:00:00"}, "run_at"),           # no time zone
    ({"run_at": "tomorrow"}, "run_at"),
    ({"run_at": "2026-13-01T00:00:00Z"}, "run_at"),
    # Beyond RFC 3339, though Python's fromisoformat takes each of them:
    ({"run_at": "2030-01-01T00:00:00Z\u0000"}, "run_at"),   # a trailing NUL (3.11)
    ({"run_at": "2030-01-01 00:00:00Z"}, "run_at"),          # a space for the T
    ({"run_at": "20300101T000000Z"}, "run_at"),              # the basic format
    ({"run_at": "2030-W01-1T00:00Z"}, "run_at"),             # a week date
    ({"run_at": "2030-01-01T00Z"}, "run_at"),                # hours alone
    ({"run_at": "2030-01-01T00:00:00+00:60"}, "run_at"),     # an offset's minute 60
    ({"run_at": "2030-01-01T00:00:00-01:99"}, "run_at"),
    ({"run_at": "２０３０-01-01T00:00:00Z"}, "run_at"),       # non-ASCII digits
    ({"run_at": 1780000000}, "run_at"),
    ({"delay_seconds": -1}, "delay_seconds"),
    ({"delay_seconds": 366 * 86_400 + 1}, "delay_seconds"),
    ({"delay_seconds": "10"}, "delay_seconds"),
    ({"delay_seconds": True}, "delay_seconds"),
    ({"run_at": "2026-06-01T12:00:00Z", "delay_seconds": 5}, "delay_seconds"),
])
def test_bad_schedules_are_422_and_store_nothing(client, producer, admin, body, field):
    resp = post_job(client, producer, **body)
    assert resp.status_code == 422, resp.json
    assert resp.headers["Content-Type"] == "application/problem+json"
    assert field in [e["field"] for e in resp.json["errors"]]
    assert client.get("/jobs", headers=admin).json["jobs"] == []


# -- backoff -------------------------------------------------------------------------
def test_backoff_follows_the_formula_exactly(client, producer, worker, store, clock):
    """min(cap, base * 2^(n-1)) * uniform(0.5, 1), with the store's (seeded) rng."""
    store.jobs.rng = random.Random(7)
    expected_rng = random.Random(7)
    job = enqueue(client, producer, max_retries=5)
    for n in range(1, 6):
        got = claim(client, worker).json
        assert (got["id"], got["attempt"]) == (job["id"], n)
        failed = client.post(f"/jobs/{job['id']}/fail", json={"attempt": n, "error": "boom"},
                             headers=worker).json
        delay = min(CAP, BASE * 2 ** (n - 1)) * expected_rng.uniform(0.5, 1.0)
        assert failed["status"] == "pending" and failed["retry_count"] == n
        assert failed["run_at"] == isoformat(clock.now + int(delay * 1_000_000))
        assert delay >= min(CAP, BASE * 2 ** (n - 1)) / 2  # never immediate
        assert claim(client, worker).status_code == 204
        clock.advance(delay)
    assert claim(client, worker).json["attempt"] == 6
    final = client.post(f"/jobs/{job['id']}/fail", json={"attempt": 6, "error": "boom"},
                        headers=worker).json
    assert final["status"] == "failed" and final["finished_at"] == at(clock, 0)


def test_backoff_function_bounds_and_cap():
    rng = random.Random(1)
    for n in range(1, 30):
        ceiling = min(3600, 2 * 2 ** (n - 1))
        for _ in range(50):
            assert ceiling / 2 <= backoff_seconds(n, 2, 3600, rng) <= ceiling
    assert max(backoff_seconds(40, 2, 3600, rng) for _ in range(200)) <= 3600


def test_jobs_failing_together_do_not_retry_in_lockstep(client, producer, worker):
    for _ in range(5):
        enqueue(client, producer)
    run_ats = set()
    for _ in range(5):
        got = claim(client, worker).json
        run_ats.add(client.post(f"/jobs/{got['id']}/fail", json={"attempt": 1, "error": "x"},
                                headers=worker).json["run_at"])
    assert len(run_ats) == 5


def test_retry_in_overrides_backoff(client, producer, worker, clock):
    job = enqueue(client, producer)
    claim(client, worker)
    failed = client.post(f"/jobs/{job['id']}/fail",
                         json={"attempt": 1, "error": "rate limited", "retry_in": 120},
                         headers=worker).json
    assert failed["status"] == "pending" and failed["run_at"] == at(clock, 120)


@pytest.mark.parametrize("value", [-1, 86_401, "5", True])
def test_retry_in_out_of_bounds_is_422_and_changes_nothing(client, producer, worker, admin,
                                                           value):
    job = enqueue(client, producer)
    claim(client, worker)
    resp = client.post(f"/jobs/{job['id']}/fail",
                       json={"attempt": 1, "error": "x", "retry_in": value}, headers=worker)
    assert resp.status_code == 422
    assert client.get(f"/jobs/{job['id']}", headers=admin).json["status"] == "running"


def test_retry_false_fails_at_once_with_retries_left(client, producer, worker, admin, clock):
    job = enqueue(client, producer, max_retries=5)
    claim(client, worker)
    failed = client.post(f"/jobs/{job['id']}/fail",
                         json={"attempt": 1, "error": "bad input", "retry": False},
                         headers=worker).json
    assert failed["status"] == "failed" and failed["retry_count"] == 0
    assert failed["finished_at"] == at(clock, 0)
    assert claim(client, worker).status_code == 204


def test_poison_job_fails_after_max_retries_plus_one_attempts(client, producer, worker, admin,
                                                              clock):
    job = enqueue(client, producer, max_retries=2)
    for n in range(1, 4):
        clock.advance(CAP)
        assert claim(client, worker).json["attempt"] == n
        client.post(f"/jobs/{job['id']}/fail", headers=worker, json={
            "attempt": n, "error": f"try {n}: postgres://app:hunter2@db/x password=hunter2"})
    clock.advance(CAP)
    assert claim(client, worker).status_code == 204
    seen = client.get(f"/jobs/{job['id']}", headers=admin).json
    assert seen["status"] == "failed" and seen["attempt"] == 3
    assert [a["outcome"] for a in seen["attempts"]] == ["failed"] * 3
    for n, a in enumerate(seen["attempts"], 1):
        assert a["error"].startswith(f"try {n}:") and "hunter2" not in a["error"]
        assert "[REDACTED]" in a["error"]


@pytest.mark.parametrize("bad", [{"RETRY_BACKOFF_SECONDS": 0}, {"RETRY_BACKOFF_SECONDS": -2},
                                 {"RETRY_BACKOFF_SECONDS": 10, "RETRY_BACKOFF_MAX_SECONDS": 5},
                                 {"RETRY_BACKOFF_SECONDS": "2"}])
def test_a_backoff_that_could_retry_at_once_is_refused_at_start(tmp_path, bad):
    with pytest.raises(ValueError):
        create_app({"TESTING": True, "DATABASE_URL": f"sqlite:///{tmp_path}/q.sqlite3",
                    "SECRET_KEY": "x", "BOOTSTRAP_ADMIN": False, **bad})
