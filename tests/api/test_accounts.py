"""Keys and users share one name space: the commands refuse a taken name, races included,
and a collision left by an older database never lets a key act as the person."""
from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import insert

from helpers import basic, enqueue, quick_hash
from queuelog.model.problems import Conflict
from queuelog.server.store.tables import api_keys, users
from queuelog.server.store.accounts import hash_token


def test_keys_create_refuses_a_users_name(app, store):
    store.accounts.create_user("bob", quick_hash("bob-password"), "admin")
    with pytest.raises(Conflict, match="name space"):
        store.accounts.create_key("bob", "producer")
    got = app.test_cli_runner().invoke(args=["keys", "create", "--name", "bob",
                                             "--role", "producer"])
    assert got.exit_code != 0 and "name space" in got.output
    assert [k.name for k in store.accounts.list_keys()] == []


def test_users_create_refuses_an_active_keys_name_not_a_revoked_one(app, store):
    store.accounts.create_key("bob", "producer")
    got = app.test_cli_runner().invoke(args=["users", "create", "bob", "--role", "viewer",
                                             "--password-stdin"], input="a long password\n")
    assert got.exit_code != 0 and "name space" in got.output
    assert store.accounts.user("bob") is None
    # A revoked key's name is free again, for a key (rotation) or for a person.
    assert store.accounts.revoke_key("bob")
    store.accounts.create_user("bob", quick_hash("bob-password"), "viewer")
    assert store.accounts.user("bob") is not None


def test_a_key_and_a_user_of_one_name_created_at_once_never_both_exist(store):
    """Check and insert in one transaction, serialized by the database (both backends)."""
    both = 0
    for round_ in range(30):
        name = f"racer-{round_}"
        start = threading.Barrier(2)
        results: list[str] = []

        def make(kind: str) -> None:
            start.wait(timeout=10)
            try:
                if kind == "key":
                    store.accounts.create_key(name, "producer")
                else:
                    store.accounts.create_user(name, "not-a-real-hash", "viewer")
                results.append(kind)
            except Conflict:
                pass

        threads = [threading.Thread(target=make, args=(k,)) for k in ("key", "user")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert len(results) >= 1
        both += len(results) == 2
    assert both == 0


def test_an_older_databases_colliding_key_cannot_act_as_the_user(client, store, producer):
    """A key named like a user (made before the check existed) is refused; the user is not."""
    bob = basic("bob", "bob-password")
    store.accounts.create_user("bob", quick_hash("bob-password"), "admin")
    job = enqueue(client, bob)  # bob's job: its producer is "bob"
    token = "ql_" + "x" * 43
    with store.engine.begin() as conn:  # as an older queuelog could have stored it
        conn.execute(insert(api_keys).values(name="bob", role="producer",
                                             token_hash=hash_token(token), max_priority=10,
                                             created_at=store.clock()))
    as_key = {"Authorization": f"Bearer {token}"}
    for method, path in (("GET", f"/jobs/{job['id']}"), ("POST", f"/jobs/{job['id']}/cancel"),
                         ("GET", "/jobs")):
        resp: Any = client.open(path, method=method, headers=as_key)
        assert resp.status_code == 401, (method, path)
    assert client.get(f"/jobs/{job['id']}", headers=bob).json["status"] == "pending"
    assert client.get("/jobs", headers=producer).json["jobs"] == []  # other keys unaffected


def test_keys_list_marks_a_colliding_key_refused(app, store):
    store.accounts.create_key("bob", "producer")
    with store.engine.begin() as conn:  # an older database: the user came without the check
        conn.execute(users.insert().values(username="bob", password_hash="x", role="viewer",
                                           created_at=store.clock()))
    out = app.test_cli_runner().invoke(args=["keys", "list"]).output
    assert "refused: a user has this name" in out
