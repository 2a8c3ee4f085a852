"""Database faults: 503 unavailable with Retry-After, never a 500; nothing half-written; healing."""
from __future__ import annotations

import logging
import os
import sqlite3
from typing import Any, Iterator

import psycopg
import pytest
from helpers import problem
from sqlalchemy import event, exc as sa_exc
from sqlalchemy.engine import make_url

from queuelog.errors import is_unavailable

SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"])
PG_ONLY = pytest.mark.parametrize("backend", [pytest.param("postgresql",
                                                           marks=pytest.mark.postgresql)])
TABLES = ("jobs", "job_attempts", "api_keys", "users")


# -- which errors mean "the database is unavailable" -------------------------------------
def _sqlite_error(sql: str, *setup: str) -> sqlite3.Error:
    conn = sqlite3.connect(":memory:")
    for statement in setup:
        conn.execute(statement)
    try:
        conn.execute(sql)
    except sqlite3.Error as err:
        return err
    finally:
        conn.close()
    raise AssertionError(f"{sql!r} did not fail")


@pytest.mark.parametrize("err, expected", [
    (psycopg.OperationalError("server closed the connection unexpectedly"), True),
    (psycopg.errors.AdminShutdown("terminating connection due to administrator command"), True),
    (psycopg.errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"),
     True),
    (psycopg.errors.UniqueViolation("duplicate key"), False),
    (psycopg.errors.UndefinedTable("relation does not exist"), False),
    (sa_exc.TimeoutError("QueuePool limit reached"), True),
    (sqlite3.OperationalError("database is locked"), True),
    (sqlite3.OperationalError("disk I/O error"), True),
    (sqlite3.OperationalError("database or disk is full"), True),
    (sqlite3.OperationalError("unable to open database file"), True),
    (sqlite3.OperationalError("attempt to write a readonly database"), True),
    (ValueError("database is locked"), False),
    (RuntimeError("boom"), False),
])
def test_errors_that_mean_the_database_is_unavailable(err, expected):
    assert is_unavailable(err) is expected
    wrapped = sa_exc.OperationalError("SELECT 1", {}, err) if isinstance(
        err, (sqlite3.Error, psycopg.Error)) else err
    assert is_unavailable(wrapped) is expected


def test_sqlite_errors_are_told_apart_by_their_code():
    # Real errors carry sqlite_errorcode: a missing table or bad SQL is OperationalError too.
    assert not is_unavailable(_sqlite_error("SELECT * FROM nowhere"))
    assert not is_unavailable(_sqlite_error("SELEC 1"))
    assert is_unavailable(_sqlite_error("CREATE TABLE t (x)", "PRAGMA query_only=1"))
    disconnected = sa_exc.DBAPIError("SELECT 1", {}, Exception("gone"),
                                     connection_invalidated=True)
    assert is_unavailable(disconnected)


# -- SQLite: a database that cannot be written, or is gone --------------------------------
@pytest.fixture
def on_connect(store: Any) -> Iterator[Any]:
    """Run PRAGMAs on every new connection of the app's engine (the pool is emptied now)."""
    pragmas: list[str] = []

    def apply(dbapi_conn: Any, _record: Any) -> None:
        for pragma in pragmas:
            dbapi_conn.execute(pragma)

    event.listen(store.engine, "connect", apply)
    yield lambda *more: (pragmas.extend(more), store.engine.dispose())
    event.remove(store.engine, "connect", apply)
    store.engine.dispose()


def _snapshot(store: Any) -> dict[str, list[Any]]:
    """Every row of every table, to show that a failed request changed nothing."""
    with store.engine.connect() as conn:
        return {t: sorted(map(tuple, conn.exec_driver_sql(f"SELECT * FROM {t}").all()))
                for t in TABLES}


def _unavailable(resp: Any) -> dict[str, Any]:
    body = problem(resp, 503, "unavailable")
    assert resp.headers["Retry-After"] == "1"
    return body


