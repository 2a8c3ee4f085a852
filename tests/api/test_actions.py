"""The service layer: one rule in one place, for the API, the dashboard and the command line."""
from __future__ import annotations

import dataclasses
import inspect
import json
import threading
from typing import Any

import pytest

from helpers import failed, sent_statements, until
from queuelog.server import actions, sanitize
from queuelog.server.api.serialize import job_json
from queuelog.server.auth import Principal
from queuelog.model.problems import Forbidden, IdempotencyMismatch, JobNotFound, StaleAttempt
from queuelog.model.jobs import Job
from queuelog.server.store import NewJob, Store

ADMIN = Principal("ada", "admin", "user", None, 30)
VIEWER = Principal("vera", "viewer", "user", None, 30)
PRODUCER = Principal("billing", "producer", "key", None, 10)
OTHER = Principal("reports", "producer", "key", None, 10)
WORKER = Principal("mailer-1", "worker", "key", None, 10)
MARK = "ERR-5d2c"


@pytest.fixture
def ctx(app: Any) -> Any:
    """An app context: actions find the store through it."""
    with app.test_request_context():
        yield app


def test_error_text_is_for_admins_only(ctx: Any, store: Store) -> None:
    job = store.get(failed(store, key="k-1", error=MARK))
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
    job_id = failed(store, error=MARK)
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
    job_id = failed(store, error=MARK)
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


# -- the key's limits, whichever view calls enqueue ----------------------------------------
LIMITED = Principal("billing", "producer", "key", ("email",), 10)  # low and medium only


def test_enqueue_holds_a_producer_to_its_key(ctx: Any, store: Store) -> None:
    with pytest.raises(Forbidden, match="type 'pdf'"):
        actions.enqueue(LIMITED, NewJob("billing", "pdf", "{}", 0, 0))
    with pytest.raises(Forbidden, match="priority 'high'"):
        actions.enqueue(LIMITED, NewJob("billing", "email", "{}", 20, 0))
    with pytest.raises(Forbidden) as refused:
        actions.enqueue_many(LIMITED, [NewJob("billing", "email", "{}", 0, 0),
                                       NewJob("billing", "pdf", "{}", 30, 0)])
    assert [e["field"] for e in refused.value.errors or []] == ["jobs[1].type",
                                                                 "jobs[1].priority"]
    assert store.list_jobs().jobs == []  # all or nothing
    # Admins are not held to a producer's limits; the producer is always the caller.
    job, created = actions.enqueue(ADMIN, NewJob("someone-else", "pdf", "{}", 30, 0))
    assert created and job.producer == "ada"


BASE = NewJob("x", "email", '{"a":1,"b":2}', 0, 0, delay_seconds=5, idempotency_key="k")


@pytest.mark.parametrize("change, same", [
    ({"payload_json": '{"b":2,"a":1}'}, True),   # key order: the same payload
    ({"delay_seconds": 5.0}, True),               # 5 and 5.0: one number
    ({"producer": "y"}, True),                    # the producer is always the caller
    ({"payload_json": '{"a":1,"b":3}'}, False),
    ({"type": "pdf"}, False),
    ({"priority": 10}, False),
    ({"max_retries": 1}, False),
    ({"delay_seconds": 6}, False),
    ({"run_at": 1_700_000_000_000_000}, False),
], ids=lambda v: "-".join(map(str, v)) if isinstance(v, dict) else str(v))
def test_the_idempotency_hash_is_the_actions(ctx: Any, store: Store, change: dict[str, Any],
                                             same: bool) -> None:
    """One field changed from the first request: a replay, or another request (422)."""
    first, created = actions.enqueue(PRODUCER, BASE)
    assert created
    again = dataclasses.replace(BASE, **change)
    if same:
        replay, made = actions.enqueue(PRODUCER, again)
        assert not made and replay.id == first.id
    else:
        with pytest.raises(IdempotencyMismatch):
            actions.enqueue(PRODUCER, again)
    assert [j.id for j in store.list_jobs().jobs] == [first.id]
    plain, _ = actions.enqueue(PRODUCER, dataclasses.replace(again, idempotency_key=None))
    assert plain.id != first.id  # without a key, never a replay


