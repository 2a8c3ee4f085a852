"""The backend contract: every Store verb, run the same way on every backend (huey's
StorageTests). A verb added to the Store without a case here fails the first test."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import pytest

from helpers import add, add_job
from queuelog.model.jobs import FINISHED, Outcome, Status
from queuelog.model.problems import (JobCancelled, JobNotFound, NotHolder, StaleAttempt,
                                     WrongState)
from queuelog.server.store import _VERBS, NewJob, Scope, Store

MINUTE = 60 * 1_000_000
CASES: dict[str, Callable[[Store, Any], None]] = {}


def case(*verbs: str) -> Callable[[Callable[[Store, Any], None]], Callable[[Store, Any], None]]:
    """Register ``fn`` as the contract case of ``verbs``."""
    def register(fn: Callable[[Store, Any], None]) -> Callable[[Store, Any], None]:
        for verb in verbs:
            CASES[verb] = fn
        return fn
    return register


def _new(type: str = "email", key: str | None = None) -> NewJob:
    return NewJob("billing", type, '{"n": 1}', 0, 2, idempotency_key=key,
                  request_hash="h" if key else None)


def _held(store: Store, n: int = 1, type: str = "email") -> list[Any]:
    for _ in range(n):
        add(store, type)
    got = store.claim_many("w1", n, types=[type])
    assert len(got) == n
    return list(got)


# -- the job verbs -------------------------------------------------------------------------
@case("enqueue", "get")
def _enqueue(store: Store, clock: Any) -> None:
    job, created = store.enqueue(_new(key="k1"))
    again, created_again = store.enqueue(_new(key="k1"))
    assert created and not created_again and again.id == job.id
    assert store.get(job.id).status is Status.PENDING


@case("enqueue_many")
def _enqueue_many(store: Store, clock: Any) -> None:
    jobs, replayed = store.enqueue_many([_new(), _new(key="a"), _new()])
    assert [j.id for j in jobs] == [1, 2, 3] and replayed == []
    again, replayed = store.enqueue_many([_new(key="a")])
    assert again[0].id == 2 and replayed == [0]


@case("claim", "claim_many")
def _claim(store: Store, clock: Any) -> None:
    low = add(store, priority=0)
    high = add(store, priority=5)
    add(store, "pdf")
    first = store.claim("w1", types=["email"])
    assert first is not None and first.id == high and first.attempt == 1
    rest = store.claim_many("w2", 5, types=["email", "pdf"])
    assert [j.id for j in rest] == [low, 3]
    assert store.claim("w3") is None
    assert [a.outcome.value for a in store.get(high).attempts] == ["running"]


@case("heartbeat")
def _heartbeat(store: Store, clock: Any) -> None:
    job = _held(store)[0]
    clock.advance(10)
    beat = store.heartbeat(job.id, "w1", job.attempt, lease_seconds=60)
    assert beat.lease_expires_at == clock.now + 60 * 1_000_000 and beat.progress is None
    with pytest.raises(NotHolder):
        store.heartbeat(job.id, "w2", job.attempt)
    # Progress is stored; a heartbeat without it keeps the last one.
    assert store.heartbeat(job.id, "w1", job.attempt,
                           progress_json='{"percent": 40}').progress == {"percent": 40}
    assert store.heartbeat(job.id, "w1", job.attempt).progress == {"percent": 40}


@case("complete")
def _complete(store: Store, clock: Any) -> None:
    job = _held(store)[0]
    with pytest.raises(StaleAttempt):
        store.complete(job.id, "w1", job.attempt + 1, '{"r": 1}')
    done = store.complete(job.id, "w1", job.attempt, '{"r": 1}')
    assert done.status is Status.COMPLETED and done.result == {"r": 1}
    assert [a.outcome.value for a in store.get(job.id).attempts] == ["completed"]
    with pytest.raises(WrongState):
        store.complete(job.id, "w1", job.attempt)


@case("complete_many")
def _complete_many(store: Store, clock: Any) -> None:
    a, b = _held(store, 2)
    got = store.complete_many("w1", [(a.id, a.attempt, None), (b.id, b.attempt + 1, None)])
    assert got[0].status is Status.COMPLETED and isinstance(got[1], StaleAttempt)
    assert [x.outcome.value for x in store.get(a.id).attempts] == ["completed"]
    assert [x.outcome.value for x in store.get(b.id).attempts] == ["running"]


@case("fail")
def _fail(store: Store, clock: Any) -> None:
    job = _held(store)[0]
    back = store.fail(job.id, "w1", job.attempt, "boom", retry_in=30)
    assert back.status is Status.PENDING and back.retry_count == 1
    assert back.run_at == clock.now + 30 * 1_000_000
    again = store.claim("w1", types=["email"])
    assert again is None  # not due yet
    clock.advance(31)
    again = store.claim("w1", types=["email"])
    assert again is not None
    dead = store.fail(again.id, "w1", again.attempt, "boom", retry=False)
    assert dead.status is Status.FAILED and dead.error == "boom"
    assert [x.outcome.value for x in store.get(job.id).attempts] == ["failed", "failed"]


@case("fail_many")
def _fail_many(store: Store, clock: Any) -> None:
    a, b = _held(store, 2)
    got = store.fail_many("w2", [(a.id, a.attempt, "x", False, None)])
    assert isinstance(got[0], NotHolder)
    got = store.fail_many("w1", [(a.id, a.attempt, "x", False, None),
                                 (b.id, b.attempt, "secret", True, 0)], clean=str.upper)
    assert got[0].status is Status.FAILED and got[1].status is Status.PENDING
    assert got[1].error == "SECRET"


@case("cancel")
def _cancel(store: Store, clock: Any) -> None:
    mine = add(store)
    theirs = add_job(store, producer="shop").id
    with pytest.raises(JobNotFound):  # another producer's job is not visible
        store.cancel(theirs, Scope(producer="billing"))
    assert store.cancel(mine, Scope(producer="billing")).status is Status.CANCELLED
    with pytest.raises(WrongState):
        store.cancel(mine)
    # A running job: cancelled at once, its attempt ended "cancelled", its holder fenced.
    held = _held(store)[0]
    assert store.cancel(held.id).status is Status.CANCELLED
    assert store.get(held.id).attempts[-1].outcome is Outcome.CANCELLED
    with pytest.raises(JobCancelled):
        store.complete(held.id, "w1", held.attempt, None)


@case("watch")
def _watch(store: Store, clock: Any) -> None:
    finished: list[int] = []
    store.hook(finished=lambda: finished.append(1))
    plain, watched = _held(store, 2)
    store.complete(plain.id, "w1", plain.attempt, None)
    assert finished == []  # nobody waits: the finish tells no one
    assert store.watch(watched.id)
    store.complete(watched.id, "w1", watched.attempt, None)
    assert finished == [1]  # told after the commit (and to every other process)
    assert not store.watch(watched.id)  # finished: nothing to wait for


@case("retry")
def _retry(store: Store, clock: Any) -> None:
    job = _held(store)[0]
    store.fail(job.id, "w1", job.attempt, "boom", retry=False)
    back = store.retry(job.id, actor="ada")
    assert back.status is Status.PENDING and back.retry_count == 0
    assert store.audit_events(action="job.retry")[0][0].target == str(job.id)


@case("run_now")
def _run_now(store: Store, clock: Any) -> None:
    later = add(store, delay=600)
    assert store.claim("w1") is None
    now = store.run_now(later, actor="ada")
    assert now.status is Status.PENDING and now.run_at == clock()
    assert store.audit_events(action="job.run")[0][0].target == str(later)
    assert store.run_now(later, actor="ada").run_at == now.run_at  # due already: unchanged
    assert len(store.audit_events(action="job.run")[0]) == 1
    assert store.claim("w1").id == later
    with pytest.raises(WrongState):
        store.run_now(later)  # running
    with pytest.raises(JobNotFound):
        store.run_now(999)


@case("timings")
def _timings(store: Store, clock: Any) -> None:
    for seconds in (1, 2, 3, 4, 100):  # p50 is the 3rd of 5, p95 the 5th
        job_id = add(store, "pdf", delay=seconds)
        clock.advance(2 * seconds)  # due for ``seconds`` before its claim
        job = store.claim("w1", types=["pdf"])
        assert job is not None and job.id == job_id
        clock.advance(seconds)
        store.complete(job.id, "w1", job.attempt)
    retried = _held(store, type="sync")[0]
    clock.advance(9)
    store.fail(retried.id, "w1", retried.attempt, "x", retry_in=60)  # a run, and no wait
    got = store.timings()
    assert got["pdf"].run == {50: 3_000_000, 95: 100_000_000}
    assert got["pdf"].wait == {50: 3_000_000, 95: 100_000_000}
    assert got["sync"].run == {50: 9_000_000, 95: 9_000_000} and got["sync"].wait == {}
    assert "email" not in got
    clock.advance(3601 + 200)
    assert store.timings() == {}  # the last hour only


def test_a_lease_run_out_is_taken_back_by_the_next_claim(store: Store, clock: Any) -> None:
    """The take-back is no verb of its own: the next claim does it, on every backend, as a
    failed attempt retried after its backoff."""
    job = _held(store)[0]
    clock.advance(400)
    assert store.claim("w2", types=["pdf"]) is None
    back = store.get(job.id)
    assert back.status is Status.PENDING and back.retry_count == 1
    assert [(a.outcome.value, a.error) for a in back.attempts] == [
        ("lease_expired", "lease expired")]


# -- reads and counts -----------------------------------------------------------------------
@case("list_jobs")
def _list_jobs(store: Store, clock: Any) -> None:
    for _ in range(3):
        add(store)
    page = store.list_jobs(limit=2)
    assert [j.id for j in page.jobs] == [3, 2] and page.older == 2


@case("statuses")
def _statuses(store: Store, clock: Any) -> None:
    held = _held(store, type="pdf")[0]
    child, _ = store.enqueue(dataclasses.replace(_new(), depends_on=(held.id,)))
    theirs = add_job(store, producer="shop").id
    assert store.statuses([child.id, held.id, theirs, 999, held.id]) == {
        held.id: ("pdf", Status.RUNNING), child.id: ("email", Status.BLOCKED),
        theirs: ("email", Status.PENDING)}  # 999: no such job, left out
    assert set(store.statuses([held.id, theirs], Scope(producer="billing"))) == {held.id}
    assert store.statuses([]) == {}


@case("ping")
def _ping(store: Store, clock: Any) -> None:
    store.ping()


@case("job_counts", "count_by_status", "fold_counts", "keeps_count_deltas")
def _counts(store: Store, clock: Any) -> None:
    add(store)
    _held(store, 1, "pdf")
    assert store.job_counts() == {("pending", "email"): 1, ("running", "pdf"): 1}
    assert store.count_by_status(10)["pending"] == 1
    assert store.fold_counts() is store.keeps_count_deltas  # a property
    assert store.job_counts() == {("pending", "email"): 1, ("running", "pdf"): 1}


@case("gauges")
def _gauges(store: Store, clock: Any) -> None:
    add(store)
    _held(store, 1, "pdf")
    clock.advance(400)
    got = store.gauges(["email", "pdf"])
    assert got.expired == {"pdf": 1} and "email" in got.oldest_due


@case("count_purgeable", "purge")
def _purge(store: Store, clock: Any) -> None:
    job = _held(store)[0]
    store.complete(job.id, "w1", job.attempt)
    add(store)
    clock.advance(120)
    assert store.count_purgeable(MINUTE, FINISHED) == 1
    assert store.purge(MINUTE, actor="ada") == 1
    assert [j.status for j in store.list_jobs().jobs] == [Status.PENDING]


@case("prune_minutes")
def _prune_minutes(store: Store, clock: Any) -> None:
    job = _held(store)[0]
    store.complete(job.id, "w1", job.attempt)  # its minute's row in the rollup
    assert store.prune_minutes() == 0
    clock.advance(2 * 3600 + 60)
    assert store.prune_minutes() == 1 and store.prune_minutes() == 0


@case("outcomes_per_minute")
def _outcomes(store: Store, clock: Any) -> None:
    a, b = _held(store, 2)
    store.complete(a.id, "w1", a.attempt)
    store.fail(b.id, "w1", b.attempt, "x", retry=False)
    series = store.outcomes_per_minute(5)
    assert sum(series.completed) == 1 and sum(series.failed) == 1


@case("workers")
def _workers(store: Store, clock: Any) -> None:
    _held(store)
    (w,) = store.workers()
    assert w.name == "w1" and len(w.running) == 1


@case("next_due_in")
def _next_due(store: Store, clock: Any) -> None:
    add(store, delay=30)
    assert store.next_due_in(["email"]) == pytest.approx(30)
    assert store.next_due_in(["pdf"]) is None


# -- types and limits -------------------------------------------------------------------------
@case("set_paused", "paused", "type_summaries")
def _paused(store: Store, clock: Any) -> None:
    add(store)
    store.set_paused("email", True, "ada")
    assert list(store.paused()) == ["email"] and store.claim("w1") is None
    (summary,) = store.type_summaries(["email"], 100)
    assert summary.paused and summary.counts["pending"] == 1
    store.set_paused("email", False, "ada")
    assert store.claim("w1") is not None


@case("set_limits", "reset_limits", "flow_states")
def _limits(store: Store, clock: Any) -> None:
    for _ in range(3):
        add(store)
    store.set_limits("email", {"concurrency": 1}, "ada")
    assert len(store.claim_many("w1", 3)) == 1
    assert store.flow_states(["email"])["email"].limited == "concurrency"
    store.reset_limits("email", "ada")
    assert len(store.claim_many("w1", 3)) == 2


# -- bulk ---------------------------------------------------------------------------------------
@case("count_matching", "bulk_cancel", "bulk_retry")
def _bulk(store: Store, clock: Any) -> None:
    for _ in range(5):
        add(store)
    assert store.count_matching(Status.PENDING) == 5
    assert store.bulk_cancel("ada", batch=2) == 5
    assert store.count_matching(Status.CANCELLED, cap=2) == 3  # capped: cap + 1
    assert store.bulk_retry("ada", ids=[1, 2]) == 2
    assert store.count_matching(Status.PENDING) == 2


# -- audit and schedules ---------------------------------------------------------------------
@case("audit_events", "purge_audit")
def _audit(store: Store, clock: Any) -> None:
    store.set_paused("email", True, "ada")
    events, _ = store.audit_events()
    assert [e.action for e in events] == ["type.pause"]
    clock.advance(120)
    assert store.purge_audit(MINUTE, "ada") == 1


@case("make_tick", "last_ticks", "run_schedule", "set_schedule_paused", "schedule_states")
def _schedules(store: Store, clock: Any) -> None:
    tick = clock.now
    job = store.make_tick("nightly", tick, _new())
    assert job is not None and store.make_tick("nightly", tick, _new()) is None
    assert store.last_ticks() == {"nightly": tick}
    store.set_schedule_paused("nightly", True, "ada")
    assert store.make_tick("nightly", tick + MINUTE, _new()) is None
    now = store.run_schedule("nightly", _new(), "ada")
    (state,) = store.schedule_states(["nightly"])
    assert state.paused and state.last_job == (now.id, Status.PENDING)


def test_every_store_verb_has_a_contract_case() -> None:
    verbs = {v for names in _VERBS.values() for v in names}
    assert verbs - set(CASES) == set(), "a Store verb without a contract case"
    assert set(CASES) - verbs == set(), "a contract case of no Store verb"


_UNIQUE = list(dict.fromkeys(CASES.values()))


@pytest.mark.parametrize("run", _UNIQUE, ids=[f.__name__.strip("_") for f in _UNIQUE])
def test_the_verbs_keep_their_contract(run: Callable[[Store, Any], None], store: Store,
                                       clock: Any) -> None:
    """Each case once per backend (the ``store`` fixture runs on SQLite and PostgreSQL)."""
    run(store, clock)


def test_a_store_that_can_write_says_so_and_closes_tidy(store: Store) -> None:
    """The backend's own verbs beside the Store's: the write probe (/healthz) and close."""
    add(store)
    assert store.write_problem() is None
    store.close()
    assert store.get(1).status is Status.PENDING  # a closed pool opens again on use


def test_a_busy_hours_timings_sample_its_blocks_of_minutes_in_proportion(store: Store, clock: Any) -> None:
    """Past ``size`` attempts in the hour, each block of minutes gives its newest attempts
    in proportion to its share: not the hour's newest alone, nor all of them."""
    clock.advance((MINUTE - clock() % MINUTE) / 1e6 + 1)  # one second into a minute

    def run(n: int, seconds: float) -> None:
        for _ in range(n):
            add(store, "pdf")
        got = store.claim_many("w1", n, types=["pdf"])
        clock.advance(seconds)
        store.complete_many("w1", [(j.id, j.attempt, None) for j in got])

    run(3, 50)  # an older block of minutes: its oldest three ran 50 s, its newest three 1 s
    run(3, 1)
    clock.advance(6 * 60)  # another block: four ran 30 s
    run(4, 30)
    assert store.timings()["pdf"].run == {50: 30_000_000, 95: 50_000_000}  # all ten
    # 3 of the first block's 6 (its newest: 1 s), 2 of the next's 4 (30 s); the hour's
    # newest five would be four of 30 s and one of 1 s (p50 30 s).
    assert store.timings(size=5)["pdf"].run == {50: 1_000_000, 95: 30_000_000}
