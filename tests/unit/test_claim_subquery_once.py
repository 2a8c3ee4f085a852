"""PostgreSQL's claim picks its jobs once: the LIMITed, locking pick is an InitPlan.

As ``UPDATE ... WHERE id IN (pick)`` the planner may make the pick the inner side of a
join and run it again per outer row, its LIMIT and SKIP LOCKED with it: a later run sees
other rows (those it locked are skipped), so a lower priority can be claimed first.
"""
from __future__ import annotations

from typing import Any, Iterator

import pytest
from sqlalchemy import event

from queuelog.server.store import NewJob, Store


def _claims_sent(store: Store, claim: Any) -> list[tuple[str, Any]]:
    """The (SQL, parameters) of each claiming UPDATE the store sends while ``claim`` runs."""
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, *args: Any) -> None:
        if "UPDATE jobs SET" in statement and "SKIP LOCKED" in statement:
            sent.append((statement, params))

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        claim()
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    return sent


def _plan(store: Store, sql: str, params: Any) -> dict[str, Any]:
    with store.engine.connect() as conn:
        cursor = conn.connection.driver_connection.cursor()
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0][0]["Plan"]
        conn.rollback()
    return plan  # type: ignore[no-any-return]


def _locking_paths(node: dict[str, Any], above: tuple[str, ...] = ()
                   ) -> Iterator[tuple[str, ...]]:
    """For each row-locking node (the pick's FOR UPDATE) below ``node``: how it hangs from
    ``node``, as the parent relationships on the way (Outer, Inner, InitPlan, SubPlan...)."""
    for child in node.get("Plans", []):
        path = (*above, child.get("Parent Relationship", ""))
        if child["Node Type"] == "LockRows":
            yield path
        yield from _locking_paths(child, path)


def _updates_of_jobs(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if node["Node Type"] == "ModifyTable" and node.get("Relation Name") == "jobs":
        yield node
    for child in node.get("Plans", []):
        yield from _updates_of_jobs(child)


@pytest.mark.parametrize("types", [None, ["email"], ["email", "sms"]],
                         ids=["any-type", "one-type", "several-types"])
def test_the_claims_pick_runs_once_before_the_update(store: Store, types: Any) -> None:
    if store.backend.name != "postgresql":
        pytest.skip("SQLite's claim holds the write lock: no row locks, no SKIP LOCKED")
    store.enqueue_many([NewJob(producer="p", type=t, payload_json="{}", priority=p,
                               max_retries=0) for t in ("email", "sms") for p in (0, 5)])
    sent = _claims_sent(store, lambda: store.claim_many("w1", 2, types=types))
    assert sent, "no claiming UPDATE seen"
    for sql, params in sent:
        updates = list(_updates_of_jobs(_plan(store, sql, params)))
        paths = [p for u in updates for p in _locking_paths(u)]
        assert paths, updates
        # Evaluated once, ahead of the UPDATE's scan: every lock is taken inside an InitPlan.
        assert all("InitPlan" in p for p in paths), (paths, updates)