# -- the claim: the key's types, and the revoked-key re-check ------------------------------
def test_claim_holds_a_worker_to_its_key_types(ctx: Any, store: Store) -> None:
    typed = Principal("mailer-1", "worker", "key", ("email",), 10)
    actions.enqueue(ADMIN, NewJob("", "pdf", "{}", 0, 0))
    with pytest.raises(Forbidden):
        actions.claim(typed, 1, types=["email", "pdf"])
    assert actions.claim(typed, 1).jobs == []  # no types given: the key's own
    assert [j.type for j in actions.claim(WORKER, 1).jobs] == ["pdf"]


@pytest.mark.parametrize("config", [{"LONG_POLL_LOOK_SECONDS": 60}])
@pytest.mark.parametrize("revoked", [False, True])
def test_a_waiting_claim_rechecks_that_the_key_is_active(app: Any, store: Store,
                                                         revoked: bool) -> None:
    """A job that comes due while the claim waits goes to an active key only."""
    # The poll's own looks come a minute apart: its second look is the one the enqueue's
    # wake-up makes (the enqueue rings this process's bell).
    key, token = store.accounts.create_key("mailer-1", "worker")
    who = Principal(key.name, key.role, "key", None, 10, token)
    polls = app.extensions["queuelog.longpoll"]
    got: list[Any] = []

    def waiting_claim() -> None:
        with app.test_request_context():
            got.append(actions.claim(who, 1, wait=30))

    def keyed(statement: str, parameters: Any) -> bool:  # a statement that reads the key
        sent = parameters.values() if isinstance(parameters, dict) else parameters or ()
        return key.token_hash in sent

    with sent_statements(store.engine, keyed) as key_reads:
        thread = threading.Thread(target=waiting_claim, daemon=True)
        thread.start()
        until(lambda: polls.waiting == 1)  # the first look found nothing; the claim waits
        assert key_reads == []  # the first look is the request's own: auth read the key
        if revoked:
            store.accounts.revoke_key("mailer-1")
        store.enqueue(NewJob("billing", "email", "{}", 0, 0))  # a job comes, and a wake-up
        thread.join(timeout=10)
        polls.stop()  # ends the claim if it is still waiting
        thread.join(timeout=10)
    assert got, "the enqueue did not wake the waiting claim"
    assert key_reads  # the second look read the key with its first reads
    if revoked:  # and took nothing
        assert list(got[0].jobs) == []
        assert store.list_jobs().jobs[0].status.value == "pending"
    else:
        assert len(got[0].jobs) == 1


# -- bug 8: a fail batch's items are fenced before their error text is sanitized ------------
def _recording_sanitizer(seen: list[str]) -> Any:
    """The server's sanitizer (as the fail actions pass it to the store), recording each
    text it is given."""
    return lambda text: seen.append(text) or sanitize.sanitize_error(text, 8192)


def test_fail_many_sanitizes_only_fenced_items(store: Store) -> None:
    job, _ = store.enqueue(NewJob("billing", "email", "{}", 0, 0))
    assert store.claim("mailer-1") is not None
    seen: list[str] = []
    clean = _recording_sanitizer(seen)
    done = store.fail_many("mailer-1", [(job.id, 2, "stale password=a", True, None),
                                        (job.id + 99, 1, "missing password=b", True, None)],
                           clean=clean)
    assert [getattr(d, "status", None) for d in done] == [409, 404] and seen == []
    done = store.fail_many("mailer-1", [(job.id, 1, "held password=hunter2", False, None)],
                           clean=clean)
    assert isinstance(done[0], Job) and seen == ["held password=hunter2"]
    assert store.get(job.id).error == "held password=[REDACTED]"


def test_a_stale_single_fail_costs_no_sanitize(store: Store) -> None:
    """The single fail: a refused attempt's text is never sanitized either."""
    job, _ = store.enqueue(NewJob("billing", "email", "{}", 0, 0))
    assert store.claim("mailer-1") is not None
    seen: list[str] = []
    with pytest.raises(StaleAttempt):
        store.fail(job.id, "mailer-1", 2, "token=" + "x" * 900, clean=_recording_sanitizer(seen))
    with pytest.raises(JobNotFound):
        store.fail(job.id + 1, "mailer-1", 1, "late", clean=_recording_sanitizer(seen))
    assert seen == []
    store.fail(job.id, "mailer-1", 1, "token=abc", clean=_recording_sanitizer(seen))
    assert seen == ["token=abc"] and store.get(job.id).error == "token=[REDACTED]"


