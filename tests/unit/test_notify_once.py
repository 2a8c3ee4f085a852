"""The wake-up a transaction sends: once per transaction however many jobs it makes
claimable, only at commit, and none for a change that makes nothing claimable."""
from __future__ import annotations

import os
import socket
from typing import Any, Callable, Iterator

import pytest

from queuelog.server.store import NewJob, Store
from queuelog.server.store.listen import CHANNEL


def _job(n: int = 0) -> NewJob:
    return NewJob("billing", "email", "{}", 0, 3, idempotency_key=None)


@pytest.fixture
def heard(db_url: str, tmp_path: Any) -> Iterator[tuple[Store, Callable[[], int]]]:
    """A store, and a function counting the wake-ups another process would have got."""
    store = Store(db_url)
    if store.backend.name == "postgresql":
        import psycopg
        conn = psycopg.connect(store.engine.url.set(drivername="postgresql")
                               .render_as_string(hide_password=False), autocommit=True)
        conn.execute(f"LISTEN {CHANNEL}")

        def count() -> int:
            return sum(1 for _ in conn.notifies(timeout=0.5))
        yield store, count
        conn.close()
    else:
        folder = os.path.abspath(store.engine.url.database) + "-wake"
        os.makedirs(folder, mode=0o700, exist_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(os.path.join(folder, "1-peer"))  # "another process": not this pid
        sock.settimeout(0.5)

        def count() -> int:
            n = 0
            try:
                while True:
                    sock.recv(16)
                    n += 1
            except (TimeoutError, socket.timeout):
                return n
        yield store, count
        sock.close()
    store.close()


def test_a_batch_of_500_is_one_wake_up(heard: tuple[Store, Callable[[], int]]) -> None:
    store, count = heard
    store.enqueue_many([_job(i) for i in range(500)])
    assert count() == 1


def test_each_claimable_change_wakes_and_a_claim_does_not(
        heard: tuple[Store, Callable[[], int]]) -> None:
    store, count = heard
    job, _ = store.enqueue(_job())
    assert count() == 1
    claimed = store.claim("w")
    assert claimed is not None and count() == 0  # nothing became claimable
    store.fail(claimed.id, "w", claimed.attempt, "boom", retry_in=0)
    assert count() == 1  # back to pending


def test_a_rolled_back_transaction_wakes_no_one(heard: tuple[Store, Callable[[], int]]) -> None:
    store, count = heard
    with pytest.raises(RuntimeError):
        with store.ctx.write.begin() as conn:
            store.notifier.notify(conn)
            raise RuntimeError("rolled back")
    assert count() == 0


@pytest.mark.parametrize("end", ["complete", "fail", "cancel"])
def test_a_slot_freed_under_a_limit_set_at_run_time_wakes_other_processes(
        heard: tuple[Store, Callable[[], int]], db_url: str, end: str) -> None:
    """A concurrency set by another app server (``PUT /types/email/limits``) while this
    process never claimed since: the slot its complete, fail or cancel frees still wakes the
    claims waiting elsewhere, not their next periodic look."""
    store, count = heard
    other = Store(db_url)  # the other app server: it sets the limit and claims
    try:
        store.enqueue_many([_job(), _job()])
        other.limits.set_limits("email", {"concurrency": 1}, "root")
        held = other.claim("w")
        assert held is not None
        count()  # the enqueue's and the limit's wake-ups
        if end == "complete":
            store.complete(held.id, "w", held.attempt)
        elif end == "fail":
            store.fail(held.id, "w", held.attempt, "boom", retry=False)
        else:
            store.cancel(held.id)
        assert count() == 1  # the second email job is claimable now
    finally:
        other.close()
