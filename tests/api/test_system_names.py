"""Bug 7: the names the system acts under in the audit log are nobody else's (contract)."""
from __future__ import annotations

from typing import Any

import pytest
from helpers import add_user, basic, problem

from queuelog.model.problems import Conflict
from queuelog.server import actions
from queuelog.server.auth import is_system_name
from queuelog.server.store import Store

SYSTEM = ["cli", "retention", "schedule:nightly", "CLI", " Retention ", "Schedule:x"]


def test_the_actors_the_system_uses_are_system_names() -> None:
    assert is_system_name(actions.CLI.name) and is_system_name("retention")  # retention.py's actor
    assert is_system_name("schedule:nightly")
    assert not is_system_name("client") and not is_system_name("my-retention")


@pytest.mark.parametrize("name", SYSTEM)
def test_keys_create_refuses_a_system_name(runner: Any, store: Store, name: str) -> None:
    result = runner.invoke(args=["keys", "create", "--name", name, "--role", "admin"])
    assert result.exit_code == 1, result.output
    assert "is reserved" in result.output and "ql_" not in result.stdout
    assert store.accounts.list_keys() == []


@pytest.mark.parametrize("name", ["cli", "retention", "CLI"])  # a username has no ":"
def test_users_create_refuses_a_system_name(runner: Any, store: Store, name: str) -> None:
    result = runner.invoke(args=["users", "create", name, "--role", "admin", "--password-stdin"],
                           input="a long enough password\n")
    assert result.exit_code == 1, result.output
    assert "is reserved" in result.output
    assert store.accounts.list_users() == []


def test_actions_refuse_system_names_whoever_calls_them(app: Any, store: Store) -> None:
    with app.app_context():
        with pytest.raises(Conflict, match="reserved"):
            actions.create_key(actions.CLI, "retention", "worker", types=None, max_priority=10)
        with pytest.raises(Conflict, match="reserved"):
            actions.create_user(actions.CLI, "schedule:daily", "hash", "viewer")
        key, _ = actions.create_key(actions.CLI, "reporter", "worker", types=None,
                                    max_priority=10)
    assert key.name == "reporter" and [k.name for k in store.accounts.list_keys()] == ["reporter"]
    assert store.accounts.list_users() == []


def test_an_older_key_with_a_system_name_is_refused_until_replaced(
        client: Any, runner: Any, store: Store) -> None:
    """A database from before the rule: the row stays, but it cannot act as the system."""
    _, token = store.accounts.create_key("cli", "admin")  # as an older version allowed
    headers = {"Authorization": f"Bearer {token}"}
    body = problem(client.get("/jobs", headers=headers), 403, "forbidden")
    assert "reserved" in body["detail"]
    assert client.post("/jobs/1/retry", json={}, headers=headers).status_code == 403
    assert store.audit_events()[0] == []  # nothing done in the system's name
    # The operator can still revoke it, and the name stays refused for a new key.
    assert runner.invoke(args=["keys", "revoke", "cli"]).exit_code == 0
    assert client.get("/jobs", headers=headers).status_code == 401


def test_an_older_user_with_a_system_name_is_refused(client: Any, store: Store) -> None:
    headers = add_user(store, "retention", "admin", "pw-123456")
    body = problem(client.get("/jobs", headers=headers), 403, "forbidden")
    assert "reserved" in body["detail"]
    # A wrong password is still a 401 (the refusal says nothing before the check passes).
    problem(client.get("/jobs", headers=basic("retention", "not-the-password")), 401)
