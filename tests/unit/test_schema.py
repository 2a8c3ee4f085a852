"""The hot statements use indexes: a claim or a list page never scans or sorts all jobs.

Each test records the SQL the store really sends (an engine event), then asks the database
for its plan of exactly that statement: EXPLAIN QUERY PLAN on SQLite, EXPLAIN on PostgreSQL
with sequential scans priced out (on a small table the planner would rightly prefer one, so
this asks "is there an index path", which is what keeps the cost flat as the table grows).
"""
from __future__ import annotations

import contextlib
import json
import re
from typing import Any, Iterator

import pytest
from sqlalchemy import event, inspect, select

from queuelog.model.jobs import Status
from queuelog.server.store.tables import job_attempts, jobs
from queuelog.server.store import Scope, Store

ROWS = 2000


@contextlib.contextmanager
def recorded(store: Store) -> Iterator[list[tuple[str, Any]]]:
    """Collect (statement, parameters) of every statement the store sends."""
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
               executemany: bool) -> None:
        sent.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(store.engine, "before_cursor_execute", record)


def plan(store: Store, statement: str, parameters: Any,
         priced_out: tuple[str, ...] = ("enable_seqscan", "enable_bitmapscan", "enable_sort"),
         ) -> str:
    """The database's plan for one recorded statement, as text (PostgreSQL: with the
    ``priced_out`` paths made dear)."""
    with store.engine.connect() as conn:
        if store.engine.dialect.name == "sqlite":
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
            text = "\n".join(str(r[-1]) for r in rows)
        else:
            # Price out the paths that read or sort everything: what remains must be an
            # index walked in order (else the plan still shows the Seq Scan or Sort).
            for setting in priced_out:
                conn.exec_driver_sql(f"SET LOCAL {setting} = off")
            rows = conn.exec_driver_sql("EXPLAIN " + statement, parameters).all()
            text = "\n".join(r[0] for r in rows)
        conn.rollback()
    return text


def assert_indexed(store: Store, text: str, index: str) -> None:
    """The plan reads through ``index`` and never scans or sorts the whole jobs table."""
    assert index in text, text
    if store.engine.dialect.name == "sqlite":
        assert "TEMP B-TREE" not in text, text
        for line in text.splitlines():
            if line.startswith("SCAN") and ("jobs" in line or "cand" in line):
                assert "USING" in line, text  # an index walk in order, stopped by LIMIT
    else:
        assert "Seq Scan" not in text and "Sort" not in text, text


@pytest.fixture
def filled(store: Store) -> Store:
    """A store of mostly finished jobs; one in 50 carries the rare value a test filters on.

    A rare value is where an index matters: walking the primary key and filtering would
    read the whole table to fill one page.
    """
    now = store.clock()

    def row(i: int) -> dict[str, Any]:
        rare = i % 50 == 0
        status = "pending" if rare else "running" if i % 50 == 1 else "completed"
        return {"type": "pdf" if rare else "email", "payload": json.dumps({"i": i}),
                "priority": 20 if rare else 0, "status": status, "attempt": 1,
                "retry_count": 0, "max_retries": 3, "producer": "p3" if rare else "p0",
                "worker_id": "w1", "run_at": now - i,
                "lease_expires_at": now + 60 if status == "running" else None,
                "created_at": now, "updated_at": now}

    with store.engine.begin() as conn:
        conn.execute(jobs.insert(), [row(i) for i in range(ROWS)])
    if store.engine.dialect.name == "postgresql":
        with store.engine.connect() as conn:  # statistics, as autovacuum would gather
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
                "ANALYZE jobs")
    return store


def _one(sent: list[tuple[str, Any]], starts: str) -> tuple[str, Any]:
    # PostgreSQL's claim and complete are "WITH x AS (UPDATE jobs ...)": their attempts'
    # rows are written by a second CTE.
    found = [s for s in sent if re.match(rf"(WITH \w+ AS\s*\()?{starts}",
                                         s[0].lstrip().upper())]
    assert found, [s[0][:60] for s in sent]
    return found[0]


def test_the_schema_has_the_claim_and_list_indexes(store):
    names = {ix["name"] for ix in inspect(store.engine).get_indexes("jobs")}
    assert {"ix_jobs_claim", "ix_jobs_pending_type_claim", "ix_jobs_lease", "ix_jobs_status_id",
            "ix_jobs_type_id",
            "ix_jobs_priority_id", "ix_jobs_producer_id", "ix_jobs_status_type_id"} <= names


