"""The common claim in one statement (store/backends/postgres.py ``_claim_alone``), on both backends.

On PostgreSQL a claim with nothing in its way is one guarded statement: no lease run out,
the waiting claim's key still active, no limiter row. Each test first claims once, so the
store has read that there is no limiter row, then puts one thing in the way: the claim
must see it, as its first reads would. On SQLite the same tests run the transaction.
"""
from __future__ import annotations

import re
from typing import Any

import pytest
from sqlalchemy import event, select, text

from helpers import add_job
from queuelog.model.jobs import Status
from queuelog.server.store.accounts import hash_token
from queuelog.server.store import Store
from queuelog.server.store.statements import alone_guard


def _warm(store: Store) -> None:
    """One claim on an empty queue: the store has read its limiter rows (none)."""
    assert list(store.claim_many("w1", 1)) == []


def test_a_claim_with_nothing_in_its_way_is_one_statement(store: Store) -> None:
    if store.backend.name != "postgresql":
        pytest.skip("SQLite claims in a transaction: its write lock")
    _warm(store)
    job = add_job(store)
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        got = store.claim_many("w1", 5, key=None)
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert [j.id for j in got] == [job.id] and got[0].status is Status.RUNNING
    assert len(sent) == 1, sent
    assert store.get(job.id).attempts[0].worker_id == "w1"  # its attempt opened with it


def test_a_lease_run_out_since_the_last_claim_is_taken_back_first(store: Store,
                                                                   clock: Any) -> None:
    _warm(store)
    held, other = add_job(store), add_job(store)
    assert store.claim("w1", lease_seconds=10).id == held.id
    clock.advance(11)
    got = store.claim_many("w2", 5)
    assert [j.id for j in got] == [other.id]
    taken_back = store.get(held.id)  # pending again, its retry scheduled
    assert taken_back.status is Status.PENDING and taken_back.retry_count == 1


def test_a_key_revoked_while_its_claim_waited_claims_nothing(store: Store) -> None:
    _warm(store)
    _, token = store.accounts.create_key("runner-1", "worker")
    job = add_job(store)
    store.accounts.revoke_key("runner-1")
    got = store.claim_many("runner-1", 1, key=hash_token(token))
    assert list(got) == [] and got.revoked
    assert store.get(job.id).status is Status.PENDING


def test_a_limit_set_on_another_server_holds_at_this_ones_next_claim(store: Store,
                                                                      db_url: str) -> None:
    _warm(store)
    other = Store(db_url)  # another app server on the same database
    try:
        other.set_limits("sync", {"concurrency": 1}, "root")
    finally:
        other.close()
    for _ in range(3):
        add_job(store, "sync")
    assert len(store.claim_many("w1", 10, types=["sync"])) == 1
    assert len(store.claim_many("w1", 10)) == 0


def test_the_guard_reads_one_lease_however_many_jobs_run(store: Store) -> None:
    """The guard's lease check stays one index entry under a generic plan (PostgreSQL).

    psycopg prepares the claim from its sixth run, and PostgreSQL may then keep a generic
    plan, blind to ``:now``. An ``EXISTS (lease < :now)`` it planned there as a scan of
    every running job (it guesses a third match, so the first is near; none does): 39 ms
    a claim at 200,000 running jobs, against 0.65 ms for the earliest lease's min().
    """
    if store.backend.name != "postgresql":
        pytest.skip("the guarded claim is PostgreSQL's")
    sql = select(alone_guard()).compile(dialect=store.engine.dialect)
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        names.append(match.group(1))
        return f"${len(names)}"
    numbered = re.sub(r"%\((\w+)\)s", number, sql.string)
    with store.engine.begin() as conn:
        # Running jobs, every lease in the future, and statistics that know it.
        conn.execute(text(
            "INSERT INTO jobs (type, payload, priority, status, attempt, retry_count,"
            " max_retries, run_at, created_at, updated_at, producer, worker_id,"
            " lease_expires_at, claimed_at) SELECT 'email', '{}', 0, 'running', 1, 0, 3, 0,"
            " 0, 0, 'p', 'w', 9000000000000000, 0 FROM generate_series(1, 20000)"))
        conn.execute(text("ANALYZE jobs"))
        conn.exec_driver_sql("SET LOCAL plan_cache_mode = force_generic_plan")
        conn.exec_driver_sql(f"PREPARE guard AS {numbered}")
        args = {**sql.params, "now": 1_000, "th": None}
        plan = conn.exec_driver_sql(
            "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE guard ("
            + ", ".join("NULL" if args[n] is None else str(args[n]) for n in names)
            + ")").scalar()
        conn.exec_driver_sql("DEALLOCATE guard")
    assert _rows_read(plan[0]["Plan"], "jobs") <= 1, plan


def _rows_read(node: dict[str, Any], table: str) -> int:
    """Rows a plan's scans of ``table`` returned, all loops, the whole tree."""
    own = (node.get("Actual Rows", 0) * node.get("Actual Loops", 1)
           + node.get("Rows Removed by Filter", 0)
           if node.get("Relation Name") == table else 0)
    return own + sum(_rows_read(child, table) for child in node.get("Plans", []))
