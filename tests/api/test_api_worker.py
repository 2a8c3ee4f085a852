"""The worker calls: claim (and its 204), heartbeat, complete, fail; their guards and errors."""
from __future__ import annotations

import time
from typing import Any

import pytest
from helpers import SQLITE_ONLY, enqueue, problem



@pytest.fixture
def config() -> dict[str, Any]:
    """A type with its own lease."""
    return {"JOB_TYPES": {"email": {}, "pdf": {"lease_seconds": 900}, "sync": {}}}


def test_claim_returns_the_job_or_204(client, producer, worker, clock):
    assert client.post("/jobs/claim", headers=worker).status_code == 204
    job = enqueue(client, producer)
    resp = client.post("/jobs/claim", headers=worker)
    assert resp.status_code == 200
    got = resp.json
    assert (got["id"], got["status"], got["attempt"], got["worker_id"]) == (
        job["id"], "running", 1, "mailer-1")
    assert got["claimed_at"] == "2026-05-28T20:26:40.000000Z"
    assert got["lease_expires_at"] == "2026-05-28T20:31:40.000000Z"  # LEASE_SECONDS=300
    assert "error" not in got and got["idempotency_key"] is None
    empty = client.post("/jobs/claim", json={}, headers=worker)
    assert empty.status_code == 204 and empty.data == b""


def test_claim_order_over_http(client, admin, worker):
    low = enqueue(client, admin, priority="low")
    crit = enqueue(client, admin, priority="critical")
    high = enqueue(client, admin, priority="high")
    order = [client.post("/jobs/claim", headers=worker).json["id"] for _ in range(3)]
    assert order == [crit["id"], high["id"], low["id"]]


def test_claim_lease_seconds_and_type_default_lease(client, producer, worker):
    enqueue(client, producer, "email")
    enqueue(client, producer, "pdf")
    got = client.post("/jobs/claim", json={"types": ["email"], "lease_seconds": 60},
                      headers=worker).json
    assert got["type"] == "email" and got["lease_expires_at"] == "2026-05-28T20:27:40.000000Z"
    pdf = client.post("/jobs/claim", json={"types": ["pdf"]}, headers=worker).json
    assert pdf["lease_expires_at"] == "2026-05-28T20:41:40.000000Z"  # the type's 900 s


def test_claim_types_must_be_within_the_keys_types(client, producer, make_key):
    limited = make_key("pdf-worker", "worker", types=["pdf"])
    enqueue(client, producer, "email")
    problem(client.post("/jobs/claim", json={"types": ["email"]}, headers=limited), 403)
    problem(client.post("/jobs/claim", json={"types": ["pdf", "email"]}, headers=limited), 403)
    assert client.post("/jobs/claim", headers=limited).status_code == 204  # email not for it
    pdf = enqueue(client, producer, "pdf")
    assert client.post("/jobs/claim", json={"types": ["pdf"]}, headers=limited).json[
        "id"] == pdf["id"]


@SQLITE_ONLY
@pytest.mark.parametrize("body, field", [
    ({"types": ["fax"]}, "types[0]"),
    ({"types": []}, "types"),
    ({"types": "email"}, "types"),
    ({"wait": 31}, "wait"),
    ({"wait": -1}, "wait"),
    ({"wait": "1"}, "wait"),
    ({"lease_seconds": 0}, "lease_seconds"),
    ({"lease_seconds": 43201}, "lease_seconds"),
    ({"lease": 5}, "lease"),
])
def test_claim_validation(client, producer, worker, body, field, store):
    enqueue(client, producer)
    out = problem(client.post("/jobs/claim", json=body, headers=worker), 422, "validation-error")
    assert field in [e["field"] for e in out["errors"]]
    assert store.list_jobs().jobs[0].status.value == "pending"


@pytest.mark.parametrize("role", ["producer", "admin", "metrics"])
def test_only_workers_claim(client, make_key, role):
    problem(client.post("/jobs/claim", headers=make_key("k", role)), 403)


def test_long_poll_ends_with_204(client, worker):
    start = time.monotonic()
    assert client.post("/jobs/claim", json={"wait": 0.2}, headers=worker).status_code == 204
    assert 0.2 <= time.monotonic() - start < 2


def test_heartbeat_extends_the_lease(client, producer, worker, clock):
    job = enqueue(client, producer)
    client.post("/jobs/claim", json={"lease_seconds": 60}, headers=worker)
    clock.advance(50)
    resp = client.post(f"/jobs/{job['id']}/heartbeat", json={"attempt": 1}, headers=worker)
    assert resp.status_code == 200
    assert resp.json["lease_expires_at"] == "2026-05-28T20:28:30.000000Z"  # now + the claim's 60
    short = client.post(f"/jobs/{job['id']}/heartbeat", json={"attempt": 1,
                                                              "lease_seconds": 10},
                        headers=worker)
    assert short.json["lease_expires_at"] == "2026-05-28T20:27:40.000000Z"


def test_complete_with_result(client, producer, worker, admin):
    job = enqueue(client, producer)
    client.post("/jobs/claim", headers=worker)
    resp = client.post(f"/jobs/{job['id']}/complete", json={"attempt": 1, "result": {"n": 2}},
                       headers=worker)
    assert resp.status_code == 200
    assert (resp.json["status"], resp.json["result"]) == ("completed", {"n": 2})
    assert resp.json["finished_at"] and resp.json["lease_expires_at"] is None
    attempts = client.get(f"/jobs/{job['id']}", headers=admin).json["attempts"]
    assert [(a["attempt"], a["worker_id"], a["outcome"]) for a in attempts] == [
        (1, "mailer-1", "completed")]


