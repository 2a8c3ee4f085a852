"""GET /jobs, GET /jobs/{id}, /healthz, /metrics, /openapi.json: shapes, paging, visibility."""
from __future__ import annotations

from typing import Any

import pytest
from helpers import SQLITE_ONLY, add_user, enqueue, failing_statements, problem


def walk(client: Any, headers: dict[str, str], query: str = "") -> list[int]:
    """Follow next_cursor from the first page to the last; return the ids in order."""
    ids: list[int] = []
    url = f"/jobs?{query}"
    for _ in range(500):
        resp = client.get(url, headers=headers)
        assert resp.status_code == 200
        ids += [j["id"] for j in resp.json["jobs"]]
        cursor = resp.json["next_cursor"]
        if cursor is None:
            return ids
        assert isinstance(cursor, str)
        url = f"/jobs?{query}&cursor={cursor}"
    raise AssertionError("paging did not end")


def test_list_pages_visit_every_job_once_newest_first(client, admin):
    ids = [enqueue(client, admin, ("email", "pdf", "sync")[i % 3],
                   priority=("low", "high")[i % 2])["id"] for i in range(12)]
    first = client.get("/jobs?limit=5", headers=admin).json
    assert set(first) == {"jobs", "next_cursor"} and len(first["jobs"]) == 5
    assert walk(client, admin, "limit=5") == ids[::-1]
    assert walk(client, admin, "limit=200") == ids[::-1]
    assert walk(client, admin) == ids[::-1]  # default limit 50
    assert walk(client, admin, "limit=2&type=pdf") == ids[1::3][::-1]
    assert walk(client, admin, "limit=1&priority=high&type=email") == ids[3::6][::-1]
    client.post(f"/jobs/{ids[4]}/cancel", headers=admin)
    assert walk(client, admin, "status=cancelled") == [ids[4]]
    assert len(walk(client, admin, "limit=3&status=pending")) == 11
    assert client.get("/jobs?type=nothing", headers=admin).json == {"jobs": [],
                                                                    "next_cursor": None}


def test_a_job_enqueued_while_paging_does_not_shift_pages(client, admin):
    ids = [enqueue(client, admin)["id"] for _ in range(4)]
    page = client.get("/jobs?limit=2", headers=admin).json
    enqueue(client, admin)
    rest = client.get(f"/jobs?limit=2&cursor={page['next_cursor']}", headers=admin).json
    assert [j["id"] for j in rest["jobs"]] == [ids[1], ids[0]]


@SQLITE_ONLY
@pytest.mark.parametrize("query, field", [
    ("limit=0", "limit"), ("limit=201", "limit"), ("limit=abc", "limit"), ("limit=-1", "limit"),
    ("limit=%D9%A3", "limit"), ("status=done", "status"), ("priority=urgent", "priority"),
    ("cursor=garbage!", "cursor"), ("cursor=djI6MQ", "cursor"), ("cursor=", "cursor"),
])
def test_list_query_validation(client, admin, query, field):
    body = problem(client.get(f"/jobs?{query}", headers=admin), 422)
    assert [e["field"] for e in body["errors"]] == [field]


def test_get_job_with_attempts(client, producer, worker, admin, clock):
    job = enqueue(client, producer)
    client.post("/jobs/claim", headers=worker)
    clock.advance(1)
    client.post(f"/jobs/{job['id']}/fail", json={"attempt": 1, "error": "boom"}, headers=worker)
    clock.advance(5)
    client.post("/jobs/claim", headers=worker)
    got = client.get(f"/jobs/{job['id']}", headers=admin).json
    assert got["attempt"] == 2 and got["error"] == "boom"
    assert got["attempts"] == [
        {"attempt": 1, "worker_id": "mailer-1", "started_at": "2026-05-28T20:26:40.000000Z",
         "finished_at": "2026-05-28T20:26:41.000000Z", "outcome": "failed", "error": "boom"},
        {"attempt": 2, "worker_id": "mailer-1", "started_at": "2026-05-28T20:26:46.000000Z",
         "finished_at": None, "outcome": "running", "error": None}]
    problem(client.get("/jobs/987654", headers=admin), 404)


def test_producer_sees_only_its_own_jobs(client, producer, make_key):
    shop = make_key("shop", "producer")
    mine = enqueue(client, producer)
    theirs = enqueue(client, shop)
    assert walk(client, producer) == [mine["id"]]
    assert walk(client, shop) == [theirs["id"]]
    problem(client.get(f"/jobs/{theirs['id']}", headers=producer), 404)
    assert client.get(f"/jobs/{mine['id']}", headers=producer).status_code == 200


