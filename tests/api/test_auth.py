"""Who may call what: the role matrix, both schemes, and every way credentials can be bad."""
from __future__ import annotations

import base64
from typing import Any

import pytest


from queuelog.server.auth import Principal
from helpers import SQLITE_ONLY, basic, hash_checks, quick_hash


# (method, path, body, {role that may call it: its exact status}); every other role gets 403.
# The routes run in this order: POST /jobs makes job 1 (billing's); GET /jobs/1 comes before
# the claim, so the worker has not held it (404: not visible); the worker then claims and
# completes it, so its fail, cancel and retry pass the role check and are refused by the
# job's state (409). A 500 or a 404 where a 200 belongs fails the matrix.
ALL_READERS = {"producer": 200, "worker": 200, "viewer": 200, "admin": 200, "admin-user": 200}
ROUTES: list[tuple[str, str, dict[str, Any] | None, dict[str, int]]] = [
    ("POST", "/jobs", {"type": "email"}, {"producer": 201, "admin": 201, "admin-user": 201}),
    ("GET", "/jobs", None, ALL_READERS),
    ("GET", "/jobs/1", None, {**ALL_READERS, "worker": 404}),  # not (yet) held by "w"
    ("POST", "/jobs/claim", {}, {"worker": 200}),
    ("POST", "/jobs/1/heartbeat", {"attempt": 1}, {"worker": 200}),
    ("POST", "/jobs/1/complete", {"attempt": 1}, {"worker": 200}),
    ("POST", "/jobs/1/fail", {"attempt": 1, "error": "x"}, {"worker": 409}),
    ("POST", "/jobs/1/cancel", {}, {"producer": 409, "admin": 409, "admin-user": 409}),
    ("POST", "/jobs/1/retry", {}, {"admin": 409, "admin-user": 409}),
    ("GET", "/metrics", None, {"admin": 200, "admin-user": 200, "metrics": 200}),
    ("GET", "/openapi.json", None, {**ALL_READERS, "metrics": 200}),
]


def assert_401(resp: Any) -> None:
    """401 as problem+json, with a challenge for both schemes."""
    assert resp.status_code == 401, resp.get_data(as_text=True)
    assert resp.mimetype == "application/problem+json" and resp.json["status"] == 401
    challenge = resp.headers["WWW-Authenticate"]
    assert "Basic" in challenge and "Bearer" in challenge


def test_role_matrix(client, make_key, store):
    """Each role reaches exactly its routes; every other route answers 403."""
    store.accounts.create_user("vera", quick_hash("viewer-password"), "viewer")
    store.accounts.create_user("ada", quick_hash("admin-password"), "admin")
    callers = {"producer": make_key("billing", "producer"), "worker": make_key("w", "worker"),
               "admin": make_key("root", "admin"), "metrics": make_key("prom", "metrics"),
               "viewer": basic("vera", "viewer-password"),
               "admin-user": basic("ada", "admin-password")}
    for method, path, body, allowed in ROUTES:
        for role, headers in callers.items():
            resp = client.open(path, method=method, json=body, headers=headers)
            if role in allowed:
                assert resp.status_code == allowed[role], (method, path, role)
            else:
                assert resp.status_code == 403, (method, path, role)
                assert resp.mimetype == "application/problem+json"


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_bearer_scheme_is_case_insensitive(client, store, scheme):
    _, token = store.accounts.create_key("billing", "producer")
    resp = client.get("/jobs", headers={"Authorization": f"{scheme} {token}"})
    assert resp.status_code == 200


@SQLITE_ONLY
def test_basic_scheme_is_case_insensitive(client, store):
    store.accounts.create_user("vera", quick_hash("viewer-password"), "viewer")
    raw = base64.b64encode(b"vera:viewer-password").decode()
    for scheme in ("Basic", "basic", "BASIC"):
        assert client.get("/jobs", headers={"Authorization": f"{scheme} {raw}"}).status_code == 200


