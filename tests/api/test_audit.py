"""The audit log: every admin or operator change, written in the change's transaction."""
from __future__ import annotations

from typing import Any, Callable

import pytest
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError

from helpers import REFUSED, add, failed, problem, refused_writes
from queuelog import create_app
from queuelog.model.problems import Conflict
from queuelog.server.store.tables import audit_events
from queuelog.server.store import Store

PAYLOAD_MARK = "PAYLOAD-8c1d"
ERROR_MARK = "ERROR-77ab"
MARKED = {"m": PAYLOAD_MARK}  # a payload an audit event must never hold
ERROR_TEXT = f"{ERROR_MARK} token=abc"  # error text an event must never hold
PASSWORD = "PW-secret-3f9e-long"


def events(store: Store) -> list[tuple[str, str, str | None]]:
    """(actor, action, target) of every event, oldest first."""
    page, _ = store.audit_events(limit=200)
    return [(e.actor, e.action, e.target) for e in reversed(page)]


def raw_rows(store: Store) -> str:
    """Every stored audit row as text, to search for what must never be there."""
    with store.engine.connect() as conn:
        return repr(conn.execute(select(audit_events)).all())


def test_every_change_is_recorded_and_no_secret_is(
        app: Any, runner: Any, client: Any, store: Store, clock: Any) -> None:
    result = runner.invoke(args=["keys", "create", "--name", "ops", "--role", "admin"])
    token = result.stdout.strip().splitlines()[-1]
    admin = {"Authorization": f"Bearer {token}"}
    assert runner.invoke(args=["users", "create", "ada", "--role", "admin",
                               "--password-stdin"], input=PASSWORD + "\n").exit_code == 0
    assert runner.invoke(args=["users", "set-password", "ada", "--password-stdin"],
                         input=PASSWORD + "-2\n").exit_code == 0
    one = failed(store, payload=MARKED, error=ERROR_TEXT)
    assert client.post(f"/jobs/{one}/retry", headers=admin).status_code == 200
    two = add(store, payload=MARKED)
    assert client.post(f"/jobs/{two}/cancel", headers=admin).status_code == 200
    assert client.post("/jobs/retry", json={"ids": [two]}, headers=admin).status_code == 200
    assert client.post("/jobs/cancel", json={"filter": {}}, headers=admin).status_code == 200
    assert client.post("/types/pdf/pause", headers=admin).status_code == 200
    assert client.post("/types/pdf/resume", headers=admin).status_code == 200
    clock.advance(86_400 * 2)
    assert runner.invoke(args=["purge", "--older-than", "1d"]).exit_code == 0
    assert runner.invoke(args=["keys", "revoke", "ops"]).exit_code == 0
    assert runner.invoke(args=["users", "delete", "ada"]).exit_code == 0
    assert events(store) == [
        ("cli", "key.create", "ops"), ("cli", "user.create", "ada"),
        ("cli", "user.password", "ada"), ("ops", "job.retry", str(one)),
        ("ops", "job.cancel", str(two)), ("ops", "jobs.retry", None),
        ("ops", "jobs.cancel", None), ("ops", "type.pause", "pdf"),
        ("ops", "type.resume", "pdf"), ("cli", "jobs.purge", None),
        ("cli", "key.revoke", "ops"), ("cli", "user.delete", "ada")]
    page, _ = store.audit_events(action="jobs.purge")
    assert page[0].detail["count"] == 2 and page[0].detail["older_than_seconds"] == 86_400
    assert store.audit_events(action="key.create")[0][0].detail["role"] == "admin"
    stored = raw_rows(store)
    for secret in (token, token[3:], PASSWORD, PAYLOAD_MARK, ERROR_MARK, "token=abc",
                   store.accounts.list_keys()[0].token_hash):
        assert secret not in stored


def test_a_refused_change_records_nothing(client: Any, store: Store,
                                          admin: dict[str, str]) -> None:
    pending = add(store, payload=MARKED)
    problem(client.post(f"/jobs/{pending}/retry", headers=admin), 409)
    problem(client.post("/jobs/999/cancel", headers=admin), 404)
    problem(client.post("/types/fax/pause", headers=admin), 404)
    assert events(store) == []