@SQLITE_ONLY
def test_sqlite_database_full_is_503_and_writes_nothing(client, store, producer, worker,
                                                        on_connect, caplog):
    held = client.post("/jobs", json={"type": "email"}, headers=producer).json
    client.post("/jobs/claim", headers=worker)
    with store.engine.connect() as conn:
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
    before = _snapshot(store)
    on_connect(f"PRAGMA max_page_count={pages}")  # not one page more: SQLITE_FULL
    big = {"type": "email", "payload": {"blob": "x" * 60_000}}
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            _unavailable(client.post("/jobs", json=big, headers=producer))
        done = client.post(f"/jobs/{held['id']}/complete",
                           json={"attempt": 1, "result": {"blob": "y" * 60_000}},
                           headers=worker)
        _unavailable(done)
        assert _snapshot(store) == before  # nothing half-written: no job, no attempt row
        # Reads still work, and the first request that succeeds ends the incident.
        assert client.get(f"/jobs/{held['id']}", headers=worker).status_code == 200
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len([m for m in warnings if "database unavailable" in m]) == 1, warnings
    assert "database or disk is full" in warnings[0]
    assert warnings[-1] == "database is back"
    assert not any(r.exc_info for r in caplog.records)  # no traceback per request


@SQLITE_ONLY
def test_sqlite_read_only_database_is_503_for_every_write(client, store, producer, worker,
                                                          admin, on_connect):
    pending = client.post("/jobs", json={"type": "email"}, headers=producer).json
    running = client.post("/jobs", json={"type": "pdf"}, headers=producer).json
    assert client.post("/jobs/claim", json={"types": ["pdf"]}, headers=worker).json[
        "id"] == running["id"]
    before = _snapshot(store)
    # query_only gives SQLITE_READONLY: what a read-only file or mount gives, even to root.
    on_connect("PRAGMA query_only=1")
    _unavailable(client.post("/jobs", json={"type": "email"}, headers=producer))
    _unavailable(client.post("/jobs/claim", headers=worker))
    _unavailable(client.post(f"/jobs/{running['id']}/heartbeat", json={"attempt": 1},
                             headers=worker))
    _unavailable(client.post(f"/jobs/{running['id']}/complete", json={"attempt": 1},
                             headers=worker))
    _unavailable(client.post(f"/jobs/{running['id']}/fail", json={"attempt": 1, "error": "e"},
                             headers=worker))
    _unavailable(client.post(f"/jobs/{pending['id']}/cancel", headers=producer))
    assert _snapshot(store) == before
    assert client.get("/jobs", headers=admin).status_code == 200


@SQLITE_ONLY
def test_sqlite_locked_past_the_busy_timeout_is_503(client, store, producer, on_connect,
                                                    db_url):
    on_connect("PRAGMA busy_timeout=50")
    path = make_url(db_url).database
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        before = _snapshot(store)
        body = _unavailable(client.post("/jobs", json={"type": "email"}, headers=producer))
        assert "idempotency key" in body["detail"]  # says what a producer should do
        assert _snapshot(store) == before
    finally:
        blocker.rollback()
        blocker.close()
    assert client.post("/jobs", json={"type": "email"}, headers=producer).status_code == 201


@SQLITE_ONLY
def test_sqlite_database_gone_answers_503_everywhere_then_heals(app, client, store, producer,
                                                                make_user, db_url, tmp_path,
                                                                caplog):
    viewer = make_user("vera", "viewer")
    path = make_url(db_url).database
    aside = tmp_path / "aside"
    aside.mkdir()
    store.engine.dispose()  # pooled connections would keep the moved file open
    files = [suffix for suffix in ("", "-wal", "-shm") if os.path.exists(path + suffix)]
    for suffix in files:
        os.rename(path + suffix, aside / f"db{suffix}")
    os.mkdir(path)  # a directory where the file was: opening it fails, even as root
    try:
        with caplog.at_level(logging.WARNING):
            _unavailable(client.post("/jobs", json={"type": "email"}, headers=producer))
            _unavailable(client.get("/healthz"))
            page = client.get("/ui/", headers=viewer)
            assert page.status_code == 503 and page.mimetype == "text/html"
            assert page.headers["Retry-After"] == "1"
            assert "Database unavailable" in page.get_data(as_text=True)
            assert page.headers["Content-Security-Policy"].startswith("default-src 'self'")
    finally:
        os.rmdir(path)
        for suffix in files:
            os.rename(aside / f"db{suffix}", path + suffix)
    with caplog.at_level(logging.WARNING):
        assert client.get("/healthz").json == {"status": "ok"}
        assert client.post("/jobs", json={"type": "email"}, headers=producer).status_code == 201
    lines = [r.getMessage() for r in caplog.records if r.name == app.logger.name]
    assert lines[0].startswith("database unavailable (OperationalError: unable to open"), lines
    assert lines[1:] == ["database is back"]
    assert not any(r.exc_info for r in caplog.records)
