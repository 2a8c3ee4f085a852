"""A process's found keys (store/keycache.py): kept, and dropped by any revocation.

Two stores on one database stand for two server processes: a key one of them found keeps
working there only until the other revokes it, on every backend.
"""
from __future__ import annotations

from typing import Any

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


def test_a_found_key_is_read_again_only_where_servers_share_no_memory(store: Store) -> None:
    """SQLite's processes share a machine: a found key costs no connection; PostgreSQL's
    servers share nothing, so every lookup reads the database. An unknown token always does."""
    _, token = store.accounts.create_key("mailer-1", "worker")
    assert store.accounts.key_for_token(token) is not None
    reads = {"sqlite": 0, "postgresql": 1}[store.backend.name]
    assert _checkouts(store, lambda: store.accounts.key_for_token(token)) == reads
    assert _checkouts(store, lambda: store.accounts.key_for_token("ql_wrong")) == 1