def test_the_fail_routes_answer_each_stale_item_and_store_the_held_ones_text_redacted(
        client: Any, store: Store, producer: Any, worker: Any) -> None:
    """Through HTTP: the batch's stale items are refused one by one, the held one's
    error is stored sanitized, and a stale single fail is 409."""
    job_id = client.post("/jobs", json={"type": "email"}, headers=producer).json["id"]
    assert client.post("/jobs/claim", json={}, headers=worker).status_code == 200
    stale = [{"id": job_id + 1 + i, "attempt": 1, "error": "token=" + "x" * 900}
             for i in range(20)]
    resp = client.post("/jobs/fail", json={"jobs": [*stale, {"id": job_id, "attempt": 1,
                                                             "error": "token=abc"}]},
                       headers=worker)
    assert resp.status_code == 200
    assert [r["status"] for r in resp.json["results"]] == [404] * 20 + [200]
    assert store.get(job_id).error == "token=[REDACTED]"
    refused = client.post(f"/jobs/{job_id}/fail", json={"attempt": 1, "error": "late"},
                          headers=worker)
    assert refused.status_code == 409


# -- the gate: every action refuses a caller of the wrong role itself ----------------------
ROLES = ("producer", "worker", "viewer", "admin", "metrics", actions.SYSTEM)
BOARD = {"viewer", "admin", "metrics"}
# Every action, and exactly the roles that may call it (the contract's "Who is who"; the
# command line and the ticker act as the system).
MAY = {
    "enqueue": {"producer", "admin"}, "enqueue_many": {"producer", "admin"},
    "cancel": {"producer", "admin"}, "bulk_cancel": {"producer", "admin"},
    "retry": {"admin"}, "bulk_retry": {"admin"}, "run_now": {"admin"},
    "purge": {"system"}, "count_purgeable": {"system"},
    "claim": {"worker"}, "heartbeat": {"worker"}, "complete": {"worker"},
    "complete_many": {"worker"}, "fail": {"worker"}, "fail_many": {"worker"},
    "get_job": {"producer", "worker", "viewer", "admin"},
    "list_jobs": {"producer", "worker", "viewer", "admin"},
    "dashboard": {"viewer", "admin"}, "dashboard_job": {"viewer", "admin"},
    "dashboard_jobs": {"viewer", "admin"}, "dashboard_workflow": {"viewer", "admin"},
    "overview": {"viewer", "admin"},
    "count_matching": {"admin"},
    "workers": BOARD, "job_types": BOARD, "job_timings": {"viewer", "admin"}, "schedule_states": BOARD | {"system"},
    "set_paused": {"admin"}, "set_limits": {"admin"}, "reset_limits": {"admin"},
    "set_schedule_paused": {"admin"}, "run_schedule": {"admin"},
    "schedule_tick": {"system"},
    "audit_events": {"admin", "system"}, "purge_audit": {"system"},
    "create_key": {"system"}, "revoke_key": {"system"}, "list_keys": {"system"},
    "create_user": {"system"}, "delete_user": {"system"}, "set_password": {"system"},
    "list_users": {"system"}, "user_exists": {"system"},
    "schema_revision": {"system"}, "upgrade_schema": {"system"}, "backup": {"system"},
    "scrape": {"admin", "metrics"},
    "api_document": {"producer", "worker", "viewer", "admin", "metrics"},
}
# Not verbs: pure rules and helpers that act for no caller (the clock, the health probe).
NOT_GATED = {"visible", "sees_errors", "sees_key", "request_hash", "scope_of", "now", "health",
             "upgrade_deferred", "gate", "roles_of", "system"}


def _functions() -> set[str]:
    """Every public function the actions package exports."""
    return {n for n in actions.__all__ if inspect.isfunction(getattr(actions, n))}


def test_every_action_is_in_the_table() -> None:
    """A new action must say who may call it (here and with ``gate``), or why no one needs to."""
    assert _functions() == set(MAY) | NOT_GATED
    assert {n for n in _functions() if actions.roles_of(getattr(actions, n))} == set(MAY)


@pytest.mark.parametrize("name", sorted(MAY))
def test_an_action_refuses_every_other_role_itself(name: str) -> None:
    """Called directly, past every view, with each other role: Forbidden, before any work
    (no app, no store, no arguments needed to be refused)."""
    action = getattr(actions, name)
    assert actions.roles_of(action) == MAY[name]
    for role in ROLES:
        if role not in MAY[name]:
            with pytest.raises(Forbidden):
                action(Principal("caller", role, "key"))
