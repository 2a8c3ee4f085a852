"""POST /jobs and POST /jobs/{id}/cancel: success shapes, defaults, roles and errors."""
from __future__ import annotations

import re
from typing import Any

import pytest
from helpers import SQLITE_ONLY, add_user, problem

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
JOB_FIELDS = ["id", "type", "payload", "priority", "status", "attempt", "retry_count",
              "max_retries", "idempotency_key", "producer", "worker_id", "run_at", "claimed_at",
              "lease_expires_at", "result", "created_at", "updated_at", "finished_at", "schedule",
              "scheduled_for", "progress", "depends_on", "on_parent_failure",
              "cancelled_by_parent", "traceparent", "tracestate"]


@pytest.fixture
def config() -> dict[str, Any]:
    """A type with its own max_retries and payload limit."""
    return {"JOB_TYPES": {"email": {}, "pdf": {}, "sync": {},
                          "report": {"max_retries": 7, "max_payload_bytes": 40}}}


def test_enqueue_answers_201_with_the_job_and_its_location(client, producer, clock):
    resp = client.post("/jobs", json={"type": "email", "payload": {"to": "a@b.c"},
                                      "priority": "medium", "max_retries": 5}, headers=producer)
    assert resp.status_code == 201
    job = resp.json
    assert resp.headers["Location"] == f"/jobs/{job['id']}"
    assert sorted(job) == sorted(JOB_FIELDS)  # no error field for a producer
    assert job["payload"] == {"to": "a@b.c"} and job["priority"] == "medium"
    assert (job["status"], job["attempt"], job["retry_count"], job["max_retries"]) == (
        "pending", 0, 0, 5)
    assert job["producer"] == "billing" and job["worker_id"] is None
    assert ISO.match(job["run_at"]) and job["run_at"] == job["created_at"] == job["updated_at"]
    assert job["run_at"] == "2026-05-28T20:26:40.000000Z"  # the fake clock's instant
    assert job["claimed_at"] is job["finished_at"] is job["result"] is None
    assert client.get(resp.headers["Location"], headers=producer).json["id"] == job["id"]


def test_the_location_is_the_jobs_url_under_a_mount_point_too(app, client, producer):
    """The Location header is written out (not url_for): it equals url_for's, mounted
    under a prefix (SCRIPT_NAME) as well as at the root."""
    from flask import url_for
    for root in ("", "/queue"):
        resp = client.post("/jobs", json={"type": "email", "payload": {}}, headers=producer,
                           base_url=f"http://localhost{root}")
        assert resp.status_code == 201
        with app.test_request_context(base_url=f"http://localhost{root}"):
            want = url_for("read.get_job", job_id=resp.json["id"])
        assert resp.headers["Location"] == want == f"{root}/jobs/{resp.json['id']}"


def test_enqueue_defaults(client, producer):
    job = client.post("/jobs", json={"type": "email"}, headers=producer).json
    assert (job["priority"], job["max_retries"], job["payload"]) == ("low", 3, {})
    assert client.post("/jobs", json={"type": "report"}, headers=producer).json[
        "max_retries"] == 7


@pytest.mark.parametrize("label", ["low", "medium", "high", "critical"])
def test_admin_may_enqueue_at_any_priority(client, admin, label):
    resp = client.post("/jobs", json={"type": "pdf", "priority": label}, headers=admin)
    assert resp.status_code == 201 and resp.json["priority"] == label
    assert resp.json["producer"] == "root" and resp.json["error"] is None


def test_a_past_run_at_is_stored_as_the_enqueue_time(client, producer, worker, clock):
    now = client.post("/jobs", json={"type": "email"}, headers=producer).json
    backdated = client.post("/jobs", json={"type": "email", "run_at": "2001-01-01T00:00:00Z"},
                            headers=producer).json
    assert backdated["run_at"] == backdated["created_at"] == "2026-05-28T20:26:40.000000Z"
    # Same priority, same run_at: the older job goes first; backdating jumped no queue.
    assert client.post("/jobs/claim", headers=worker).json["id"] == now["id"]