def test_the_event_is_in_the_same_transaction_as_the_change(store: Store) -> None:
    job_id = failed(store, payload=MARKED, error=ERROR_TEXT)
    with refused_writes(store, "audit_events"):  # the audit log is broken
        with pytest.raises(DBAPIError, match=REFUSED):
            store.retry(job_id, actor="ada")
        assert store.get(job_id).status.value == "failed"  # rolled back with its event
        # (SQLite's refusal is an IntegrityError, which a pause takes for a lost race.)
        with pytest.raises((DBAPIError, Conflict)):
            store.set_paused("email", True, "ada")
        assert store.paused() == {}
    store.set_paused("email", True, "ada")  # and with the log back, both go through
    store.retry(job_id, actor="ada")
    assert store.get(job_id).status.value == "pending" and "email" in store.paused()


def test_a_person_is_the_actor_of_what_they_do(client: Any, store: Store,
                                               make_user: Callable[..., dict[str, str]]) -> None:
    ada = make_user("ada", "admin")
    job_id = failed(store, payload=MARKED, error=ERROR_TEXT)
    assert client.post(f"/jobs/{job_id}/retry", json={}, headers=ada).status_code == 200
    assert events(store) == [("ada", "job.retry", str(job_id))]


def test_a_producer_cancelling_its_own_job_is_not_an_admin_change(
        client: Any, store: Store, producer: dict[str, str]) -> None:
    job_id = add(store, payload=MARKED)
    assert client.post(f"/jobs/{job_id}/cancel", headers=producer).status_code == 200
    assert events(store) == []


def test_get_audit_pages_newest_first_with_filters(client: Any, store: Store,
                                                   admin: dict[str, str]) -> None:
    for i in range(7):
        store.set_paused("email", i % 2 == 0, "ada" if i < 4 else "bob")
    resp = client.get("/audit?limit=3", headers=admin)
    assert resp.status_code == 200
    body = resp.get_json()
    ids = [e["id"] for e in body["events"]]
    assert ids == sorted(ids, reverse=True) and len(ids) == 3
    seen = list(ids)
    while body["next_cursor"]:
        body = client.get(f"/audit?limit=3&cursor={body['next_cursor']}", headers=admin).get_json()
        seen += [e["id"] for e in body["events"]]
    assert seen == sorted(seen, reverse=True) and len(seen) == len(set(seen)) == 7
    first = client.get("/audit?limit=1", headers=admin).get_json()["events"][0]
    assert set(first) == {"id", "at", "actor", "action", "target", "detail"}
    assert first["at"].endswith("Z") and first["target"] == "email"
    only = client.get("/audit?action=type.resume", headers=admin).get_json()["events"]
    assert {e["action"] for e in only} == {"type.resume"} and len(only) == 3
    only = client.get("/audit?actor=bob", headers=admin).get_json()["events"]
    assert {e["actor"] for e in only} == {"bob"} and len(only) == 3


@pytest.mark.parametrize("query, field", [
    ("limit=0", "limit"), ("limit=201", "limit"), ("limit=x", "limit"),
    ("cursor=nope", "cursor"), ("action=job.explode", "action"), ("actor=%00", "actor"),
    ("actor=", "actor")])
def test_get_audit_rejects_bad_queries(client: Any, admin: dict[str, str], query: str,
                                       field: str) -> None:
    body = problem(client.get(f"/audit?{query}", headers=admin), 422)
    assert field in [e["field"] for e in body["errors"]]


def test_only_admins_read_the_audit_log(client: Any, producer: dict[str, str],
                                        worker: dict[str, str],
                                        make_user: Callable[..., dict[str, str]],
                                        make_key: Callable[..., dict[str, str]]) -> None:
    problem(client.get("/audit"), 401)
    for who in (producer, worker, make_user("vera", "viewer"), make_key("prom", "metrics")):
        problem(client.get("/audit", headers=who), 403)
    assert client.get("/audit", headers=make_user("ada", "admin")).status_code == 200


