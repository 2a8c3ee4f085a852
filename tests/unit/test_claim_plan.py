"""The claim's plan on PostgreSQL when the statistics predate a burst of jobs.

A queue's table changes faster than autovacuum analyzes it. The claim must find the rows it
picked by their primary key whatever the statistics say: a pending-only index filtered by id
walks every pending job, once per claim (bench/bench_claim_plan.py measures both).
"""
from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from queuelog.server.store import NewJob, Store

JOBS = 2000


def _burst_after_idle(store: Store) -> None:
    """Jobs all finished and analyzed (no pending in the statistics), then as many new."""
    batch = [NewJob(producer="p", type="email", payload_json="{}", priority=0,
                    max_retries=0)] * 100
    for _ in range(JOBS // 100):
        store.enqueue_many(batch)
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET status = 'completed', finished_at = 1"))
        conn.execute(text("ANALYZE jobs"))
    for _ in range(JOBS // 100):
        store.enqueue_many(batch)


def _indexes(node: dict[str, Any], alias: str) -> list[str]:
    """How ``node``'s plan reads the table it names ``alias``: each scan's index (a bitmap
    scan's, from its child), or its node type where it reads no index."""
    found = []
    if node.get("Alias") == alias and "Scan" in node["Node Type"]:
        kids = node.get("Plans", [])
        found.append(node.get("Index Name") or (kids[0].get("Index Name") if kids else None)
                     or node["Node Type"])
    for child in node.get("Plans", []):
        found += _indexes(child, alias)
    return found


def test_a_claim_after_a_burst_finds_its_rows_by_primary_key(store: Store) -> None:
    if store.backend.name != "postgresql":
        pytest.skip("SQLite gathers no statistics here (nothing runs ANALYZE on it)")
    _burst_after_idle(store)
    sql, args = store.jobs._claims["any"].bound({"wkr": "w1", "now": store.clock(),
                                            "lease_us": None, "n": 100})
    with store.engine.connect() as conn:
        cursor = conn.connection.driver_connection.cursor()
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, args)
        plan = cursor.fetchone()[0][0]["Plan"]
        conn.rollback()
    # The UPDATE's own rows ("jobs"; the walk of candidates is "cand").
    assert _indexes(plan, "jobs") == ["jobs_pkey"], plan
    got = store.claim_many("w1", 100)
    assert len(got) == 100 and {j.status.value for j in got} == {"running"}
