"""The trigger-kept counts (migration 0008) stay exact through every transition, both backends."""
from __future__ import annotations

from sqlalchemy import func, select, text

from queuelog.model.jobs import Status
from queuelog.server.store import NewJob, Store
from queuelog.server.store import counts
from queuelog.server.store.tables import job_count_deltas, jobs

US = 1_000_000


def truth(store: Store) -> dict[tuple[str, str], int]:
    """Jobs per (status, type), counted the slow way."""
    with store.engine.connect() as conn:
        return {(s, t): int(n) for s, t, n in conn.execute(
            select(jobs.c.status, jobs.c.type, func.count()).group_by(jobs.c.status, jobs.c.type))}


def new(type: str = "email", max_retries: int = 3) -> NewJob:
    """A job to enqueue."""
    return NewJob(producer="billing", type=type, payload_json="{}", priority=0,
                  max_retries=max_retries, run_at=None, delay_seconds=None)


def check(store: Store, expected: dict[tuple[str, str], int]) -> None:
    """The kept counts equal the slow count, and what the test expects."""
    assert store.job_counts() == truth(store) == expected


def test_counts_stay_exact_through_every_transition(store, clock):
    a, _ = store.enqueue(new("email", max_retries=1))
    check(store, {("pending", "email"): 1})
    batch, _ = store.enqueue_many([new("pdf"), new("pdf"), new("email")])
    check(store, {("pending", "email"): 2, ("pending", "pdf"): 2})
    first = store.claim("w1", types=["email"], lease_seconds=1)
    check(store, {("pending", "email"): 1, ("running", "email"): 1, ("pending", "pdf"): 2})
    store.complete(first.id, "w1", first.attempt)
    check(store, {("pending", "email"): 1, ("completed", "email"): 1, ("pending", "pdf"): 2})
    second = store.claim("w1", types=["email"], lease_seconds=1)
    store.fail(second.id, "w1", second.attempt, "boom", retry=True)  # back to pending
    check(store, {("pending", "email"): 1, ("completed", "email"): 1, ("pending", "pdf"): 2})
    clock.advance(3600)
    third = store.claim("w1", types=["email"], lease_seconds=1)
    store.fail(third.id, "w1", third.attempt, "boom", retry=False)
    check(store, {("failed", "email"): 1, ("completed", "email"): 1, ("pending", "pdf"): 2})
    taken = store.claim("w2", types=["pdf"], lease_seconds=1)
    clock.advance(2)
    store.claim("w2", types=["pdf"], lease_seconds=60)  # takes the expired lease back first
    check(store, {("failed", "email"): 1, ("completed", "email"): 1, ("pending", "pdf"): 1,
                  ("running", "pdf"): 1})
    assert taken is not None
    store.retry(third.id)
    check(store, {("pending", "email"): 1, ("completed", "email"): 1, ("pending", "pdf"): 1,
                  ("running", "pdf"): 1})
    store.cancel(third.id)
    check(store, {("cancelled", "email"): 1, ("completed", "email"): 1, ("pending", "pdf"): 1,
                  ("running", "pdf"): 1})
    assert store.bulk_retry(None, statuses=[Status.CANCELLED]) == 1
    assert store.bulk_cancel(None) == 2  # both pending jobs
    check(store, {("cancelled", "email"): 1, ("completed", "email"): 1, ("cancelled", "pdf"): 1,
                  ("running", "pdf"): 1})
    clock.advance(86_400)
    assert store.purge(3600 * US, [Status.COMPLETED, Status.CANCELLED]) == 3
    check(store, {("running", "pdf"): 1})
    assert a.id and batch


def test_a_heartbeat_or_a_result_leaves_the_counts_as_they_are(store):
    store.enqueue(new())
    job = store.claim("w1", lease_seconds=30)
    with store.engine.connect() as conn:
        before = conn.execute(select(func.count()).select_from(job_count_deltas)).scalar_one()
    store.heartbeat(job.id, "w1", job.attempt, lease_seconds=60)
    with store.engine.connect() as conn:  # no status changed: no delta row either
        after = conn.execute(select(func.count()).select_from(job_count_deltas)).scalar_one()
    assert after == before
    check(store, {("running", "email"): 1})


def test_a_batch_of_500_is_one_delta_and_folding_keeps_the_counts(store):
    store.enqueue_many([new() for _ in range(500)])
    with store.engine.connect() as conn:
        deltas = conn.execute(select(func.count()).select_from(job_count_deltas)).scalar_one()
    # PostgreSQL: one statement, one delta row; SQLite keeps the totals directly.
    assert deltas == (1 if store.engine.dialect.name == "postgresql" else 0)
    if deltas:  # as many deltas as make a read fold them (each adds nothing)
        with store.engine.begin() as conn:
            conn.execute(job_count_deltas.insert(), [
                {"status": "pending", "type": "email", "n": 0} for _ in range(counts.FOLD_AT)])
    store.enqueue(new("pdf"))
    check(store, {("pending", "email"): 500, ("pending", "pdf"): 1})  # this read folds
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(job_count_deltas)).scalar_one() == 0
    check(store, {("pending", "email"): 500, ("pending", "pdf"): 1})


def test_the_migration_fills_the_counts_from_existing_jobs(store):
    store.enqueue_many([new(), new("pdf")])
    with store.engine.begin() as conn:  # as if the jobs were there before 0008
        conn.execute(text("DELETE FROM job_counts"))
        conn.execute(text("DELETE FROM job_count_deltas"))
    assert store.job_counts() == {}
    from alembic import command
    from queuelog.server.store.migrate import alembic_config
    with store.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0005")
        command.upgrade(alembic_config(conn), "head")
    check(store, {("pending", "email"): 1, ("pending", "pdf"): 1})