def test_null_optional_fields_mean_left_out(client, producer):
    job = client.post("/jobs", json={"type": "email", "priority": None, "max_retries": None,
                                     "run_at": None, "delay_seconds": None,
                                     "idempotency_key": None}, headers=producer)
    assert job.status_code == 201
    assert (job.json["priority"], job.json["max_retries"]) == ("low", 3)


def test_enqueue_run_at_and_delay_seconds(client, producer, clock):
    at = client.post("/jobs", json={"type": "email", "run_at": "2030-01-02T03:04:05+02:00"},
                     headers=producer).json
    assert at["run_at"] == "2030-01-02T01:04:05.000000Z"
    later = client.post("/jobs", json={"type": "email", "delay_seconds": 90.5},
                        headers=producer).json
    assert later["run_at"] == "2026-05-28T20:28:10.500000Z"


@SQLITE_ONLY
@pytest.mark.parametrize("body, field", [
    ({"type": "fax"}, "type"),
    ({}, "type"),
    ({"type": "email", "payload": [1, 2]}, "payload"),
    ({"type": "email", "payload": "text"}, "payload"),
    ({"type": "email", "payload": None}, "payload"),  # null is not an object (contract)
    ({"type": "report", "payload": {"x": "y" * 40}}, "payload"),  # over the type's limit
    ({"type": "email", "priority": "urgent"}, "priority"),
    ({"type": "email", "priority": 20}, "priority"),
    ({"type": "email", "max_retries": 26}, "max_retries"),
    ({"type": "email", "max_retries": -1}, "max_retries"),
    ({"type": "email", "max_retries": True}, "max_retries"),
    ({"type": "email", "max_retries": 2.5}, "max_retries"),
    ({"type": "email", "run_at": "2030-01-02T03:04:05"}, "run_at"),
    ({"type": "email", "run_at": "tomorrow"}, "run_at"),
    ({"type": "email", "delay_seconds": -1}, "delay_seconds"),
    ({"type": "email", "delay_seconds": 1, "run_at": "2030-01-02T03:04:05Z"}, "delay_seconds"),
    ({"type": "email", "idempotency_key": ""}, "idempotency_key"),
    ({"type": "email", "idempotency_key": "k" * 256}, "idempotency_key"),
    ({"type": "email", "idempotency_key": "tab\there"}, "idempotency_key"),
    ({"type": "email", "idempotency_key": "caf\u00e9"}, "idempotency_key"),
    ({"type": "email", "worker_id": "x"}, "worker_id"),
    ({"type": "email", "status": "completed"}, "status"),
])
def test_enqueue_validation_is_422_naming_the_field(client, producer, store, body, field):
    body_out = problem(client.post("/jobs", json=body, headers=producer), 422)
    assert body_out["type"].endswith("validation-error")
    assert field in [e["field"] for e in body_out["errors"]]
    assert all(set(e) == {"field", "detail"} for e in body_out["errors"])
    assert store.list_jobs().jobs == []


def test_enqueue_reports_every_bad_field_at_once(client, producer):
    body = problem(client.post("/jobs", json={"type": "fax", "priority": "x", "bogus": 1},
                               headers=producer), 422)
    assert {e["field"] for e in body["errors"]} == {"type", "priority", "bogus"}


@pytest.mark.parametrize("role", ["worker", "metrics"])
def test_other_key_roles_may_not_enqueue(client, make_key, role):
    problem(client.post("/jobs", json={"type": "email"}, headers=make_key("k", role)), 403)


def test_viewer_may_not_enqueue(client, store):
    viewer = add_user(store, "vera", "viewer")
    problem(client.post("/jobs", json={"type": "email"}, headers=viewer), 403)


def test_cancel_own_pending_job(client, producer):
    job = client.post("/jobs", json={"type": "email"}, headers=producer).json
    resp = client.post(f"/jobs/{job['id']}/cancel", headers=producer)
    assert resp.status_code == 200
    assert resp.json["status"] == "cancelled" and resp.json["finished_at"] is not None
    assert client.post(f"/jobs/{job['id']}/cancel", json={}, headers=producer).status_code == 409


