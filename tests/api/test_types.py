"""Job types: GET /types, pausing and resuming, on SQLite and PostgreSQL."""
from __future__ import annotations

from typing import Any, Callable

import pytest

from helpers import add, problem, refused_writes
from queuelog import create_app
from queuelog.model.problems import Conflict
from queuelog.server.store import Store


def by_name(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``types`` list of GET /types keyed by name."""
    return {t["name"]: t for t in body["types"]}


def test_types_lists_every_configured_type(client: Any, store: Store, clock: Any,
                                           admin: dict[str, str]) -> None:
    first = add(store, "email")
    add(store, "email")
    add(store, "email", delay=600)  # scheduled: not due, so not part of the queue's age
    clock.advance(30)
    job = store.claim("w", types=["email"])
    assert job is not None and job.id == first
    store.complete(job.id, "w", job.attempt)
    failing = add(store, "pdf")
    job = store.claim("w", types=["pdf"])
    assert job is not None and job.id == failing
    store.fail(job.id, "w", job.attempt, "boom", retry=False)
    clock.advance(12)
    resp = client.get("/types", headers=admin)
    assert resp.status_code == 200
    types = by_name(resp.get_json())
    assert list(types) == ["email", "pdf", "sync"]
    email = types["email"]
    assert set(email) >= {"name", "paused", "counts", "oldest_pending_seconds",
                          "completed_last_hour", "failed_last_hour"}
    assert email["paused"] is False
    assert email["counts"] == {"blocked": 0, "pending": 2, "running": 0, "completed": 1, "failed": 0,
                               "cancelled": 0}
    assert email["oldest_pending_seconds"] == pytest.approx(42.0)
    assert (email["completed_last_hour"], email["failed_last_hour"]) == (1, 0)
    assert (types["pdf"]["completed_last_hour"], types["pdf"]["failed_last_hour"]) == (0, 1)
    assert types["pdf"]["oldest_pending_seconds"] == 0  # nothing pending
    assert types["sync"]["counts"] == dict.fromkeys(email["counts"], 0)
    clock.advance(3600)  # the hour has passed; the queue has only aged
    email = by_name(client.get("/types", headers=admin).get_json())["email"]
    assert (email["completed_last_hour"], email["failed_last_hour"]) == (0, 0)
    assert email["oldest_pending_seconds"] == pytest.approx(3642.0)


@pytest.mark.parametrize("config", [{"COUNT_CAP": 3}])
def test_counts_stop_at_the_cap(client: Any, store: Store, admin: dict[str, str]) -> None:
    for _ in range(5):
        add(store, "sync")
    sync = by_name(client.get("/types", headers=admin).get_json())["sync"]
    assert sync["counts"]["pending"] == 3 and sync["count_cap"] == 3


def test_who_may_read_types(client: Any, producer: dict[str, str], worker: dict[str, str],
                            make_user: Callable[..., dict[str, str]],
                            make_key: Callable[..., dict[str, str]]) -> None:
    problem(client.get("/types"), 401)
    for who in (make_user("vera", "viewer"), make_user("ada", "admin"),
                make_key("prom", "metrics")):
        assert client.get("/types", headers=who).status_code == 200
    for who in (producer, worker):
        problem(client.get("/types", headers=who), 403)


def test_a_paused_type_is_never_claimed_but_accepts_jobs(
        client: Any, store: Store, admin: dict[str, str], producer: dict[str, str],
        make_key: Callable[..., dict[str, str]]) -> None:
    emailer = make_key("mailer-2", "worker", types=["email"])
    anyone = make_key("mailer-3", "worker")
    resp = client.post("/types/email/pause", headers=admin)
    assert resp.status_code == 200
    assert resp.get_json()["name"] == "email" and resp.get_json()["paused"] is True
    # Enqueues still succeed; the email job is older and first in claim order.
    assert client.post("/jobs", json={"type": "email", "priority": "medium"},
                       headers=producer).status_code == 201
    assert client.post("/jobs", json={"type": "pdf"}, headers=producer).status_code == 201
    assert client.post("/jobs/claim", json={}, headers=emailer).status_code == 204
    claimed = client.post("/jobs/claim", json={}, headers=anyone)
    assert claimed.status_code == 200 and claimed.get_json()["type"] == "pdf"
    assert client.post("/jobs/claim", json={}, headers=anyone).status_code == 204
    assert by_name(client.get("/types", headers=admin).get_json())["email"]["paused"] is True
    resp = client.post("/types/email/resume", headers=admin)
    assert resp.status_code == 200 and resp.get_json()["paused"] is False
    claimed = client.post("/jobs/claim", json={}, headers=emailer)
    assert claimed.status_code == 200 and claimed.get_json()["type"] == "email"


def test_pause_is_idempotent_and_resume_of_a_running_type_is_harmless(
        client: Any, store: Store, admin: dict[str, str]) -> None:
    for _ in range(2):
        assert client.post("/types/pdf/pause", headers=admin).get_json()["paused"] is True
    assert store.paused().keys() == {"pdf"}
    for _ in range(2):
        assert client.post("/types/pdf/resume", headers=admin).get_json()["paused"] is False
    assert store.paused() == {}


def test_the_pause_is_kept_in_the_database(app: Any, client: Any, store: Store,
                                           admin: dict[str, str], db_url: str) -> None:
    client.post("/types/sync/pause", headers=admin)
    add(store, "sync")
    other = create_app({"TESTING": True, "DATABASE_URL": db_url, "SECRET_KEY": "other",
                        "BOOTSTRAP_ADMIN": False})  # a restart, or another app server
    try:
        other_store: Store = other.extensions["queuelog.store"]
        assert other_store.claim("w") is None
        assert other_store.paused()["sync"][1] == "root"  # who paused it
    finally:
        other.extensions["queuelog.store"].close()


def test_pause_errors(client: Any, store: Store, admin: dict[str, str],
                      make_user: Callable[..., dict[str, str]], producer: dict[str, str],
                      make_key: Callable[..., dict[str, str]]) -> None:
    problem(client.post("/types/fax/pause", headers=admin), 404)
    problem(client.post("/types/fax/resume", headers=admin), 404)
    problem(client.post("/types/email/pause"), 401)
    for who in (producer, make_user("vera", "viewer"), make_key("prom", "metrics")):
        problem(client.post("/types/email/pause", headers=who), 403)
    problem(client.post("/types/email/pause", json={"now": True}, headers=admin), 422)
    ada = make_user("ada", "admin")
    problem(client.post("/types/email/pause", data="x", headers=ada), 415)
    assert store.paused() == {}
    assert client.post("/types/email/pause", json={}, headers=ada).status_code == 200


def test_a_batch_claim_skips_a_paused_type_too(client: Any, store: Store,
                                               admin: dict[str, str],
                                               worker: dict[str, str]) -> None:
    paused = [add(store, "email") for _ in range(3)]
    running = [add(store, "pdf") for _ in range(2)]
    assert client.post("/types/email/pause", headers=admin).status_code == 200
    got = client.post("/jobs/claim", json={"max_jobs": 10}, headers=worker)
    assert got.status_code == 200
    assert sorted(j["id"] for j in got.get_json()["jobs"]) == running
    assert [store.get(i).status.value for i in paused] == ["pending"] * 3


@pytest.mark.parametrize("verb", ["pause", "resume"])
def test_a_pause_that_keeps_losing_its_race_is_a_409_never_a_silent_no_op(
        client: Any, store: Store, admin: dict[str, str], verb: str) -> None:
    """Bug 4: three IntegrityErrors fell out of set_paused's loop and it returned None."""
    if verb == "resume":
        store.set_paused("email", True, "ada")
    before = store.paused()
    # As if another admin's row landed first, in every round: the database answers each
    # round's write with a unique key's error (its audit event's insert, the last write).
    with refused_writes(store, "audit_events", conflict=True):
        got = problem(client.post(f"/types/email/{verb}", headers=admin), 409, "conflict")
        assert verb in got["detail"] and "email" in got["detail"]
        assert store.paused() == before  # every round rolled back: nothing changed
        assert store.audit_events(action=f"type.{verb}")[0] == []
        with pytest.raises(Conflict):
            store.set_paused("email", verb == "pause", "ada")


def test_the_batch_claim_skips_a_paused_type_like_the_single_one(
        client: Any, store: Store, make_key: Callable[..., dict[str, str]]) -> None:
    """One claim policy (store/claim_policy.py) for every claim path: any types, or some."""
    mail = [add(store, "email") for _ in range(2)]
    pdf = add(store, "pdf")
    store.set_paused("email", True, "ada")
    anyone = make_key("any", "worker")
    some = make_key("some", "worker", types=["email", "pdf"])
    got = client.post("/jobs/claim", json={"max_jobs": 5}, headers=some).get_json()["jobs"]
    assert [j["id"] for j in got] == [pdf]
    assert client.post("/jobs/claim", json={"max_jobs": 5}, headers=anyone).get_json() \
        == {"jobs": []}
    store.set_paused("email", False, "ada")
    got = client.post("/jobs/claim", json={"max_jobs": 5}, headers=anyone).get_json()["jobs"]
    assert [j["id"] for j in got] == mail


@pytest.mark.parametrize("config", [{"JOB_TYPES": {"reports/daily": {}, "email": {}}}])
def test_a_configured_type_with_a_slash_can_be_paused_and_limited(
        client: Any, store: Store, admin: dict[str, str], config: dict[str, Any]) -> None:
    """JOB_TYPES allows "/" in a name (it is printable); its routes were 404, "a type not
    configured", on the API and on the dashboard's buttons alike."""
    for path in ("/types/reports%2Fdaily/pause", "/types/reports/daily/pause"):
        resp = client.post(path, headers=admin)
        assert resp.status_code == 200 and resp.get_json()["paused"] is True, path
        assert client.post(path.replace("pause", "resume"), headers=admin).status_code == 200
    resp = client.put("/types/reports%2Fdaily/limits", json={"concurrency": 2}, headers=admin)
    assert resp.status_code == 200 and resp.get_json()["concurrency"] == 2
    resp = client.delete("/types/reports%2Fdaily/limits", headers=admin)
    assert resp.status_code == 200 and resp.get_json()["concurrency"] is None
    problem(client.post("/types/reports/weekly/pause", headers=admin), 404)
    assert store.paused() == {}
