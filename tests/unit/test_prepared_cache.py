"""Statements compiled once per process (store/prepared.py): shared only where alike."""
from __future__ import annotations

from typing import Any

from queuelog.server.store import NewJob, Store


def _lease_given(url: str, clock: Any, **options: Any) -> int:
    """The lease (in microseconds) a claim of ``url``'s one new job gets from a new
    store made with ``options``."""
    store = Store(url, **options)
    store.clock = clock
    try:
        store.enqueue_many([NewJob(producer="p", type="email", payload_json="{}",
                                   priority=0, max_retries=0)])
        job = store.claim("w1")
        assert job is not None
        return job.lease_expires_at - clock()  # type: ignore[no-any-return]
    finally:
        store.close()


def test_stores_of_one_process_keep_their_own_leases(db_url: str, clock: Any) -> None:
    """A store's lease is a value bound into its claim: a second store of the same
    statements but another lease must not run the first one's compiled values."""
    assert _lease_given(db_url, clock, lease_seconds=300) == 300_000_000
    assert _lease_given(db_url, clock, lease_seconds=60) == 60_000_000
    assert _lease_given(db_url, clock, lease_seconds=60,
                        type_leases={"email": 7}) == 7_000_000
    assert _lease_given(db_url, clock, lease_seconds=300) == 300_000_000
