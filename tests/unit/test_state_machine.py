"""A stateful property test of the job state machine: the store against a plain model.

Random runs of enqueue, claim, heartbeat, complete, fail, expire (the clock moves past
leases), cancel and admin retry. After every step the store must agree with the model,
and: no job is held by two workers, attempts only go up, one at a time, and a finished job
leaves its terminal state only through an admin retry.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (Bundle, RuleBasedStateMachine, invariant, rule,
                                 run_state_machine_as_test)
from sqlalchemy import delete, select

from queuelog.model.problems import QueuelogError
from queuelog.model.jobs import FINISHED, Status
from queuelog.server.store.tables import job_attempts, jobs
from queuelog.server.store import NewJob

WORKERS = ("w1", "w2")  # few, so one identity often re-claims a job it lost
DEFAULT_LEASE = 300.0  # LEASE_SECONDS's default: the test app does not change it
SETTINGS = settings(max_examples=30, stateful_step_count=35, deadline=None,
                    derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


@dataclasses.dataclass
class Model:
    """What the model believes about one job."""

    id: int
    priority: int
    max_retries: int
    run_at: int
    status: Status = Status.PENDING
    attempt: int = 0
    retry_count: int = 0
    holder: str | None = None
    lease_until: int | None = None


class QueueMachine(RuleBasedStateMachine):
    """Drives one store; the model predicts every answer."""

    ids = Bundle("ids")

    def __init__(self, store: Any, clock: Any) -> None:
        super().__init__()
        self.store, self.clock = store, clock
        self.model: dict[int, Model] = {}
        self.seen: dict[int, Status] = {}
        self.retried: int | None = None  # the job an admin retry just moved
        store.jobs.rng = random.Random(0)
        with store.engine.begin() as conn:
            conn.execute(delete(job_attempts))
            conn.execute(delete(jobs))

    # -- rules ---------------------------------------------------------------------
    @rule(target=ids, priority=st.sampled_from([0, 10, 20]), retries=st.integers(0, 2),
          delay=st.sampled_from([None, 0, 5]))
    def enqueue(self, priority: int, retries: int, delay: int | None) -> int:
        """A producer adds a job, due now or a little later."""
        job, created = self.store.enqueue(NewJob(
            producer="p", type="email", payload_json="{}", priority=priority,
            max_retries=retries, delay_seconds=delay))
        assert created and job.status is Status.PENDING and job.attempt == 0
        assert job.run_at == self.clock.now + (delay or 0) * 1_000_000
        self.model[job.id] = Model(job.id, priority, retries, job.run_at)
        return job.id

    @rule(worker=st.sampled_from(WORKERS), lease=st.sampled_from([5, None, 30]))
    def claim(self, worker: str, lease: int | None) -> None:
        """A worker claims: expired leases are taken back first, then the best due job."""
        now = self.clock.now
        expired = [m for m in self.model.values()
                   if m.status is Status.RUNNING and m.lease_until < now]  # type: ignore[operator]
        for m in expired:
            self._end(m, retry=True, retry_in=None)
        # A job just taken back backs off (never immediate), so it is not due yet.
        due = [m for m in self.model.values() if m.status is Status.PENDING
               and m.run_at <= now and m not in expired]
        due.sort(key=lambda m: (-m.priority, m.run_at, m.id))
        got = self.store.claim(worker, lease_seconds=lease)
        for m in expired:  # the backoff is random: learn where the store put it
            stored = self.store.get(m.id)
            assert stored.status is m.status and stored.retry_count == m.retry_count
            if m.status is Status.PENDING:
                self._check_backoff(m, stored.run_at, now)
        if not due:
            assert got is None
            return
        best = due[0]
        assert got is not None and got.id == best.id
        best.attempt += 1
        assert got.attempt == best.attempt and got.worker_id == worker
        best.status, best.holder = Status.RUNNING, worker
        best.lease_until = now + int((lease or DEFAULT_LEASE) * 1_000_000)
        assert got.lease_expires_at == best.lease_until

    @rule(job=ids, worker=st.sampled_from(WORKERS), stale=st.booleans(),
          lease=st.sampled_from([None, 60]))
    def heartbeat(self, job: int, worker: str, stale: bool, lease: int | None) -> None:
        """A worker (maybe not the holder, maybe a stale attempt) extends a lease."""
        m = self.model[job]
        attempt = m.attempt - 1 if stale else m.attempt
        if not self._expect_held(m, worker, attempt):
            self._refused(lambda: self.store.heartbeat(job, worker, attempt,
                                                       lease_seconds=lease))
            return
        got = self.store.heartbeat(job, worker, attempt, lease_seconds=lease)
        m.lease_until = self.clock.now + int((lease or DEFAULT_LEASE) * 1_000_000)
        assert got.lease_expires_at == m.lease_until

    @rule(job=ids, worker=st.sampled_from(WORKERS), stale=st.booleans())
    def complete(self, job: int, worker: str, stale: bool) -> None:
        """A worker reports success."""
        m = self.model[job]
        attempt = m.attempt - 1 if stale else m.attempt
        if not self._expect_held(m, worker, attempt):
            self._refused(lambda: self.store.complete(job, worker, attempt, '{"ok":true}'))
            return
        got = self.store.complete(job, worker, attempt, '{"ok":true}')
        assert got.status is Status.COMPLETED and got.result == {"ok": True}
        m.status, m.lease_until = Status.COMPLETED, None

    @rule(job=ids, worker=st.sampled_from(WORKERS), stale=st.booleans(), retry=st.booleans(),
          retry_in=st.sampled_from([None, 0, 7]))
    def fail(self, job: int, worker: str, stale: bool, retry: bool,
             retry_in: int | None) -> None:
        """A worker reports failure: retried after backoff (or retry_in), or failed."""
        m = self.model[job]
        attempt = m.attempt - 1 if stale else m.attempt
        if not self._expect_held(m, worker, attempt):
            self._refused(lambda: self.store.fail(job, worker, attempt, "boom", retry=retry,
                                                  retry_in=retry_in))
            return
        now = self.clock.now
        got = self.store.fail(job, worker, attempt, "boom", retry=retry, retry_in=retry_in)
        self._end(m, retry=retry, retry_in=retry_in)
        assert got.status is m.status and got.retry_count == m.retry_count
        if m.status is Status.PENDING:
            if retry_in is None:
                self._check_backoff(m, got.run_at, now)
            assert got.run_at == m.run_at

    @rule(job=ids, verb=st.sampled_from(["heartbeat", "complete", "fail"]))
    def holder_sends_an_old_attempt(self, job: int, verb: str) -> None:
        """The holder's identity, but an attempt it lost (another process of the same key)."""
        m = self.model[job]
        if m.status is not Status.RUNNING or m.attempt < 2:
            return
        calls = {"heartbeat": lambda: self.store.heartbeat(job, m.holder, m.attempt - 1),
                 "complete": lambda: self.store.complete(job, m.holder, m.attempt - 1),
                 "fail": lambda: self.store.fail(job, m.holder, m.attempt - 1, "late")}
        self._refused(calls[verb])

    @rule(seconds=st.sampled_from([1, 4, 10, 35, 400]))
    def advance(self, seconds: int) -> None:
        """Time passes; leases may expire (taken back by the next claim)."""
        self.clock.advance(seconds)

    @rule(job=ids)
    def cancel(self, job: int) -> None:
        """Cancel: from pending, or from running (the holder is fenced off; its attempt
        ends ``cancelled``)."""
        m = self.model[job]
        if m.status not in (Status.PENDING, Status.RUNNING):
            self._refused(lambda: self.store.cancel(job))
            return
        got = self.store.cancel(job)
        assert got.status is Status.CANCELLED and got.lease_expires_at is None
        m.status, m.lease_until = Status.CANCELLED, None

    @rule(job=ids)
    def retry(self, job: int) -> None:
        """Admin retry: only from failed or cancelled, with fresh retries."""
        m = self.model[job]
        if m.status not in (Status.FAILED, Status.CANCELLED):
            self._refused(lambda: self.store.retry(job))
            return
        got = self.store.retry(job)
        assert got.status is Status.PENDING and got.attempt == m.attempt
        m.status, m.retry_count, m.run_at = Status.PENDING, 0, self.clock.now
        assert got.run_at == m.run_at
        self.retried = job

    # -- invariants ----------------------------------------------------------------
    @invariant()
    def store_agrees_with_model(self) -> None:
        """Every job as the model says; histories consistent; terminal states stick."""
        with self.store.engine.connect() as conn:
            rows = {r.id: r for r in conn.execute(select(jobs))}
            history: dict[int, list[Any]] = {}
            for a in conn.execute(select(job_attempts).order_by(job_attempts.c.attempt)):
                history.setdefault(a.job_id, []).append(a)
        assert set(rows) == set(self.model)
        for job_id, m in self.model.items():
            row, past = rows[job_id], history.get(job_id, [])
            assert (Status(row.status), row.attempt, row.retry_count) == \
                (m.status, m.attempt, m.retry_count)
            # Attempts strictly increase, one per claim, never reused.
            assert [a.attempt for a in past] == list(range(1, m.attempt + 1))
            running = [a for a in past if a.outcome == "running"]
            # Held by at most one worker: the current attempt's, and only while running.
            if m.status is Status.RUNNING:
                assert [(a.attempt, a.worker_id) for a in running] == [(m.attempt, m.holder)]
                assert row.worker_id == m.holder and row.lease_expires_at == m.lease_until
            else:
                assert running == []
            before = self.seen.get(job_id)
            if before in FINISHED and m.status is not before:
                assert self.retried == job_id, f"job {job_id} left {before} without a retry"
            self.seen[job_id] = m.status
        self.retried = None

    # -- helpers -------------------------------------------------------------------
    @staticmethod
    def _expect_held(m: Model, worker: str, attempt: int) -> bool:
        # A cancelled job's holder is refused (409 "cancelled") like any other late answer.
        return m.status is Status.RUNNING and m.holder == worker and attempt == m.attempt

    @staticmethod
    def _refused(call: Any) -> None:
        """The store refuses with a 409 (wrong state, not the holder, stale attempt)."""
        try:
            call()
        except QueuelogError as exc:
            assert exc.status == 409, exc
        else:
            raise AssertionError("the store accepted a call the model refuses")

    def _end(self, m: Model, *, retry: bool, retry_in: int | None) -> None:
        """A failed or expired attempt: back to pending with retries left, else failed."""
        m.lease_until = None
        if retry and m.retry_count < m.max_retries:
            m.status, m.retry_count = Status.PENDING, m.retry_count + 1
            if retry_in is not None:
                m.run_at = self.clock.now + retry_in * 1_000_000
        else:
            m.status = Status.FAILED

    def _check_backoff(self, m: Model, run_at: int, now: int) -> None:
        """The store's backoff for the n-th retry lies in [ceiling/2, ceiling]."""
        ceiling = min(self.store.jobs.backoff_cap,
                      self.store.jobs.backoff_base * 2 ** (m.retry_count - 1)) * 1_000_000
        assert now + ceiling / 2 - 1 <= run_at <= now + ceiling, (run_at - now, ceiling)
        m.run_at = run_at


def test_state_machine(store: Any, clock: Any) -> None:
    """The store follows the model through random runs (derandomized: same runs in CI)."""
    run_state_machine_as_test(lambda: QueueMachine(store, clock), settings=SETTINGS)