def test_worker_sees_jobs_it_holds_or_held(client, producer, worker, make_key):
    other = make_key("mailer-2", "worker")
    held = enqueue(client, producer)
    never = enqueue(client, producer)
    client.post("/jobs/claim", headers=worker)
    client.post(f"/jobs/{held['id']}/fail", json={"attempt": 1, "error": "x", "retry_in": 0},
                headers=worker)
    assert client.post("/jobs/claim", headers=other).json["id"] == held["id"]
    assert walk(client, worker) == [held["id"]]  # held it before
    assert walk(client, other) == [held["id"]]   # holds it now
    assert client.get(f"/jobs/{held['id']}", headers=worker).status_code == 200
    problem(client.get(f"/jobs/{never['id']}", headers=worker), 404)


def test_viewer_sees_all_jobs_without_error_text(client, producer, worker, store):
    viewer = add_user(store, "vera", "viewer")
    job = enqueue(client, producer, idempotency_key="k-1")
    client.post("/jobs/claim", headers=worker)
    client.post(f"/jobs/{job['id']}/fail", json={"attempt": 1, "error": "secret stuff"},
                headers=worker)
    listed = client.get("/jobs", headers=viewer).json["jobs"]
    assert [j["id"] for j in listed] == [job["id"]]
    got = client.get(f"/jobs/{job['id']}", headers=viewer).json
    for shown in (listed[0], got, *got["attempts"]):
        assert "error" not in shown
    assert got["idempotency_key"] is None and listed[0]["idempotency_key"] is None
    assert "secret stuff" not in client.get(f"/jobs/{job['id']}", headers=viewer).get_data(
        as_text=True)


def test_idempotency_key_only_for_its_producer_and_admins(client, producer, worker, admin,
                                                          make_key):
    job = enqueue(client, producer, idempotency_key="k-1")
    assert client.get(f"/jobs/{job['id']}", headers=producer).json["idempotency_key"] == "k-1"
    assert client.get(f"/jobs/{job['id']}", headers=admin).json["idempotency_key"] == "k-1"
    assert client.get("/jobs", headers=admin).json["jobs"][0]["idempotency_key"] == "k-1"
    claimed = client.post("/jobs/claim", headers=worker).json
    assert claimed["idempotency_key"] is None
    assert client.get(f"/jobs/{job['id']}", headers=worker).json["idempotency_key"] is None


def test_healthz_needs_no_credentials(client):
    resp = client.get("/healthz")
    assert resp.status_code == 200 and resp.json == {"status": "ok"}


def test_healthz_is_503_when_the_database_does_not_answer(client, store):
    with failing_statements(store.engine, "SELECT 1") as failed:
        problem(client.get("/healthz"), 503)
    assert failed
    assert client.get("/healthz").status_code == 200


def test_metrics_for_admin_and_metrics_keys(client, producer, admin, make_key, store):
    enqueue(client, producer, "email")
    enqueue(client, producer, "email")
    enqueue(client, producer, "pdf")
    scraper = make_key("prom", "metrics")
    for headers in (admin, scraper):
        resp = client.get("/metrics", headers=headers)
        assert resp.status_code == 200 and resp.mimetype == "text/plain"
        text = resp.get_data(as_text=True)
        assert 'queuelog_jobs{status="pending",type="email"} 2' in text
        assert 'queuelog_jobs{status="pending",type="pdf"} 1' in text
        # zeros are series too: every status of every configured type is there
        assert 'queuelog_jobs{status="failed",type="sync"} 0' in text
        assert all(line.startswith(("#", "queuelog_")) for line in text.splitlines())
    problem(client.get("/metrics", headers=producer), 403)
    problem(client.get("/metrics", headers=add_user(store, "vera", "viewer")), 403)


def test_metrics_key_reads_nothing_else(client, make_key):
    scraper = make_key("prom", "metrics")
    assert client.get("/openapi.json", headers=scraper).status_code == 200
    problem(client.get("/jobs", headers=scraper), 403)
    problem(client.get("/jobs/1", headers=scraper), 403)


def test_openapi_for_anyone_authenticated(client, producer, worker):
    for headers in (producer, worker):
        resp = client.get("/openapi.json", headers=headers)
        assert resp.status_code == 200 and resp.json["openapi"].startswith("3.1")
    problem(client.get("/openapi.json"), 401)


@SQLITE_ONLY
def test_unknown_method_and_path_are_problems(client, admin):
    resp = client.delete("/jobs", headers=admin)
    problem(resp, 405)
    assert "GET" in resp.headers["Allow"] and "POST" in resp.headers["Allow"]
    problem(client.get("/nowhere", headers=admin), 404)
    problem(client.get("/jobs/99999999999999999999", headers=admin), 404)
