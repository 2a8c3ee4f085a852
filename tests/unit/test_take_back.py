"""Leases taken back in bulk (store/finish.py ``take_back``), on both backends.

When many leases run out at once (a worker host lost), each claim takes back up to
``EXPIRE_BATCH`` of them inside its own transaction. That batch is one statement on
PostgreSQL (two on SQLite: the jobs, then their attempts) whatever its size, so a claim
after a mass expiry costs what a claim after one expiry costs.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import event

from helpers import add_job
from queuelog.model.jobs import Outcome, Status
from queuelog.server.store import NewJob, Store
from queuelog.server.store.statements import EXPIRE_BATCH


def _held(store: Store, n: int, max_retries: int = 3) -> list[int]:
    """``n`` new jobs of type ``email``, claimed by ``w1`` with a 10 s lease."""
    jobs, _ = store.enqueue_many([NewJob("billing", "email", "{}", 0, max_retries)
                                  for _ in range(n)])
    got = store.claim_many("w1", n, lease_seconds=10, types=["email"])
    assert len(got) == n
    return [j.id for j in jobs]


def _statements_of_a_claim(store: Store) -> tuple[int, list[Any]]:
    """The number of statements one claim (of type ``other``) sends, and its jobs."""
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        got = store.claim_many("w2", 1, types=["other"])
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    return len(sent), list(got)


def test_a_claim_takes_back_a_full_batch_in_as_many_statements_as_two(store: Store,
                                                                      clock: Any) -> None:
    add_job(store, "other")
    add_job(store, "other")
    _held(store, 2)
    clock.advance(11)
    few, got = _statements_of_a_claim(store)
    assert len(got) == 1
    _held(store, EXPIRE_BATCH + 20)
    clock.advance(11)
    many, got = _statements_of_a_claim(store)
    assert len(got) == 1
    assert many == few, (few, many)  # not one or three statements a lease
    still_held = store.list_jobs(status=Status.RUNNING, limit=200).jobs
    assert len(still_held) == 20 + 2  # the batch's rest, and the two claims' own jobs


def test_taken_back_leases_retry_or_fail_by_their_own_budgets(store: Store,
                                                              clock: Any) -> None:
    spent = _held(store, 3, max_retries=0)
    budget = _held(store, 3, max_retries=2)
    clock.advance(11)
    assert list(store.claim_many("w2", 1, types=["other"])) == []
    for job_id in spent:
        job = store.get(job_id)
        assert job.status is Status.FAILED and job.finished_at is not None
        assert job.error == "lease expired" and job.retry_count == 0
        assert job.attempts[-1].outcome is Outcome.LEASE_EXPIRED
    for job_id in budget:
        job = store.get(job_id)
        assert job.status is Status.PENDING and job.finished_at is None
        assert job.retry_count == 1 and job.run_at > clock.now  # after its backoff
        assert job.worker_id is not None  # the last holder stays on record
        attempt = job.attempts[-1]
        assert attempt.outcome is Outcome.LEASE_EXPIRED and attempt.error == "lease expired"
        assert attempt.finished_at == clock.now
    # The old holder is fenced off: its answer is refused and changes nothing.
    refused = store.fail_many("w1", [(budget[0], 1, "late", True, None)])
    assert refused[0].status == 409
    assert store.get(budget[0]).retry_count == 1
