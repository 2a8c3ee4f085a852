"""An attempt's times tell the order a reader could see: none starts before what it waited for."""
from __future__ import annotations

import threading
from typing import Any

import pytest

from helpers import add_job


@pytest.fixture
def config() -> dict[str, Any]:
    return {"JOB_TYPES": {"email": {"concurrency": 1}}}


def test_a_claim_never_starts_before_the_attempt_whose_slot_it_took_finished(
        backend, store, clock):
    """Concurrency 1: the second claim reads the clock, then (before its reads) the first
    job completes, later by the clock; the claim takes the slot that completion freed.
    Its attempt must not show as started before the first one finished: that is an
    overlap the limit never allowed."""
    if backend == "sqlite":
        pytest.skip("SQLite's claim reads the clock in the write lock: no commit comes between")
    first, second = add_job(store), add_job(store)
    held = store.claim("w1")
    assert held is not None and held.id == first.id
    assert store.claim("w2") is None  # the slot is taken; the type is now known limited
    reached, go = threading.Event(), threading.Event()
    claimer: list[threading.Thread] = []

    def gated() -> int:
        """The claimer's first clock read waits there while the first job completes."""
        now = clock.now
        if threading.current_thread() is claimer[0] and not reached.is_set():
            reached.set()
            go.wait(10)
        return now

    store.clock = gated
    got: list[Any] = []
    claimer.append(threading.Thread(target=lambda: got.append(store.claim("w2"))))
    claimer[0].start()
    assert reached.wait(10)
    clock.advance(1)
    store.complete(first.id, "w1", held.attempt)
    go.set()
    claimer[0].join(10)
    assert got and got[0] is not None and got[0].id == second.id
    finished = store.get(first.id).attempts[-1].finished_at
    started = store.get(second.id).attempts[-1].started_at
    assert started >= finished