def test_claim_walks_the_claim_index(filled):
    with recorded(filled) as sent:
        assert filled.claim("w", lease_seconds=60) is not None
    statement, params = _one(sent, "UPDATE JOBS")
    assert_indexed(filled, plan(filled, statement, params), "ix_jobs_claim")


def test_a_claim_of_several_types_walks_each_types_index(filled):
    """Each type's own walk, stopped by LIMIT, then the best of those few: no walk of
    every pending job, which would pass the other types' jobs ahead of these."""
    with recorded(filled) as sent:
        assert filled.claim("w", lease_seconds=60, types=["pdf", "sync"]) is not None
    statement, params = _one(sent, "UPDATE JOBS")
    text = plan(filled, statement, params)
    if filled.engine.dialect.name == "sqlite":
        assert "SEARCH cand USING INDEX ix_jobs_pending_type_claim (type=?)" in text, text
        assert "SEARCH x USING INTEGER PRIMARY KEY" in text, text
        assert not [line for line in text.splitlines() if line.startswith("SCAN")
                    and ("jobs" in line or " x" in line or "cand" in line)], text
    else:  # a walk per type (a nested loop over the types), sorted: a few rows
        assert "Index Scan using ix_jobs_pending_type_claim on jobs cand" in text, text
        assert "ix_jobs_claim" not in text and "Seq Scan on jobs" not in text, text


def test_a_claim_of_one_type_walks_that_types_index(filled):
    """Not ix_jobs_claim: there it would pass every due job of the other types ahead of
    its own (a backlog of 300,000 of another type: 27-40 ms a claim, not 0.5-2)."""
    with recorded(filled) as sent:
        assert filled.claim("w", lease_seconds=60, types=["pdf"]) is not None
    statement, params = _one(sent, "UPDATE JOBS")
    assert_indexed(filled, plan(filled, statement, params), "ix_jobs_pending_type_claim")


def test_lease_take_back_walks_the_lease_index(filled):
    with recorded(filled) as sent:
        filled.claim("w", lease_seconds=60)
    statement, params = next(s for s in sent if "lease_expires_at <" in s[0]
                             and s[0].lstrip().upper().startswith("SELECT"))
    assert_indexed(filled, plan(filled, statement, params), "ix_jobs_lease")


@pytest.fixture
def stale(store: Store) -> Store:
    """A worker's 2,000 finished jobs, the statistics read then (no job running), and
    three of its jobs running since: what a planner that weighs the status and worker by
    statistics takes for a lookup of one row through the lease index."""
    now = store.clock()

    def row(i: int, status: str) -> dict[str, Any]:
        running = status == "running"
        return {"type": "email", "payload": "{}", "priority": 0, "status": status,
                "attempt": 1, "retry_count": 0, "max_retries": 3, "producer": "p0",
                "worker_id": "w1", "run_at": now, "created_at": now, "updated_at": now,
                "lease_expires_at": now + 60 if running else None,
                "finished_at": None if running else now}

    with store.engine.begin() as conn:
        conn.execute(jobs.insert(), [row(i, "completed") for i in range(ROWS)])
    if store.engine.dialect.name == "postgresql":
        with store.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
                "ANALYZE jobs")
    with store.engine.begin() as conn:
        ids = conn.execute(jobs.insert().returning(jobs.c.id),
                           [row(i, "running") for i in range(3)]).scalars().all()
        conn.execute(job_attempts.insert(), [
            {"job_id": i, "attempt": 1, "worker_id": "w1", "started_at": now,
             "outcome": "running"} for i in ids])
    return store


