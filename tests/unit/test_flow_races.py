"""Workflows under real concurrency: parents finishing at once, in transactions of their own
(two stores, two pools), release their child exactly once, and no child is claimed before
its last parent committed. On SQLite the write lock serializes them; PostgreSQL is where
the transactions truly interleave."""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterator

import pytest
from sqlalchemy import text

from queuelog.model.jobs import Status
from queuelog.server.store import NewJob, Store

PAIRS = 20


def _new(**fields: Any) -> NewJob:
    return NewJob("p", "email", "{}", 0, 0, **fields)


def _at_once(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run ``calls`` in threads released together; what each returned (or raised)."""
    start = threading.Barrier(len(calls))
    got: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        start.wait()
        try:
            got[i] = calls[i]()
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            got[i] = exc
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return got


@pytest.fixture
def other(store: Store, db_url: str) -> Iterator[Store]:
    """A second store (its own pool: transactions of their own) on the same database."""
    second = Store(db_url)
    second.clock = store.clock  # the same (fake) time on both
    yield second
    second.close()


def test_two_parents_finishing_at_once_release_their_child_once(store: Store,
                                                               other: Store) -> None:
    for _ in range(PAIRS):
        a, _ = store.enqueue(_new())
        b, _ = store.enqueue(_new())
        child, _ = store.enqueue(_new(depends_on=(a.id, b.id)))
        held = store.claim_many("w", 2)
        assert {j.id for j in held} == {a.id, b.id}
        done = _at_once([lambda j=held[0]: store.complete(j.id, "w", j.attempt, None),
                         lambda j=held[1]: other.complete(j.id, "w", j.attempt, None)])
        assert all(d.status is Status.COMPLETED for d in done), done
        got = store.get(child.id)
        assert got.status is Status.PENDING, got
        with store.engine.connect() as conn:  # counted twice would be -1
            waiting = conn.execute(text("SELECT waiting_for FROM jobs WHERE id = :i"),
                                   {"i": child.id}).scalar_one()
        assert waiting == 0
        assert store.claim("w").id == child.id


def test_a_child_is_never_claimed_before_its_last_parent_committed(store: Store,
                                                                  other: Store) -> None:
    for _ in range(PAIRS):
        parent, _ = store.enqueue(_new())
        child, _ = store.enqueue(_new(depends_on=(parent.id,)))
        held = store.claim("w")
        assert held.id == parent.id
        got = _at_once([lambda: store.complete(parent.id, "w", held.attempt, None),
                        lambda: other.claim("w2")])
        claimed = got[1]
        if claimed is not None:  # it saw the child only once the parent had committed
            assert claimed.id == child.id
            assert store.get(parent.id).finished_at <= claimed.claimed_at
        else:
            assert store.claim("w2").id == child.id
        store.complete(child.id, "w2", 1, None)


def test_a_parent_finishing_while_its_child_is_enqueued_never_strands_the_child(
        store: Store, other: Store) -> None:
    """The link and the finish lock the parent's row: whichever commits first, the other
    sees it, and the child ends up pending, never blocked for good."""
    for _ in range(PAIRS):
        parent, _ = store.enqueue(_new())
        held = store.claim("w")
        got = _at_once([lambda: store.complete(parent.id, "w", held.attempt, None),
                        lambda: other.enqueue(_new(depends_on=(parent.id,)))[0]])
        child = got[1]
        assert store.get(child.id).status is Status.PENDING, child
        store.complete(store.claim("w").id, "w", 1, None)
