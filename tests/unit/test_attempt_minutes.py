"""The per-minute rollup of ended attempts (migration 0015): exact through every way an
attempt ends, read as the pages' last hour, its old minutes pruned; both backends."""
from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from helpers import add, minute_rows
from queuelog.model.problems import QueuelogError
from queuelog.server.store import Store, minutes
from queuelog.server.store.tables import job_attempts, jobs

Tally = dict[tuple[str, str], tuple[int, int]]  # (type, worker) -> (completed, failed)
ENDED = ("completed", "failed", "lease_expired")


def truth(store: Store) -> Tally:
    """The hour's ended attempts per (type, worker), counted the slow way."""
    start, end = minutes.window(store.clock())
    a = job_attempts.c
    out: dict[tuple[str, str], list[int]] = {}
    with store.engine.connect() as conn:
        for job_type, worker, outcome, n in conn.execute(
                select(jobs.c.type, a.worker_id, a.outcome, func.count())
                .join(jobs, jobs.c.id == a.job_id)
                .where(a.finished_at >= start, a.finished_at < end, a.outcome.in_(ENDED))
                .group_by(jobs.c.type, a.worker_id, a.outcome)):
            out.setdefault((job_type, worker), [0, 0])[outcome != "completed"] += int(n)
    return {k: (c, f) for k, (c, f) in out.items()}


def kept(store: Store) -> Tally:
    """The hour's rows of the rollup per (type, worker)."""
    start, end = minutes.window(store.clock())
    out: Tally = {}
    for (at, job_type, worker), (c, f) in minute_rows(store).items():
        if start <= at < end:
            had = out.get((job_type, worker), (0, 0))
            out[job_type, worker] = (had[0] + c, had[1] + f)
    return out


def check(store: Store, expected: Tally) -> None:
    """The rollup equals the slow count and what the test expects, and the pages say so."""
    assert kept(store) == truth(store) == expected
    by_type: dict[str, tuple[int, int]] = {}
    by_worker: dict[str, tuple[int, int]] = {}
    for (job_type, worker), (c, f) in expected.items():
        t, w = by_type.get(job_type, (0, 0)), by_worker.get(worker, (0, 0))
        by_type[job_type], by_worker[worker] = (t[0] + c, t[1] + f), (w[0] + c, w[1] + f)
    types = {s.name: (s.completed_last_hour, s.failed_last_hour)
             for s in store.type_summaries(["email", "pdf"], 100)}
    assert types == {t: by_type.get(t, (0, 0)) for t in ("email", "pdf")}
    workers = {w.name: (w.completed_last_hour, w.failed_last_hour) for w in store.workers()}
    assert {w: n for w, n in workers.items() if n != (0, 0)} == by_worker
    series = store.outcomes_per_minute()
    assert (sum(series.completed), sum(series.failed)) == (
        sum(c for c, _ in expected.values()), sum(f for _, f in expected.values()))


def held(store: Store, worker: str, job_type: str, n: int = 1, lease: float = 60) -> list[Any]:
    """Claim ``n`` jobs of ``job_type`` as ``worker``."""
    got = store.claim_many(worker, n, types=[job_type], lease_seconds=lease)
    assert len(got) == n
    return got


def test_every_way_an_attempt_ends_is_counted_once(store: Store, clock: Any) -> None:
    for _ in range(6):
        add(store, "email", max_retries=1)
    for _ in range(4):
        add(store, "pdf", max_retries=0)
    one = held(store, "w1", "email")[0]
    store.complete(one.id, "w1", one.attempt)
    check(store, {("email", "w1"): (1, 0)})
    batch = held(store, "w1", "email", 3)
    stale = (batch[2].id, batch[2].attempt + 1, None)  # refused: changes and counts nothing
    done = store.complete_many("w1", [(j.id, j.attempt, None) for j in batch[:2]] + [stale])
    assert [getattr(d, "status", None) for d in done[:2]] == ["completed"] * 2
    check(store, {("email", "w1"): (3, 0)})
    store.fail(batch[2].id, "w1", batch[2].attempt, "boom", retry=True)  # pending again
    check(store, {("email", "w1"): (3, 1)})
    pdfs = held(store, "w2", "pdf", 2)
    store.fail_many("w2", [(j.id, j.attempt, "x", True, None) for j in pdfs])  # no retries
    check(store, {("email", "w1"): (3, 1), ("pdf", "w2"): (0, 2)})
    lapsed = held(store, "w2", "pdf", lease=1)[0]
    running = held(store, "w1", "email", 2)
    store.cancel(running[0].id)  # a cancelled run: neither completed nor failed
    clock.advance(2)
    held(store, "w3", "pdf")  # this claim takes back w2's lapsed lease first
    check(store, {("email", "w1"): (3, 1), ("pdf", "w2"): (0, 3)})
    again = store.claim("w3", types=["email"])  # the retried job, its second attempt
    assert again is not None and again.id == batch[2].id and again.attempt == 2
    store.complete(again.id, "w3", again.attempt)
    with pytest.raises(QueuelogError):  # w2's answer after the take-back: refused, uncounted
        store.complete(lapsed.id, "w2", lapsed.attempt)
    check(store, {("email", "w1"): (3, 1), ("email", "w3"): (1, 0), ("pdf", "w2"): (0, 3)})


