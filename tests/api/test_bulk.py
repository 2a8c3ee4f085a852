"""Bulk retry and cancel (POST /jobs/retry, POST /jobs/cancel), on SQLite and PostgreSQL."""
from __future__ import annotations

from typing import Any, Callable

import pytest
from sqlalchemy import event

from helpers import add, failed, problem
from queuelog.model.jobs import Status
from queuelog.server.store import Store


def running(store: Store, type: str = "email") -> int:
    """A job claimed and held; return its id."""
    job_id = add(store, type)
    job = store.claim("mailer-1", types=[type])
    assert job is not None and job.id == job_id
    return job_id


def cancelled(store: Store, type: str = "email") -> int:
    """A cancelled job; return its id."""
    job_id = add(store, type)
    store.cancel(job_id)
    return job_id


def statuses(store: Store, ids: list[int]) -> list[str]:
    """The status of each job."""
    return [store.get(i).status.value for i in ids]


def test_retry_by_filter_changes_only_failed_or_cancelled_matches(
        client: Any, store: Store, admin: dict[str, str]) -> None:
    f_email = [failed(store, "email") for _ in range(3)]
    f_pdf = failed(store, "pdf")
    c_email = cancelled(store, "email")
    held = running(store, "email")
    resp = client.post("/jobs/retry", json={"filter": {"status": "failed", "type": "email"}},
                       headers=admin)
    assert resp.status_code == 200 and resp.get_json() == {"count": 3}
    assert statuses(store, f_email) == ["pending"] * 3
    assert statuses(store, [f_pdf, c_email, held]) == ["failed", "cancelled", "running"]
    for job_id in f_email:
        job = store.get(job_id)
        assert job.retry_count == 0 and job.finished_at is None and job.attempt == 1
    # Without a status: failed and cancelled alike.
    resp = client.post("/jobs/retry", json={"filter": {}}, headers=admin)
    assert resp.get_json() == {"count": 2}
    assert statuses(store, [f_pdf, c_email, held]) == ["pending", "pending", "running"]


def test_retry_by_priority_filter(client: Any, store: Store, admin: dict[str, str]) -> None:
    low, high = failed(store, priority=0), failed(store, priority=20)
    resp = client.post("/jobs/retry", json={"filter": {"priority": "high"}}, headers=admin)
    assert resp.get_json() == {"count": 1}
    assert statuses(store, [low, high]) == ["failed", "pending"]


def test_retry_by_ids_skips_jobs_in_other_states(client: Any, store: Store,
                                                 admin: dict[str, str]) -> None:
    ids = [failed(store), cancelled(store), running(store), add(store)]
    resp = client.post("/jobs/retry", json={"ids": ids + [ids[0], 999_999]}, headers=admin)
    assert resp.status_code == 200 and resp.get_json() == {"count": 2}
    assert statuses(store, ids) == ["pending", "pending", "running", "pending"]
    assert client.post("/jobs/retry", json={"ids": ids}, headers=admin).get_json() == {"count": 0}


def test_bulk_works_in_bounded_transactions(store: Store) -> None:
    ids = [failed(store) for _ in range(23)]
    commits: list[int] = []
    listener = lambda conn: commits.append(1)  # noqa: E731
    event.listen(store.engine, "commit", listener)
    try:
        assert store.bulk_retry("ada", batch=5) == 23
    finally:
        event.remove(store.engine, "commit", listener)
    assert len(commits) >= 5  # 23 rows in batches of 5: never one long transaction
    assert statuses(store, ids) == ["pending"] * 23
    events, _ = store.audit_events()
    assert [(e.action, e.detail["count"]) for e in events] == [("jobs.retry", 23)]


def test_cancel_by_filter_touches_only_pending(client: Any, store: Store,
                                               admin: dict[str, str]) -> None:
    held = running(store, "pdf")
    done = failed(store, "pdf")
    pending = [add(store, "pdf") for _ in range(3)] + [add(store, "email")]
    resp = client.post("/jobs/cancel", json={"filter": {"type": "pdf"}}, headers=admin)
    assert resp.status_code == 200 and resp.get_json() == {"count": 3}
    assert statuses(store, pending) == ["cancelled"] * 3 + ["pending"]
    assert statuses(store, [held, done]) == ["running", "failed"]


