"""The service layer: one rule in one place, for the API, the dashboard and the command line."""
from __future__ import annotations

import json
from typing import Any

import pytest

from queuelog.server import actions
from queuelog.server.api.serialize import job_json
from queuelog.server.auth import Principal
from queuelog.model.problems import Forbidden, JobNotFound
from queuelog.model.jobs import Job
from queuelog.server.store import NewJob, Store

ADMIN = Principal("ada", "admin", "user", None, 30)
VIEWER = Principal("vera", "viewer", "user", None, 30)
PRODUCER = Principal("billing", "producer", "key", None, 10)
OTHER = Principal("reports", "producer", "key", None, 10)
WORKER = Principal("mailer-1", "worker", "key", None, 10)
MARK = "ERR-5d2c"


def failed(store: Store, key: str | None = None) -> int:
    """A job with a failed attempt (error text ``MARK``), failed for good; return its id."""
    job, _ = store.enqueue(NewJob("billing", "email", json.dumps({}), 0, 0,
                                  idempotency_key=key, request_hash="h" if key else None))
    claimed = store.claim("mailer-1")
    assert claimed is not None and claimed.id == job.id
    store.fail(job.id, "mailer-1", claimed.attempt, MARK, retry=False)
    return job.id


@pytest.fixture
def ctx(app: Any) -> Any:
    """An app context: actions find the store through it."""
    with app.test_request_context():
        yield app


def test_error_text_is_for_admins_only(ctx: Any, store: Store) -> None:
    job = store.get(failed(store, key="k-1"))
    for who in (VIEWER, PRODUCER, WORKER):
        seen = actions.visible(job, who)
        assert seen.error is None and all(a.error is None for a in seen.attempts or ())
        body = job_json(job, who)
        assert "error" not in body and MARK not in json.dumps(body)
    body = job_json(job, ADMIN)
    assert body["error"] == MARK and body["attempts"][0]["error"] == MARK
    # The idempotency key: its producer and admins.
    assert job_json(job, PRODUCER)["idempotency_key"] == "k-1"
    assert job_json(job, ADMIN)["idempotency_key"] == "k-1"
    assert job_json(job, OTHER)["idempotency_key"] is None


def test_only_admins_retry_and_pause(ctx: Any, store: Store) -> None:
    job_id = failed(store)
    for who in (VIEWER, PRODUCER, WORKER):
        with pytest.raises(Forbidden):
            actions.retry(who, job_id)
        with pytest.raises(Forbidden):
            actions.bulk_retry(who)
        with pytest.raises(Forbidden):
            actions.set_paused(who, "email", True, ["email"], 100)
        with pytest.raises(Forbidden):
            actions.audit_events(who)
    assert store.get(job_id).status.value == "failed" and store.paused() == {}
    assert actions.retry(ADMIN, job_id).status.value == "pending"


def test_cancel_rules(ctx: Any, store: Store) -> None:
    job, _ = store.enqueue(NewJob("billing", "email", "{}", 0, 0))
    for who in (VIEWER, WORKER):
        with pytest.raises(Forbidden):
            actions.cancel(who, job.id)
        with pytest.raises(Forbidden):
            actions.bulk_cancel(who)
    with pytest.raises(JobNotFound):
        actions.cancel(OTHER, job.id)  # another producer's job is not visible
    assert actions.bulk_cancel(OTHER) == 0
    assert actions.cancel(PRODUCER, job.id).status.value == "cancelled"


def test_pausing_an_unknown_type_is_not_found(ctx: Any, store: Store) -> None:
    with pytest.raises(JobNotFound):
        actions.set_paused(ADMIN, "fax", True, ["email"], 100)
    assert store.paused() == {}


def test_retry_wakes_long_polls(ctx: Any, store: Store) -> None:
    wakeup = ctx.extensions["queuelog.longpoll"].bell
    job_id = failed(store)
    before = wakeup.count
    assert actions.bulk_retry(ADMIN) == 1 and wakeup.count > before
    actions.cancel(ADMIN, job_id)
    before = wakeup.count
    actions.retry(ADMIN, job_id)
    assert wakeup.count > before


def test_a_fail_wakes_long_polls_only_when_the_job_goes_back_to_pending(ctx: Any,
                                                                        store: Store) -> None:
    wakeup = ctx.extensions["queuelog.longpoll"].bell
    news = [NewJob("billing", "email", "{}", 0, 1) for _ in range(3)]
    jobs, replayed = actions.enqueue_many(PRODUCER, news)
    assert replayed == [] and len(actions.claim(WORKER, 3).jobs) == 3
    before = wakeup.count
    actions.fail(WORKER, jobs[0].id, 1, "x", retry=False)  # failed for good: none due
    assert wakeup.count == before
    actions.fail(WORKER, jobs[1].id, 1, "x", retry_in=0)  # pending again: due now
    assert wakeup.count > before
    before = wakeup.count
    done = actions.fail_many(WORKER, [(jobs[2].id, 1, "x", True, 0),
                                      (jobs[0].id, 1, "x", True, 0)])  # the second: 409
    assert isinstance(done[0], Job) and not isinstance(done[1], Job)
    assert wakeup.count > before