def test_the_hour_is_the_charts_sixty_minutes(store: Store, clock: Any) -> None:
    job = add(store, "email")
    got = store.claim("w1", types=["email"])
    assert got is not None and got.id == job
    store.complete(job, "w1", got.attempt)
    first, _ = minutes.window(clock())
    ended = first + 59 * minutes.MINUTE_US  # the minute it ended: the chart's newest
    clock.now = ended + 58 * minutes.MINUTE_US  # 58 minutes on: its minute is still read
    check(store, {("email", "w1"): (1, 0)})
    assert store.outcomes_per_minute().completed[1] == 1
    clock.now = ended + 59 * minutes.MINUTE_US + minutes.MINUTE_US - 1  # the oldest bar
    check(store, {("email", "w1"): (1, 0)})
    assert store.outcomes_per_minute().completed[0] == 1
    clock.now = ended + 60 * minutes.MINUTE_US  # the next minute: the hour has left it
    check(store, {})


def test_minutes_older_than_two_hours_are_pruned(store: Store, clock: Any) -> None:
    for _ in range(2):
        add(store, "email")
    old = store.claim("w1", types=["email"])
    assert old is not None
    store.complete(old.id, "w1", old.attempt)
    clock.advance(90 * 60)
    new = store.claim("w1", types=["email"])
    assert new is not None
    store.complete(new.id, "w1", new.attempt)
    assert store.prune_minutes() == 0  # 90 minutes: kept (two hours)
    clock.advance(31 * 60)
    assert store.prune_minutes() == 1  # the first minute, two hours and a minute old
    clock.advance(90 * 60)
    assert store.purge(3600 * 1_000_000) == 2  # a purge prunes too, in its last batch
    assert minute_rows(store) == {}


def test_ends_from_two_connections_in_one_minute_add_up(store: Store, db_url: str,
                                                       clock: Any) -> None:
    """PostgreSQL spreads writers over shards (the backend's pid): readers add them up."""
    other = Store(db_url)
    other.clock = clock
    try:
        for _ in range(2):
            add(store, "email")
        first, second = held(store, "w1", "email", 2)
        store.complete(first.id, "w1", first.attempt)
        other.complete(second.id, "w1", second.attempt)
        check(store, {("email", "w1"): (2, 0)})
    finally:
        other.close()


def test_an_attempt_counts_once_however_often_its_row_is_updated(store: Store,
                                                                  clock: Any) -> None:
    """An attempt counts when it ends: a later UPDATE of its ended row (an operator's SQL,
    a future statement), alone or beside an attempt that ends in the same statement,
    counts nothing again (PostgreSQL's trigger keeps the rows ended before the statement
    out; SQLite's compares OLD and NEW)."""
    for _ in range(2):
        add(store, "email")
    first, second = held(store, "w1", "email", 2)
    store.complete(first.id, "w1", first.attempt)
    a = job_attempts.c
    with store.engine.begin() as conn:
        conn.execute(job_attempts.update().where(a.job_id == first.id)
                     .values(finished_at=a.finished_at + 1, error="noted"))
    assert kept(store) == truth(store) == {("email", "w1"): (1, 0)}
    with store.engine.begin() as conn:  # the ended row and an open one, in one statement
        conn.execute(job_attempts.update().where(a.job_id.in_([first.id, second.id]))
                     .values(finished_at=clock(), outcome="completed"))
    assert kept(store) == truth(store) == {("email", "w1"): (2, 0)}


def test_the_timings_sample_is_the_whole_hour_or_each_blocks_share() -> None:
    """``timings.sample``: one range when the hour is small, else a range per block of
    minutes with attempts (from the window's start), its share of the sample rounded up."""
    from queuelog.server.store.timings import BLOCK_MINUTES, sample
    m, b = minutes.MINUTE_US, BLOCK_MINUTES * minutes.MINUTE_US
    assert sample({0: 3, m: 2}, 0, 60 * m, size=5) == [(0, 60 * m, 5)]
    assert sample({0: 2, m: 4, b: 0, 2 * b + m: 4}, 0, 60 * m, size=5) == [
        (0, b, 3), (2 * b, 3 * b, 2)]
    assert sample({0: 1, 59 * m: 999}, 0, 60 * m, size=10) == [(0, b, 1), (11 * b, 60 * m, 10)]