def test_purge_audit_older_than(runner: Any, store: Store, clock: Any) -> None:
    store.set_paused("email", True, "ada")
    clock.advance(10 * 86_400)
    store.set_paused("email", False, "ada")
    result = runner.invoke(args=["purge", "--audit-older-than", "7d"])
    assert result.exit_code == 0 and "Deleted 1 audit event(s)." in result.output
    assert events(store) == [("ada", "type.resume", "email"), ("cli", "audit.purge", None)]
    assert store.audit_events(action="audit.purge")[0][0].detail == {
        "count": 1, "older_than_seconds": 7 * 86_400}
    # Purging jobs never touches the audit log.
    clock.advance(30 * 86_400)
    assert runner.invoke(args=["purge", "--older-than", "1d"]).exit_code == 0
    assert [a for _, a, _ in events(store)] == ["type.resume", "audit.purge", "jobs.purge"]
    assert runner.invoke(args=["purge"]).exit_code != 0  # neither option: a usage error
    assert runner.invoke(args=["purge", "--audit-older-than", "soon"]).exit_code != 0


def test_automatic_retention_is_recorded(tmp_path: Any, clock: Any, db_url: str) -> None:
    app = create_app({"TESTING": True, "DATABASE_URL": db_url, "SECRET_KEY": "x",
                      "BOOTSTRAP_ADMIN": False, "RETENTION_FAILED": "1h"})
    store: Store = app.extensions["queuelog.store"]
    store.clock = clock
    try:
        failed(store, payload=MARKED, error=ERROR_TEXT)
        clock.advance(7200)
        assert app.extensions["queuelog.retention"].maybe_run() == 1
        page, _ = store.audit_events()
        assert [(e.actor, e.action, e.detail["count"]) for e in page] == [
            ("retention", "jobs.purge", 1)]
        clock.advance(7200)
        assert app.extensions["queuelog.retention"].maybe_run() == 0
        assert len(store.audit_events()[0]) == 1  # nothing deleted, nothing recorded
    finally:
        store.close()


def test_queuelog_audit_prints_the_newest_events(runner: Any, store: Store) -> None:
    for i in range(4):
        store.set_paused("pdf", i % 2 == 0, f"user{i}")
    result = runner.invoke(args=["audit", "--limit", "2"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].split()[:3] == ["AT", "ACTOR", "ACTION"] and len(lines) == 3
    assert "user3" in lines[1] and "type.resume" in lines[1] and "user2" in lines[2]
    assert runner.invoke(args=["audit", "--limit", "0"]).exit_code != 0


# -- priorities by their labels, for every reader --------------------------------------------
def test_priorities_read_as_labels_in_the_api_and_the_command(
        runner: Any, client: Any, store: Store) -> None:
    result = runner.invoke(args=["keys", "create", "--name", "ops", "--role", "admin"])
    admin = {"Authorization": f"Bearer {result.stdout.strip().splitlines()[-1]}"}
    assert runner.invoke(args=["keys", "create", "--name", "shop", "--role", "producer",
                               "--max-priority", "high"]).exit_code == 0
    failed(store, priority=20)
    assert client.post("/jobs/retry", json={"filter": {"priority": "high"}},
                       headers=admin).status_code == 200
    got = client.get("/audit", headers=admin).json["events"]
    detail = {(e["action"], e["target"]): e["detail"] for e in got}
    assert detail["key.create", "shop"]["max_priority"] == "high"
    assert detail["jobs.retry", None]["filter"]["priority"] == "high"
    shown = runner.invoke(args=["audit"]).stdout
    assert '"max_priority":"high"' in shown and '"priority":"high"' in shown
    assert '"max_priority":20' not in shown and '"priority":20' not in shown


def test_an_event_stored_with_a_number_reads_as_a_label(client: Any, store: Store,
                                                        admin: dict[str, str]) -> None:
    with store.engine.begin() as conn:  # as events were written before labels were read
        conn.execute(audit_events.insert().values(
            at=1, actor="cli", action="key.create", target="old",
            detail='{"max_priority":30,"role":"producer"}'))
    got = client.get("/audit?action=key.create", headers=admin).json["events"]
    assert got[0]["detail"] == {"max_priority": "critical", "role": "producer"}