def test_fail_goes_back_to_pending_after_backoff_then_failed(client, producer, worker, clock):
    job = enqueue(client, producer, max_retries=1)
    client.post("/jobs/claim", headers=worker)
    first = client.post(f"/jobs/{job['id']}/fail", json={"attempt": 1, "error": "boom"},
                        headers=worker)
    assert first.status_code == 200
    assert (first.json["status"], first.json["retry_count"]) == ("pending", 1)
    assert "error" not in first.json  # workers never read error text back (V-10)
    assert first.json["run_at"] > "2026-05-28T20:26:40.000000Z"
    assert client.post("/jobs/claim", headers=worker).status_code == 204
    clock.advance(2)  # the first retry's backoff is at most RETRY_BACKOFF_SECONDS
    again = client.post("/jobs/claim", headers=worker).json
    assert again["attempt"] == 2
    final = client.post(f"/jobs/{job['id']}/fail", json={"attempt": 2, "error": "boom"},
                        headers=worker)
    assert final.json["status"] == "failed" and final.json["finished_at"]


def test_fail_without_retry_and_with_retry_in(client, producer, worker):
    a = enqueue(client, producer)
    b = enqueue(client, producer)
    client.post("/jobs/claim", headers=worker)
    client.post("/jobs/claim", headers=worker)
    dead = client.post(f"/jobs/{a['id']}/fail", json={"attempt": 1, "error": "x",
                                                      "retry": False}, headers=worker)
    assert dead.json["status"] == "failed" and dead.json["retry_count"] == 0
    later = client.post(f"/jobs/{b['id']}/fail", json={"attempt": 1, "error": "x",
                                                       "retry_in": 3600}, headers=worker)
    assert later.json["status"] == "pending"
    assert later.json["run_at"] == "2026-05-28T21:26:40.000000Z"


@pytest.mark.parametrize("verb, extra", [("heartbeat", {}), ("complete", {"result": {}}),
                                         ("fail", {"error": "x"})])
def test_worker_call_errors(client, producer, worker, make_key, admin, verb, extra):
    job = enqueue(client, producer)
    other = make_key("mailer-2", "worker")
    url = f"/jobs/{job['id']}/{verb}"
    problem(client.post(url, json={"attempt": 1, **extra}, headers=worker), 409, "not-holder")
    client.post("/jobs/claim", headers=worker)
    before = client.get(f"/jobs/{job['id']}", headers=admin).json
    problem(client.post(url, json={"attempt": 1, **extra}, headers=other), 409, "not-holder")
    problem(client.post(url, json={"attempt": 2, **extra}, headers=worker), 409,
            "stale-attempt")
    problem(client.post("/jobs/987654/" + verb, json={"attempt": 1, **extra}, headers=worker),
            404)
    problem(client.post(url, json={**extra}, headers=worker), 422)  # attempt is required
    problem(client.post(url, json={"attempt": "1", **extra}, headers=worker), 422)
    problem(client.post(url, json={"attempt": 1, "bogus": 1, **extra}, headers=worker), 422)
    problem(client.post(url, json={"attempt": 1, **extra}, headers=producer), 403)
    problem(client.post(url, json={"attempt": 1, **extra}, headers=admin), 403)
    assert client.get(f"/jobs/{job['id']}", headers=admin).json == before
    client.post(f"/jobs/{job['id']}/complete", json={"attempt": 1}, headers=worker)
    if verb != "complete":
        problem(client.post(url, json={"attempt": 1, **extra}, headers=worker), 409,
                "wrong-state")


@SQLITE_ONLY
@pytest.mark.parametrize("body", [
    {"attempt": 1, "result": [1]},
    {"attempt": 1, "result": "done"},
    {"attempt": 0},
    {"attempt": 2**31},
])
def test_complete_validation(client, producer, worker, body):
    job = enqueue(client, producer)
    client.post("/jobs/claim", headers=worker)
    problem(client.post(f"/jobs/{job['id']}/complete", json=body, headers=worker), 422)


@SQLITE_ONLY
@pytest.mark.parametrize("body", [
    {"attempt": 1, "error": 5},
    {"attempt": 1, "error": "x", "retry": "yes"},
    {"attempt": 1, "error": "x", "retry_in": 86401},
    {"attempt": 1, "error": "x", "retry_in": -1},
])
def test_fail_validation(client, producer, worker, body, admin):
    job = enqueue(client, producer)
    client.post("/jobs/claim", headers=worker)
    problem(client.post(f"/jobs/{job['id']}/fail", json=body, headers=worker), 422)
    assert client.get(f"/jobs/{job['id']}", headers=admin).json["status"] == "running"


def test_admin_retry(client, producer, worker, admin):
    job = enqueue(client, producer, max_retries=0)
    client.post("/jobs/claim", headers=worker)
    client.post(f"/jobs/{job['id']}/fail", json={"attempt": 1, "error": "x"}, headers=worker)
    problem(client.post(f"/jobs/{job['id']}/retry", headers=producer), 403)
    problem(client.post(f"/jobs/{job['id']}/retry", headers=worker), 403)
    resp = client.post(f"/jobs/{job['id']}/retry", headers=admin)
    assert resp.status_code == 200
    assert (resp.json["status"], resp.json["retry_count"], resp.json["attempt"]) == (
        "pending", 0, 1)
    problem(client.post(f"/jobs/{job['id']}/retry", headers=admin), 409, "wrong-state")
    problem(client.post("/jobs/987654/retry", headers=admin), 404)
    assert client.post("/jobs/claim", headers=worker).json["attempt"] == 2
