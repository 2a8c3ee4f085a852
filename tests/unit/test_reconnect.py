"""A PostgreSQL restart: the pooled connections the server closed are not used again."""
from __future__ import annotations

from typing import Any

import psycopg
import pytest

from helpers import add_job, until


def _terminate_the_pool(store: Any, url: str) -> None:
    """What a server restart does to the store's pooled connections: each closed by the
    server while idle, its goodbye left unread on its socket. (Only the pool's: the test
    session's own connections stay.)"""
    held = [store.engine.connect() for _ in range(3)]  # the pool's, LIFO: these come next
    pids = [conn.connection.dbapi_connection.info.backend_pid for conn in held]
    for conn in held:
        conn.close()
    conninfo = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid",
                      (pids,))
        # Gone: their goodbyes are sent.
        until(lambda: admin.execute("SELECT count(*) FROM pg_stat_activity "
                                    "WHERE pid = ANY(%s)", (pids,)).fetchone()[0] == 0)


@pytest.fixture
def restarted(backend: str, db_url: str, store: Any) -> Any:
    if backend != "postgresql":
        pytest.skip("SQLite has no server to close a connection")
    return lambda: _terminate_the_pool(store, db_url)


def test_each_verb_after_a_restart_runs_on_a_fresh_connection(store, restarted):
    jobs = [add_job(store) for _ in range(3)]  # the pool holds connections now
    restarted()
    # Prepared statements on the driver's cursor (enqueue, claim), Core (list, get),
    # the raw driver path of the key lookup: none meets a closed connection.
    add_job(store)
    assert store.claim("w1") is not None
    assert len(store.list_jobs(limit=10).jobs) == 4
    assert store.get(jobs[0].id).id == jobs[0].id
    restarted()
    assert store.accounts.key_for_token("ql_no-such-token") is None


def test_a_request_after_a_restart_is_answered(client, producer, restarted):
    assert client.post("/jobs", json={"type": "email"}, headers=producer).status_code == 201
    restarted()
    assert client.post("/jobs", json={"type": "email"}, headers=producer).status_code == 201
    assert client.get("/jobs", headers=producer).status_code == 200
