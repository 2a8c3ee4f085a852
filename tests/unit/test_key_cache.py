"""A process's found keys (store/keycache.py): kept, and dropped by any revocation.

Two stores on one database stand for two server processes: a key one of them found keeps
working there only until the other revokes it, on every backend.
"""
from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event

from queuelog.server.store import Store


def _checkouts(store: Store, action: Any) -> int:
    """How many pooled connections ``action`` took."""
    taken: list[int] = []

    def record(*args: Any) -> None:
        taken.append(1)

    event.listen(store.engine, "checkout", record)
    try:
        action()
    finally:
        event.remove(store.engine, "checkout", record)
    return len(taken)


def test_a_key_revoked_by_another_process_stops_at_once(store: Store, db_url: str) -> None:
    _, token = store.accounts.create_key("mailer-1", "worker")
    _, other_token = store.accounts.create_key("mailer-2", "worker")
    assert store.accounts.key_for_token(token).name == "mailer-1"
    assert store.accounts.key_for_token(other_token).name == "mailer-2"
    other = Store(db_url)  # another server process on the same database
    try:
        assert other.accounts.revoke_key("mailer-1")
    finally:
        other.close()
    assert store.accounts.key_for_token(token) is None
    again = store.accounts.key_for_token(other_token)  # read again, still active
    assert again is not None and again.name == "mailer-2"


def test_a_key_revoked_in_this_process_stops_at_once(store: Store) -> None:
    _, token = store.accounts.create_key("mailer-1", "worker")
    assert store.accounts.key_for_token(token) is not None
    store.accounts.revoke_key("mailer-1")
    assert store.accounts.key_for_token(token) is None


def test_sqlite_reads_a_found_key_from_memory(store: Store) -> None:
    if store.backend.name != "sqlite":
        pytest.skip("PostgreSQL reads the key on every request: its servers share no memory")
    _, token = store.accounts.create_key("mailer-1", "worker")
    assert store.accounts.key_for_token(token) is not None
    assert _checkouts(store, lambda: store.accounts.key_for_token(token)) == 0
    assert _checkouts(store, lambda: store.accounts.key_for_token("ql_wrong")) == 1


def test_postgresql_reads_the_key_on_every_request(store: Store) -> None:
    if store.backend.name != "postgresql":
        pytest.skip("SQLite's processes share one machine: the cache is dropped by a counter")
    _, token = store.accounts.create_key("mailer-1", "worker")
    assert store.accounts.key_for_token(token) is not None
    assert _checkouts(store, lambda: store.accounts.key_for_token(token)) == 1