def test_cancel_errors(client, producer, make_key, worker, admin):
    job = client.post("/jobs", json={"type": "email"}, headers=producer).json
    other = make_key("shop", "producer")
    problem(client.post(f"/jobs/{job['id']}/cancel", headers=other), 404)
    problem(client.post("/jobs/424242/cancel", headers=producer), 404)
    problem(client.post(f"/jobs/{job['id']}/cancel", headers=worker), 403)
    claimed = client.post("/jobs/claim", headers=worker).json
    client.post(f"/jobs/{claimed['id']}/complete", json={"attempt": 1}, headers=worker)
    body = problem(client.post(f"/jobs/{claimed['id']}/cancel", headers=producer), 409)
    assert body["type"].endswith("wrong-state")
    assert client.get(f"/jobs/{job['id']}", headers=admin).json["status"] == "completed"


def test_admin_cancels_any_producers_job(client, producer, admin):
    job = client.post("/jobs", json={"type": "email"}, headers=producer).json
    resp = client.post(f"/jobs/{job['id']}/cancel", headers=admin)
    assert resp.status_code == 200 and resp.json["status"] == "cancelled"


def test_cancel_with_malformed_body_is_400_and_changes_nothing(client, producer):
    job = client.post("/jobs", json={"type": "email"}, headers=producer).json
    resp = client.post(f"/jobs/{job['id']}/cancel", data="{nope",
                       content_type="application/json", headers=producer)
    problem(resp, 400)
    assert client.get(f"/jobs/{job['id']}", headers=producer).json["status"] == "pending"


def test_idempotent_replay_returns_the_first_job(client, producer):
    body = {"type": "email", "payload": {"n": 1}, "idempotency_key": "order-7"}
    first = client.post("/jobs", json=body, headers=producer)
    again = client.post("/jobs", json=body, headers=producer)
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json == first.json and again.json["idempotency_key"] == "order-7"


def test_replay_treats_an_omitted_field_as_its_default(client, producer):
    sent = client.post("/jobs", json={"type": "email", "idempotency_key": "k"},
                       headers=producer)
    explicit = client.post("/jobs", json={"type": "email", "payload": {}, "priority": "low",
                                          "max_retries": 3, "idempotency_key": "k"},
                           headers=producer)
    assert explicit.status_code == 200 and explicit.json["id"] == sent.json["id"]


def test_replay_treats_delay_zero_as_omitted_and_equal_numbers_as_equal(client, producer):
    first = client.post("/jobs", json={"type": "email", "idempotency_key": "now"},
                        headers=producer)
    for delay in (0, 0.0):
        again = client.post("/jobs", json={"type": "email", "delay_seconds": delay,
                                           "idempotency_key": "now"}, headers=producer)
        assert again.status_code == 200 and again.json["id"] == first.json["id"]
    later = client.post("/jobs", json={"type": "email", "delay_seconds": 5,
                                       "idempotency_key": "later"}, headers=producer)
    same = client.post("/jobs", json={"type": "email", "delay_seconds": 5.0,
                                      "idempotency_key": "later"}, headers=producer)
    assert same.status_code == 200 and same.json["id"] == later.json["id"]
    other = client.post("/jobs", json={"type": "email", "delay_seconds": 6,
                                       "idempotency_key": "later"}, headers=producer)
    assert other.status_code == 422 and other.json["type"].endswith("idempotency-key-mismatch")


@pytest.mark.parametrize("key", ["k", "a b", "a" * 255, "a" * 256, "é", "k~!"],
                         ids=["one", "inner-blank", "max", "over", "not-ascii", "symbols"])
def test_the_key_rule_is_one_for_the_body_the_header_and_the_document(client, producer, key):
    """bodies.IDEMPOTENCY_KEY decides the field, the header and the published header pattern
    alike: a key taken in one place is taken in all three."""
    from queuelog.server.requests.openapi import KEY_HEADER
    as_field = client.post("/jobs", json={"type": "email", "idempotency_key": key},
                           headers=producer)
    as_header = client.post("/jobs", json={"type": "email"},
                            headers={**producer, "Idempotency-Key": key})
    taken = as_field.status_code in (200, 201)
    assert as_field.status_code in (200, 201, 422) and as_header.status_code in (200, 201, 422)
    assert (as_header.status_code in (200, 201)) == taken, (as_field.json, as_header.json)
    assert (re.fullmatch(KEY_HEADER, key) is not None) == taken
    assert taken == (1 <= len(key) <= 255 and key.isascii())
