"""Cancel (its producer or an admin, pending or running: tests/api/test_outcomes.py) and admin
retry (failed or cancelled)."""
from __future__ import annotations

from typing import Any

import pytest

from helpers import claim, enqueue
from queuelog.model.jobs import isoformat


def fail(client: Any, headers: dict[str, str], job: dict[str, Any], attempt: int,
         **body: Any) -> Any:
    """Fail an attempt; return the response."""
    return client.post(f"/jobs/{job['id']}/fail",
                       json={"attempt": attempt, "error": "boom", **body}, headers=headers)


def failed_job(client: Any, producer: dict[str, str], worker: dict[str, str],
               **body: Any) -> dict[str, Any]:
    """A job that failed for good on its first attempt."""
    job = enqueue(client, producer, **body)
    assert claim(client, worker).json["id"] == job["id"]
    assert fail(client, worker, job, 1, retry=False).json["status"] == "failed"
    return job


# -- cancel --------------------------------------------------------------------------
def test_producer_cancels_its_own_pending_job(client, producer, worker, clock):
    job = enqueue(client, producer, delay_seconds=60)
    resp = client.post(f"/jobs/{job['id']}/cancel", headers=producer)
    assert resp.status_code == 200
    assert resp.json["status"] == "cancelled"
    assert resp.json["finished_at"] == isoformat(clock.now)
    clock.advance(120)
    assert claim(client, worker).status_code == 204


def test_admin_cancels_any_pending_job(client, producer, admin):
    job = enqueue(client, producer)
    resp = client.post(f"/jobs/{job['id']}/cancel", headers=admin)
    assert resp.status_code == 200 and resp.json["status"] == "cancelled"


def test_another_producers_job_is_404_and_stays_pending(client, producer, make_key, admin):
    job = enqueue(client, producer)
    stranger = make_key("shop", "producer")
    resp = client.post(f"/jobs/{job['id']}/cancel", headers=stranger)
    assert resp.status_code == 404
    assert client.get(f"/jobs/{job['id']}", headers=admin).json["status"] == "pending"


def test_a_worker_may_not_cancel(client, producer, worker, admin):
    job = enqueue(client, producer)
    assert client.post(f"/jobs/{job['id']}/cancel", headers=worker).status_code == 403
    assert client.get(f"/jobs/{job['id']}", headers=admin).json["status"] == "pending"


def test_cancel_missing_job_is_404(client, admin):
    assert client.post("/jobs/999/cancel", headers=admin).status_code == 404


@pytest.mark.parametrize("state", ["completed", "failed", "cancelled"])
def test_cancel_of_a_finished_job_is_409_and_changes_nothing(client, producer, worker, admin,
                                                           state):
    job = enqueue(client, producer)
    if state != "cancelled":
        claim(client, worker)
    if state == "completed":
        client.post(f"/jobs/{job['id']}/complete", json={"attempt": 1}, headers=worker)
    elif state == "failed":
        fail(client, worker, job, 1, retry=False)
    elif state == "cancelled":
        client.post(f"/jobs/{job['id']}/cancel", headers=producer)
    before = client.get(f"/jobs/{job['id']}", headers=admin).json
    assert before["status"] == state
    for who in (producer, admin):
        resp = client.post(f"/jobs/{job['id']}/cancel", headers=who)
        assert resp.status_code == 409
        assert resp.headers["Content-Type"] == "application/problem+json"
    assert client.get(f"/jobs/{job['id']}", headers=admin).json == before


# -- admin retry ---------------------------------------------------------------------
def test_retry_a_failed_job_with_fresh_retries_keeping_history(client, producer, worker, admin,
                                                               clock):
    job = enqueue(client, producer, max_retries=1)
    claim(client, worker)
    fail(client, worker, job, 1)
    clock.advance(10)
    claim(client, worker)
    assert fail(client, worker, job, 2).json["status"] == "failed"  # retries used up
    clock.advance(5)
    resp = client.post(f"/jobs/{job['id']}/retry", headers=admin)
    assert resp.status_code == 200
    back = resp.json
    assert back["status"] == "pending" and back["retry_count"] == 0
    assert back["attempt"] == 2  # never decreases
    assert back["run_at"] == isoformat(clock.now) and back["finished_at"] is None
    again = claim(client, worker).json
    assert again["attempt"] == 3
    # Fresh retries: one more failure goes back to pending, not to failed.
    assert fail(client, worker, job, 3).json["status"] == "pending"
    history = client.get(f"/jobs/{job['id']}", headers=admin).json["attempts"]
    assert [(a["attempt"], a["outcome"]) for a in history] == \
        [(1, "failed"), (2, "failed"), (3, "failed")]


def test_retry_a_cancelled_job(client, producer, worker, admin):
    job = enqueue(client, producer)
    client.post(f"/jobs/{job['id']}/cancel", headers=producer)
    back = client.post(f"/jobs/{job['id']}/retry", headers=admin).json
    assert back["status"] == "pending" and back["attempt"] == 0
    assert claim(client, worker).json["attempt"] == 1


def test_retry_wakes_a_long_poll_at_once(client, producer, worker, admin):
    job = failed_job(client, producer, worker)
    client.post(f"/jobs/{job['id']}/retry", headers=admin)
    assert client.post("/jobs/claim", json={"wait": 5}, headers=worker).json["attempt"] == 2


@pytest.mark.parametrize("state", ["pending", "running", "completed"])
def test_retry_outside_failed_or_cancelled_is_409(client, producer, worker, admin, state):
    job = enqueue(client, producer)
    if state != "pending":
        claim(client, worker)
    if state == "completed":
        client.post(f"/jobs/{job['id']}/complete", json={"attempt": 1}, headers=worker)
    before = client.get(f"/jobs/{job['id']}", headers=admin).json
    assert client.post(f"/jobs/{job['id']}/retry", headers=admin).status_code == 409
    assert client.get(f"/jobs/{job['id']}", headers=admin).json == before


def test_only_admins_retry(client, producer, worker, admin, make_user):
    job = failed_job(client, producer, worker)
    viewer = make_user("vera", "viewer")
    for who in (producer, worker):
        assert client.post(f"/jobs/{job['id']}/retry", headers=who).status_code == 403
    resp = client.post(f"/jobs/{job['id']}/retry", headers=viewer, json={})
    assert resp.status_code == 403
    assert client.get(f"/jobs/{job['id']}", headers=admin).json["status"] == "failed"


def test_retry_missing_job_is_404(client, admin):
    assert client.post("/jobs/4242/retry", headers=admin).status_code == 404