@pytest.mark.parametrize("verb", ["complete", "fail"])
def test_a_batch_finish_looks_up_each_item_by_id(stale, verb):
    """complete_many's and fail_many's statements find the items by primary key, not
    through the status, lease or worker indexes, which statistics can make look cheaper:
    those walk every running job, or every job the worker ever held (SQLite without its
    ``+``; PostgreSQL with the fence as plain conditions)."""
    with stale.engine.connect() as conn:
        held = conn.execute(select(jobs.c.id).where(jobs.c.status == "running")
                            ).scalars().all()
    with recorded(stale) as sent:
        if verb == "complete":
            got = stale.complete_many("w1", [(i, 1, None) for i in held])
        else:
            got = stale.fail_many("w1", [(i, 1, "boom", False, None) for i in held])
    assert [getattr(j, "status", j) for j in got] == [
        Status.COMPLETED if verb == "complete" else Status.FAILED] * 3
    reads = [s for s in sent if "UPDATE jobs SET" in s[0]
             or s[0].startswith("SELECT jobs.id, jobs.attempt, jobs.retry_count")]
    assert len(reads) == (1 if verb == "complete" else 2), [s[0][:60] for s in sent]
    for statement, params in reads:
        text = plan(stale, statement, params)
        if stale.engine.dialect.name == "sqlite":
            assert "PRIMARY KEY" in text and "ix_jobs" not in text, text
        else:
            assert "Index Scan using jobs_pkey on jobs" in text, text
            assert "ix_jobs" not in text and "Seq Scan on jobs" not in text, text
            # Nothing priced out: on this small table too the ids' lookup wins.
            free = plan(stale, statement, params, priced_out=())
            assert "Seq Scan on jobs" not in free and "ix_jobs" not in free, free


@pytest.mark.parametrize("filters, index", [
    ({"status": Status.PENDING}, "ix_jobs_status_id"),
    ({"type": "pdf"}, "ix_jobs_type_id"),
    ({"priority": 20}, "ix_jobs_priority_id"),
    ({"scope": Scope(producer="p3")}, "ix_jobs_producer_id"),
    ({"status": Status.PENDING, "type": "pdf"}, "ix_jobs_status_type_id"),
])
def test_filtered_list_pages_use_their_index(filled, filters, index):
    first = filled.list_jobs(limit=10, **filters)
    with recorded(filled) as sent:
        filled.list_jobs(limit=10, before=first.older, **filters)
    statement, params = _one(sent, "SELECT")
    assert_indexed(filled, plan(filled, statement, params), index)


def test_unfiltered_list_pages_walk_the_primary_key_in_order(filled):
    with recorded(filled) as sent:
        filled.list_jobs(limit=10, before=1000)
    statement, params = _one(sent, "SELECT")
    text = plan(filled, statement, params)
    if filled.engine.dialect.name == "sqlite":
        assert "TEMP B-TREE" not in text and ("INTEGER PRIMARY KEY" in text
                                              or text.strip() == "SCAN jobs"), text
    else:
        assert "jobs_pkey" in text and "Seq Scan" not in text and "Sort" not in text, text


def test_get_by_id_is_a_primary_key_lookup(filled):
    with recorded(filled) as sent:
        filled.get(5)
    statement, params = _one(sent, "SELECT")
    text = plan(filled, statement, params)
    assert ("INTEGER PRIMARY KEY" in text or "jobs_pkey" in text), text


def test_metrics_counts_read_the_kept_counts_not_the_jobs(filled):
    """/metrics counts every job exactly, from the trigger-kept counts: no jobs table at all."""
    counts = filled.gauges([]).counts  # the statement /metrics sends (store.gauges)
    assert sum(n for _, n in counts) == ROWS
    _only_the_counts(_gauge_plans(filled)["counts"])


def _only_the_counts(counts_plan: str) -> None:
    assert "job_counts" in counts_plan, counts_plan
    assert not re.search(r"\bjobs\b|ix_jobs", counts_plan), counts_plan


def _gauge_plans(store: Store) -> dict[str, str]:
    """The plans of the statements /metrics sends for its gauges, by what they read."""
    with recorded(store) as sent:
        store.gauges(["email", "pdf"])
    plans: dict[str, str] = {}
    for statement, params in sent:
        if "paused_types" in statement:
            continue
        key = ("oldest" if "run_at <=" in statement else
               "expired" if "lease_expires_at <" in statement else "counts")
        plans[key] = plans.get(key, "") + plan(store, statement, params) + "\n"
    return plans


def test_metrics_gauges_each_walk_their_index(filled):
    """Counts: the kept counts; oldest due: the pending (type, run_at) index;
    expired leases: the lease index (only running jobs, by lease end)."""
    plans = _gauge_plans(filled)
    assert set(plans) == {"counts", "oldest", "expired"}
    _only_the_counts(plans["counts"])
    assert_indexed(filled, plans["oldest"], "ix_jobs_pending_type_run")
    assert "ix_jobs_lease" in plans["expired"], plans["expired"]
    if filled.engine.dialect.name == "sqlite":  # the GROUP BY sorts the few expired rows
        assert all("USING" in line for line in plans["expired"].splitlines()
                   if line.startswith("SCAN")), plans["expired"]
    else:
        assert "Seq Scan" not in plans["expired"], plans["expired"]


