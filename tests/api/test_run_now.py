"""POST /jobs/{id}/run (admin): a delayed or retrying pending job becomes due now, audited,
waking waiting claims; 409 for any other status."""
from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from helpers import claim, enqueue, problem

from queuelog.model.jobs import isoformat


@pytest.fixture
def config() -> dict[str, Any]:
    """A safety-net look far off, so only a wake-up can answer a waiting claim soon."""
    return {"LONG_POLL_LOOK_SECONDS": 60}


def run(client: Any, headers: dict[str, str], job_id: int) -> Any:
    """POST /jobs/{id}/run; return the response."""
    return client.post(f"/jobs/{job_id}/run", headers=headers)


def test_a_delayed_job_becomes_due_now(client, producer, worker, admin, clock):
    job = enqueue(client, producer, delay_seconds=3600)
    assert claim(client, worker).status_code == 204
    clock.advance(5)
    resp = run(client, admin, job["id"])
    assert resp.status_code == 200
    assert resp.json["status"] == "pending" and resp.json["run_at"] == isoformat(clock.now)
    assert claim(client, worker).json["id"] == job["id"]


def test_a_job_waiting_out_its_backoff_runs_now(client, producer, worker, admin):
    job = enqueue(client, producer)
    claim(client, worker)
    back = client.post(f"/jobs/{job['id']}/fail", json={"attempt": 1, "error": "x",
                                                        "retry_in": 3600}, headers=worker)
    assert back.json["status"] == "pending"
    assert claim(client, worker).status_code == 204
    assert run(client, admin, job["id"]).status_code == 200
    again = claim(client, worker).json
    assert again["id"] == job["id"] and again["attempt"] == 2 and again["retry_count"] == 1


def test_it_is_audited(client, producer, admin):
    job = enqueue(client, producer, delay_seconds=60)
    run(client, admin, job["id"])
    event = client.get("/audit?action=job.run", headers=admin).json["events"][0]
    assert (event["actor"], event["target"]) == ("root", str(job["id"]))


def test_a_pending_job_already_due_is_answered_unchanged(client, producer, admin):
    job = enqueue(client, producer)
    resp = run(client, admin, job["id"])
    assert resp.status_code == 200 and resp.json["status"] == "pending"
    assert resp.json["run_at"] == job["run_at"] and resp.json["updated_at"] == job["updated_at"]
    assert client.get("/audit?action=job.run", headers=admin).json["events"] == []


@pytest.mark.parametrize("state", ["running", "completed", "failed", "cancelled"])
def test_any_other_status_is_409_and_changes_nothing(client, producer, worker, admin, state):
    job = enqueue(client, producer)
    if state == "cancelled":
        client.post(f"/jobs/{job['id']}/cancel", headers=admin)
    else:
        claim(client, worker)
    if state == "completed":
        client.post(f"/jobs/{job['id']}/complete", json={"attempt": 1}, headers=worker)
    if state == "failed":
        client.post(f"/jobs/{job['id']}/fail", json={"attempt": 1, "error": "x",
                                                     "retry": False}, headers=worker)
    before = client.get(f"/jobs/{job['id']}", headers=admin).json
    assert before["status"] == state
    problem(run(client, admin, job["id"]), 409)
    assert client.get(f"/jobs/{job['id']}", headers=admin).json == before


def test_only_admins_run_now(client, producer, worker, admin, make_user):
    job = enqueue(client, producer, delay_seconds=60)
    viewer = make_user("vera", "viewer")
    for who in (producer, worker):
        problem(run(client, who, job["id"]), 403)
    problem(client.post(f"/jobs/{job['id']}/run", headers=viewer, json={}), 403)
    problem(client.post(f"/jobs/{job['id']}/run"), 401)
    assert client.get(f"/jobs/{job['id']}", headers=admin).json["run_at"] == job["run_at"]


def test_a_missing_job_is_404_and_a_body_field_422(client, producer, admin):
    problem(run(client, admin, 987654), 404)
    job = enqueue(client, producer, delay_seconds=60)
    problem(client.post(f"/jobs/{job['id']}/run", json={"now": True}, headers=admin), 422)


def test_a_waiting_claim_is_woken_at_once(app, client, producer, worker, admin):
    job = enqueue(client, producer, delay_seconds=3600)
    answers: list[Any] = []

    def poll() -> None:
        started = time.monotonic()
        resp = app.test_client().post("/jobs/claim", json={"wait": 20}, headers=worker)
        answers.append((resp, time.monotonic() - started))
    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    time.sleep(0.3)  # real time: the claim is asleep in its long poll by now
    assert run(client, admin, job["id"]).status_code == 200
    thread.join(25)
    resp, took = answers[0]
    assert resp.status_code == 200 and resp.json["id"] == job["id"]
    assert took < 5  # woken, not the 60 s safety net nor the 20 s wait