def test_bad_credentials_are_401(client, store):
    store.accounts.create_user("vera", quick_hash("viewer-password"), "viewer")
    _, token = store.accounts.create_key("billing", "producer")
    for headers in ({}, {"Authorization": ""}, {"Authorization": "Bearer"},
                    {"Authorization": "Bearer "}, {"Authorization": f"Bearer {token}x"},
                    {"Authorization": f"Token {token}"}, {"Authorization": token},
                    {"Authorization": f"Basic {token}"}, {"Authorization": "Basic !!!"},
                    basic("vera", "wrong-password"), basic("nobody", "viewer-password"),
                    basic("", ""), basic("vera", ""), basic("", "viewer-password"),
                    {"Authorization": "Digest username=vera"}):
        assert_401(client.get("/jobs", headers=headers))


def test_revoked_key_is_401_at_once(client, store):
    _, token = store.accounts.create_key("billing", "producer")
    headers = {"Authorization": f"Bearer {token}"}
    assert client.get("/jobs", headers=headers).status_code == 200
    store.accounts.revoke_key("billing")
    assert_401(client.get("/jobs", headers=headers))
    _, new = store.accounts.create_key("billing", "producer")
    assert client.get("/jobs", headers={"Authorization": f"Bearer {new}"}).status_code == 200


@SQLITE_ONLY
def test_a_users_password_is_stored_hashed(client, store, make_user):
    make_user("vera", "viewer", password="viewer-password")
    stored = store.accounts.user("vera").password_hash
    assert "viewer-password" not in stored and stored.count("$") >= 2  # method$salt$hash


@SQLITE_ONLY
def test_admin_user_enqueues_at_any_priority(client, store):
    store.accounts.create_user("ada", quick_hash("admin-password"), "admin")
    ada = basic("ada", "admin-password")
    resp = client.post("/jobs", json={"type": "email", "priority": "critical"}, headers=ada)
    assert resp.status_code == 201 and resp.json["producer"] == "ada"


def test_principal_admin_flag():
    assert Principal("a", "admin", "key").is_admin
    assert not Principal("v", "viewer", "user").is_admin


@SQLITE_ONLY
def test_a_wrong_credential_is_told_apart_from_none(client, store):
    """Still 401 with the challenge, but a mistyped token is not told to send a token."""
    store.accounts.create_user("vera", quick_hash("viewer-password"), "viewer")
    details = {}
    for name, headers in (("none", {}), ("bearer", {"Authorization": "Bearer ql_wrong"}),
                          ("basic", basic("vera", "wrong-password"))):
        resp = client.get("/jobs", headers=headers)
        assert_401(resp)
        details[name] = resp.json["detail"]
    assert len(set(details.values())) == 3, details
    assert "Send an API key" in details["none"]
    assert "not valid" in details["bearer"] and "password" in details["basic"]


def test_a_key_revoked_elsewhere_stops_at_once_here(client, store, db_url):
    """Every request reads the key from the database: no process keeps a revoked key."""
    from queuelog.server.store import Store
    _, token = store.accounts.create_key("mailer-9", "worker")
    headers = {"Authorization": f"Bearer {token}"}
    for _ in range(3):  # warm: the same key, request after request
        assert client.post("/jobs/claim", headers=headers).status_code == 204
    other = Store(db_url)  # another process (or server) on the same database
    try:
        assert other.accounts.revoke_key("mailer-9")
    finally:
        other.close()
    assert client.post("/jobs/claim", headers=headers).status_code == 401


def test_an_unknown_user_costs_what_a_known_one_does(client: Any, make_user: Any) -> None:
    """A name that is no user is still checked against a slow hash, of the method and cost
    a person's password gets (hash_password), so the answer's time does not tell names
    apart. (Other tests make that dummy hash cheap; this one keeps it.)"""
    from queuelog.server import auth
    checked = hash_checks(client.application, cheap_dummy=False)
    assert client.get("/jobs", headers=basic("nobody-at-all", "guess")).status_code == 401
    method = auth.hash_password("x").split("$", 1)[0]
    assert [h.split("$", 1)[0] for h in checked] == [method]
    assert method.startswith("scrypt:")  # werkzeug's slow default, not the tests' quick one