def test_metrics_gauge_values_on_the_filled_table(filled):
    gauges = filled.gauges(["email", "pdf"])
    assert sum(n for _, n in gauges.counts) == ROWS
    # Every pending (rare) job is a due pdf job; the oldest has waited longest.
    assert set(gauges.oldest_due) == {"pdf"}
    assert gauges.oldest_due["pdf"] == filled.clock() - (ROWS - 50)
    assert gauges.expired == {} and gauges.paused == set()


def test_the_sign_in_throttle_walks_its_indexes(store, clock):
    """The throttle's read walks the (username, address, at) index in order; the sweep of
    expired rows the ``at`` index: neither grows with the table."""
    for n in range(200):
        store.sign_ins.record(f"user{n % 20}", "10.0.0.1", clock() + n, 0)
    with recorded(store) as sent:
        store.sign_ins.latest("user1", "10.0.0.1", 10, clock() - 60_000_000)
        store.sign_ins.record("user1", "10.0.0.1", clock(), clock() - 60_000_000)
    statement, params = _one(sent, "SELECT")
    assert_indexed(store, plan(store, statement, params), "ix_signin_failures_pair_at")
    statement, params = _one(sent, "DELETE")
    assert "ix_signin_failures_at" in plan(store, statement, params)


def _analyzed(store: Store) -> None:
    """Gather statistics, as ANALYZE (SQLite: the bench; PostgreSQL: autovacuum) would."""
    with store.engine.begin() as conn:  # both run ANALYZE inside a transaction
        conn.exec_driver_sql("ANALYZE")


def test_the_workers_last_claims_seek_each_worker_name(filled):
    """GET /workers finds each name's newest claim by seeks in (worker_id, started_at),
    never a range of attempts: a day of attempts grows with the throughput."""
    with filled.engine.begin() as conn:
        conn.execute(job_attempts.insert(), [
            {"job_id": i + 1, "attempt": 1, "worker_id": f"w{i % 4}",
             "started_at": filled.clock() - i * 1000, "outcome": "running"} for i in range(ROWS)])
    _analyzed(filled)
    with recorded(filled) as sent:
        names = [w.name for w in filled.workers()]
    assert names == ["w0", "w1", "w2", "w3"]
    statement, params = _one(sent, "WITH RECURSIVE")
    text = plan(filled, statement, params)
    assert "ix_attempts_worker_started" in text, text
    if filled.engine.dialect.name == "sqlite":
        reads = [line for line in text.splitlines() if "job_attempts" in line]
        # The first name (MIN), the next name, the newest start: the last two keyed on the
        # name alone (no range of attempts, no skip-scan of a time range).
        assert len(reads) == 3 and all(re.search(r"^SEARCH .*\(worker_id[=>]\?\)$", line)
                             for line in reads[1:]), text
    else:  # each read of the attempts is keyed on the worker name, none filters a range
        lines = text.splitlines()
        reads = [i for i, line in enumerate(lines) if " on job_attempts" in line]
        assert reads and all("Index Cond" in lines[i + 1] and "worker_id" in lines[i + 1]
                             for i in reads), text


def test_a_search_by_key_seeks_the_unique_index_under_each_producer(store):
    """One producer, no keys (the benchmark's jobs): statistics that count every keyless job
    as one (producer, key) value made SQLite build a temporary index of all jobs rather
    than seek the unique index; the join order is pinned."""
    now = store.clock()
    with store.engine.begin() as conn:
        conn.execute(jobs.insert(), [
            {"type": "email", "payload": "{}", "priority": 0, "status": "completed",
             "attempt": 1, "retry_count": 0, "max_retries": 3, "producer": "billing",
             "run_at": now, "created_at": now, "updated_at": now} for _ in range(200)])
    _analyzed(store)
    with recorded(store) as sent:
        assert store.reads._holding_key("no-such-key") == []
    statement, params = _one(sent, "WITH RECURSIVE")
    text = plan(store, statement, params)
    if store.engine.dialect.name == "sqlite":
        assert "AUTOMATIC" not in text and "sqlite_autoindex_jobs" in text, text
    else:
        assert "uq_jobs_producer_idempotency" in text, text
