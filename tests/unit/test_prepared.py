"""The hot statements' executor (store/prepared.py), on both backends."""
from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import bindparam, event, select
from sqlalchemy.exc import IntegrityError

from queuelog.server.store.enqueue import new_row
from queuelog.server.store import NewJob
from queuelog.server.store.prepared import Prepared
from queuelog.server.store.tables import jobs


def _types(store: Any, not_in: list[str]) -> list[str]:
    stmt = Prepared(select(jobs.c.type).where(
        jobs.c.type.not_in(bindparam("skip", expanding=True))).order_by(jobs.c.id),
        store.engine.dialect)
    with store.engine.begin() as conn:
        return [r.type for r in stmt.rows(conn, {"skip": not_in})]


def test_a_list_parameter_expands_and_an_empty_one_excludes_nothing(store):
    store.enqueue_many([NewJob("p", t, "{}", 0, 3) for t in ("a", "b", "c")])
    assert _types(store, []) == ["a", "b", "c"]
    assert _types(store, ["b"]) == ["a", "c"]
    assert _types(store, ["a", "b", "c"]) == []


def test_a_batch_is_one_insert_answered_in_request_order(store):
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    news = [NewJob("p", "email", f'{{"i": {i}}}', i % 7, 3, idempotency_key=f"k{i}")
            for i in range(250)]
    event.listen(store.engine, "before_cursor_execute", record)  # listeners still hear it
    try:
        got, replayed = store.enqueue_many(news)
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert [j.payload["i"] for j in got] == list(range(250)) and replayed == []
    assert [j.priority for j in got] == [i % 7 for i in range(250)]
    assert [j.id for j in got] == sorted(j.id for j in got)
    assert sum(s.lstrip().upper().startswith("INSERT INTO JOBS") for s in sent) == 1


def test_a_batch_without_keys_is_its_insert_alone(store):
    """No key to look up: the batch is one statement, its wake-up in it (PostgreSQL: a
    pg_notify in its RETURNING, in autocommit; no SELECT pg_notify of its own)."""
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not statement.lstrip().upper().startswith(("BEGIN", "COMMIT", "SAVEPOINT",
                                                       "RELEASE")):
            sent.append(statement)

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        got, _ = store.enqueue_many([NewJob("p", "email", "{}", 0, 3) for _ in range(3)])
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert len(got) == 3
    assert len(sent) == 1 and sent[0].lstrip().upper().startswith("INSERT INTO JOBS"), sent


def test_a_driver_error_is_sqlalchemys_and_changes_nothing(store):
    store.enqueue(NewJob("p", "email", "{}", 0, 3, idempotency_key="k", request_hash="h"))
    with pytest.raises(IntegrityError):  # what enqueue's race handling catches
        with store.ctx.write.begin() as conn:
            store.enqueuing._insert_new(conn, [new_row(NewJob("p", "email", "{}", 0, 3), 0),
                                      new_row(NewJob("p", "email", "{}", 0, 3,
                                                           idempotency_key="k"), 0)])
    with store.engine.connect() as conn:
        assert conn.execute(select(jobs.c.id)).all() == [(1,)]


def test_a_batch_past_one_statements_rows_is_still_whole_and_in_order(store):
    """SQLite caps a statement's parameters: a batch goes in statements of at most
    ``rows_per_insert`` rows, in one transaction, so a failure in the last undoes the first."""
    step = getattr(store.backend, "rows_per_insert", 500)  # PostgreSQL: one statement
    total = 2 * step + 2
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        got, _ = store.enqueue_many([NewJob("p", "email", f'{{"i": {i}}}', 0, 3)
                                     for i in range(total)])
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    inserts = sum(s.lstrip().upper().startswith("INSERT INTO JOBS") for s in sent)
    assert inserts == (3 if store.backend.name == "sqlite" else 1)  # PostgreSQL: one JSON
    assert [j.payload["i"] for j in got] == list(range(total))
    assert [j.id for j in got] == sorted(j.id for j in got)
    rows = [new_row(NewJob("p", "email", "{}", 0, 3), 0) for _ in range(2 * step + 1)]
    rows[-1]["type"] = None  # NOT NULL: the third statement fails
    with pytest.raises(IntegrityError):
        with store.ctx.write.begin() as conn:
            store.enqueuing._insert_new(conn, rows)
    with store.engine.connect() as conn:
        assert len(conn.execute(select(jobs.c.id)).all()) == total


def test_a_batchs_jobs_are_their_rows_as_stored(store, clock):
    """Only the ids come back from the INSERT: the rest of each job is what was sent, and
    must be what a read of its row gives."""
    news = [NewJob("p", "email", '{"i": %d, "x": [1.5, null, "\\u00e9", "\\u0000"]}' % i,
                   i % 3, i, delay_seconds=i or None) for i in range(5)]
    got, _ = store.enqueue_many(news)
    assert [store.get(j.id).without_history() for j in got] == got
    assert got[1].payload == {"i": 1, "x": [1.5, None, "é", "\x00"]}
    assert got[4].max_retries == 4


def test_a_batch_complete_is_its_statement_alone_where_it_closes_the_attempts(store):
    """PostgreSQL's batch complete closes the attempts in its one UPDATE: it runs in
    autocommit (no BEGIN and COMMIT round trips), as a single complete does."""
    if store.backend.name == "sqlite":
        pytest.skip("SQLite closes the attempts in a second statement: a transaction")
    store.enqueue_many([NewJob("p", "email", "{}", 0, 3) for _ in range(3)])
    held = store.claim_many("w1", 3, lease_seconds=60)
    modes: list[bool] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "UPDATE jobs" in statement:
            modes.append(conn.connection.driver_connection.autocommit)

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        got = store.complete_many("w1", [(j.id, j.attempt, None) for j in held])
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert len(got) == 3 and not any(isinstance(g, Exception) for g in got)
    assert modes == [True]


def _only_postgresql(store: Any) -> None:
    if store.backend.name != "postgresql":
        pytest.skip("psycopg's prepared statements and PostgreSQL backends")


def _backend_pid(store: Any) -> int:
    with store.ctx.read.connect() as conn:
        return int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())


def test_a_quiet_server_works_on_the_connection_it_returned_last(store):
    """The pool is LIFO: one hot connection (its statements prepared), not ten in turn."""
    _only_postgresql(store)
    held = [store.engine.connect() for _ in range(3)]
    pids = [int(c.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()) for c in held]
    for conn in held:
        conn.close()
    assert [_backend_pid(store) for _ in range(3)] == [pids[-1]] * 3


def test_reads_between_claims_keep_the_claims_prepared_statement(store):
    """A read ends without a ROLLBACK (psycopg forgets every prepared statement at one):
    a long poll's read between its looks left each woken claim to parse and plan again."""
    _only_postgresql(store)
    for _ in range(8):  # psycopg prepares a statement at its 6th run on a connection
        store.claim_many("w1", 1, types=["email"])
    store.next_due_in(["email"])     # the long poll's read between two looks
    store.count_by_status(100)       # and a dashboard's
    with store.ctx.read.connect() as conn:
        prepared = conn.exec_driver_sql("SELECT statement FROM pg_prepared_statements").scalars()
        assert any("claimed" in text for text in prepared)