def test_producer_bulk_cancels_only_its_own_jobs(
        client: Any, store: Store, make_key: Callable[..., dict[str, str]]) -> None:
    mine = make_key("billing", "producer")
    make_key("reports", "producer")
    own = [add(store, producer="billing") for _ in range(2)]
    other = [add(store, producer="reports") for _ in range(2)]
    resp = client.post("/jobs/cancel", json={"filter": {}}, headers=mine)
    assert resp.get_json() == {"count": 2}
    resp = client.post("/jobs/cancel", json={"ids": other}, headers=mine)
    assert resp.get_json() == {"count": 0}
    assert statuses(store, own + other) == ["cancelled"] * 2 + ["pending"] * 2
    assert store.audit_events()[0] == []  # a program's own cancel is not an admin change


@pytest.mark.parametrize("path, body, field", [
    ("/jobs/retry", {}, "ids"),
    ("/jobs/retry", {"ids": [1], "filter": {}}, "ids"),
    ("/jobs/retry", {"ids": []}, "ids"),
    ("/jobs/retry", {"ids": ["1"]}, "ids[0]"),  # the bad id, by its path
    ("/jobs/retry", {"ids": [True]}, "ids[0]"),  # the bad id, by its path
    ("/jobs/retry", {"ids": [0]}, "ids[0]"),  # the bad id, by its path
    ("/jobs/retry", {"ids": list(range(1, 1002))}, "ids"),
    ("/jobs/retry", {"filter": []}, "filter"),
    ("/jobs/retry", {"filter": {"status": "pending"}}, "filter.status"),
    ("/jobs/retry", {"filter": {"type": "nope"}}, "filter.type"),
    ("/jobs/retry", {"filter": {"priority": "urgent"}}, "filter.priority"),
    ("/jobs/retry", {"filter": {"producer": "x"}}, "filter.producer"),
    ("/jobs/retry", {"filter": {}, "extra": 1}, "extra"),
    ("/jobs/cancel", {"filter": {"status": "pending"}}, "filter.status"),
    ("/jobs/cancel", {"filter": {"type": 5}}, "filter.type"),
])
def test_bad_bodies_are_422_and_change_nothing(client: Any, store: Store, admin: dict[str, str],
                                               path: str, body: dict[str, Any],
                                               field: str) -> None:
    job_ids = [failed(store), add(store)]
    resp = client.post(path, json=body, headers=admin)
    errors = problem(resp, 422, "validation-error")["errors"]
    assert field in [e["field"] for e in errors]
    assert statuses(store, job_ids) == ["failed", "pending"]


def test_who_may_bulk(client: Any, store: Store, producer: dict[str, str],
                      worker: dict[str, str], admin: dict[str, str],
                      make_user: Callable[..., dict[str, str]],
                      make_key: Callable[..., dict[str, str]]) -> None:
    viewer = make_user("vera", "viewer")
    metrics = make_key("prom", "metrics")
    job_id = failed(store)
    body = {"filter": {}}
    problem(client.post("/jobs/retry", json=body), 401)
    for who in (producer, worker, viewer, metrics):
        problem(client.post("/jobs/retry", json=body, headers=who), 403)
    for who in (worker, viewer, metrics):
        problem(client.post("/jobs/cancel", json=body, headers=who), 403)
    assert store.get(job_id).status is Status.FAILED
    # A person's browser could be made to post a form: Basic needs a JSON content type.
    ada = make_user("ada", "admin")
    problem(client.post("/jobs/retry", data="{}", headers=ada), 415)
    assert client.post("/jobs/retry", json=body, headers=ada).get_json() == {"count": 1}


# Cancelled jobs kept an hour: a finished job past it goes after the next request that
# finished or created jobs (retention.py), a bulk cancel included.
KEEP_CANCELLED = {"RETENTION_CANCELLED": "1h", "RETENTION_INTERVAL_SECONDS": 60}


@pytest.mark.parametrize("config", [KEEP_CANCELLED])
def test_a_bulk_cancel_marks_retention_as_a_single_cancel_does(client: Any, store: Store,
                                                               clock: Any,
                                                               admin: dict[str, str]) -> None:
    old, waiting = cancelled(store), add(store)
    clock.advance(2 * 3600)  # the cancelled job is now past RETENTION_CANCELLED
    with client.post("/jobs/cancel", json={"ids": [waiting]}, headers=admin) as resp:
        assert resp.status_code == 200 and resp.json["count"] == 1
        resp.get_data()  # the round runs once the response is closed, as a server does
    assert [j.id for j in store.list_jobs().jobs] == [waiting]  # the old one purged
