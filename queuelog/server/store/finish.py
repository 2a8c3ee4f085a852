"""Ending attempts and finishing jobs: the one path every route takes.

Complete (one or a batch), fail (one or a batch), a lease taken back, cancel (one, even a
running one, or in bulk): each changes its rows with its backend's statement and then
calls ``settled`` in the same transaction. What happens when jobs finish or an attempt ends
(the retention mark, the wake-up of a freed slot or of a job due again, the wake-up of the
requests waiting for a job's finish) is written there, once.
"""
from __future__ import annotations

import random
from typing import Any, Callable, Mapping, Sequence

from sqlalchemy import Connection

from queuelog.model.jobs import FINISHED, Done, Job, Outcome, Status, backoff_seconds
from queuelog.model.problems import (JobCancelled, JobNotFound, NotHolder, QueuelogError,
                                     StaleAttempt, WrongState)
from queuelog.server.store import statements as st
from queuelog.server.store.audit import record
from queuelog.server.store.engine import to_us
from queuelog.server.store.flows import Flows
from queuelog.server.store.listen import FINISHED as FINISHED_KIND
from queuelog.server.store.part import Context, Part
from queuelog.server.store.prepared import Prepared
from queuelog.server.store.reads import ALL, Scope, get_row, scope_conditions
from queuelog.server.store.tables import jobs

LEASE_EXPIRED_ERROR = "lease expired"
Item = tuple[int, int, "str | None"]  # a complete's (id, attempt, result JSON)
Ending = tuple[int, int, str, bool, "float | None"]  # a fail's (id, attempt, error, retry,
#                                                      retry_in)
# An ended attempt's job as decided: (id, attempt, status, retry_count, run_at, error).
Move = tuple[int, int, str, int, "int | None", str]
# The columns a batch complete returns: what its answer, its counts and ``settled`` read,
# and the attempt's claim and end (its run time in the metrics; model.jobs.Done).
DONE_COLUMNS = ("id, type, status, watched, has_dependents, claimed_at, finished_at, "
                "traceparent")
_FINISHED = frozenset(s.value for s in FINISHED)


class Finishing(Part):
    """The verbs that end attempts and finish jobs; a backend gives ``_complete_rows``."""

    # True where a complete runs alone in autocommit (PostgreSQL): it completes only jobs
    # without dependents, and those with go again in a transaction, with their release.
    completes_plain_alone = False

    def __init__(self, ctx: Context, *, backoff_base: float = 2.0,
                 backoff_cap: float = 3600.0, rng: random.Random | None = None) -> None:
        super().__init__(ctx)
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.rng = rng or random.Random()
        # Types with a concurrency limit in force, as this process's last claim saw them:
        # an ended attempt of one frees a slot (``settled``).
        self.slot_types: frozenset[str] = frozenset()
        self.flows = Flows(ctx)
        self.flows.settled = self.settled  # a cascade's cancelled jobs finish as any other
        d = self.engine.dialect
        (self._by_id, self._by_ids, self._budgets, self._attempt_cancel, self._watch,
         self._concurrency_set) = (
            Prepared(s, d) for s in (st.BY_ID, st.BY_IDS, st.BUDGETS, st.ATTEMPT_CANCEL,
                                     st.WATCH, st.CONCURRENCY_SET))

    # -- the backend's part --------------------------------------------------------------
    def _complete_rows(self, conn: Connection, now: int, worker: str,
                       items: Sequence[Item], *, full: bool,
                       plain: bool = False) -> tuple[list[Any], bool]:
        """Complete the held items, each fenced alone (running, this worker, this attempt),
        and close their attempts; the completed rows (``full``: every column, else
        DONE_COLUMNS) and whether the statement told other processes of freed slots.
        ``plain``: leave out jobs with dependents (``completes_plain_alone``)."""
        raise NotImplementedError

    def _end_rows(self, conn: Connection, now: int, outcome: Outcome,
                  moves: Sequence[Move], worker: str | None) -> list[Any]:
        """Move the jobs on as ``moves`` say, each fenced alone (running, at its attempt,
        and held by ``worker`` unless None), and close their attempts with ``outcome`` and
        the same error; the rows moved (every column)."""
        raise NotImplementedError

    # -- the one tail --------------------------------------------------------------------
    def settled(self, conn: Connection, rows: Sequence[Any], *, ran: bool = True,
                told: bool = False, release: bool = True) -> None:
        """In the transaction that ended them: what follows when jobs finish or an attempt
        ends. ``ran``: the rows were running (their slots are freed); ``told``: the
        statement itself told the other processes (PostgreSQL's complete); ``release``:
        count the finished jobs in their dependents' waits (a cascade does it itself)."""
        if not rows:
            return
        self.on_jobs_written()
        if any(r.watched and r.status in _FINISHED for r in rows):
            self.notifier.notify(conn, kind=FINISHED_KIND)  # a request waits for its finish
        if release and any(r.has_dependents for r in rows) and self.flows.release(
                conn, self.clock(), rows):
            self.notifier.notify(conn)  # dependents became pending: as an enqueue
        if any(r.status == Status.PENDING.value for r in rows):
            self.notifier.notify(conn)  # due at its run_at: waiting polls time their look
        elif ran and self._frees_slot(conn, rows):
            self.notifier.notify(conn, told=told)  # a freed slot, as a new job

    def _frees_slot(self, conn: Connection, rows: Sequence[Any]) -> bool:
        """Whether ended attempts free a slot of a type with a concurrency in force."""
        if any(r.type in self.slot_types for r in rows):
            return True
        # Where the statement itself answers (PostgreSQL's complete), it read the limiter
        # rows too; else read them: ``slot_types`` is this process's last claim's reading,
        # and a limit set since by any app server (this one may never claim) must wake.
        if "frees_slot" in rows[0]._fields:
            return any(r.frees_slot for r in rows)
        return bool(self._concurrency_set.rows(conn, {"types": sorted({r.type
                                                                         for r in rows})}))

    # -- complete --------------------------------------------------------------------------
    def complete(self, job_id: int, worker: str, attempt: int,
                 result_json: str | None = None) -> Job:
        """Mark a held job completed, storing its result."""
        rows = self._complete_all(worker, [(job_id, attempt, result_json)], full=True)
        if not rows:
            with self._read.connect() as conn:
                raise self._refusal(conn, job_id, worker, attempt)
        return Job.from_row(rows[0])

    def _complete_all(self, worker: str, items: Sequence[Item], *, full: bool) -> list[Any]:
        """Complete the items (``_complete_rows``) and settle them, in one transaction, or,
        where completes run alone, jobs without dependents alone and the rest after."""
        alone = self.completes_plain_alone
        with (self.backend.one_statement(self._write) if alone else
              self._write.begin()) as conn:
            rows, told = self._complete_rows(conn, self.clock(), worker, items, full=full,
                                             plain=alone)
            self.settled(conn, rows, told=told)
        if not alone or len(rows) == len(items):
            return list(rows)
        linked = self._held_with_dependents(worker, items, {r.id for r in rows})
        if not linked:
            return list(rows)  # the rest were refused: stale, not held, not running
        with self._write.begin() as conn:  # jobs with dependents: released with their finish
            more, told = self._complete_rows(conn, self.clock(), worker, linked, full=full)
            self.settled(conn, more, told=told)
        return [*rows, *more]

    def _held_with_dependents(self, worker: str, items: Sequence[Item],
                              done: set[int]) -> list[Item]:
        """The items a plain complete left that are held at their attempt and have
        dependents: those go again, in a transaction; the others were refused."""
        rest = [i for i in items if i[0] not in done]
        with self._read.connect() as conn:
            now = {r.id: r for r in self._by_ids.rows(conn, {"ids": [i[0] for i in rest]})}
        return [i for i in rest if (r := now.get(i[0])) is not None and r.has_dependents
                and r.status == Status.RUNNING.value and r.worker_id == worker
                and r.attempt == i[1]]

    def complete_many(self, worker: str, items: Sequence[Item]) -> list[Done | QueuelogError]:
        """Complete many held jobs (id, attempt, result JSON; ids distinct) at once, each
        fenced on its own: a refused item changes nothing and is answered by its error;
        a completed one by its id, type and status (``Done``). Only the refused items are
        read again, to say why."""
        if not items:
            return []
        rows = {r.id: r for r in self._complete_all(worker, items, full=False)}
        refused = [job_id for job_id, _, _ in items if job_id not in rows]
        now_rows: dict[int, Any] = {}
        if refused:
            with self._read.connect() as conn:
                now_rows = {r.id: r for r in self._by_ids.rows(conn, {"ids": refused})}
        return [Done.from_row(rows[i]) if i in rows else
                refusal(now_rows.get(i), i, worker, attempt) for i, attempt, _ in items]

    # -- fail and take back ---------------------------------------------------------------
    def fail(self, job_id: int, worker: str, attempt: int, error: str, *,
             retry: bool = True, retry_in: float | None = None,
             clean: Callable[[str], str] | None = None) -> Job:
        """Record a failed attempt: back to pending after backoff, or failed for good.
        ``clean`` (the sanitizer) is applied to ``error`` once the attempt is fenced."""
        got = self.fail_many(worker, [(job_id, attempt, error, retry, retry_in)], clean)[0]
        if isinstance(got, QueuelogError):
            raise got
        return got

    def fail_many(self, worker: str, items: Sequence[Ending],
                  clean: Callable[[str], str] | None = None) -> list[Job | QueuelogError]:
        """Fail many held attempts (id, attempt, error, retry, retry_in; ids distinct) in
        one transaction, each fenced on its own, as ``complete_many``; ``clean`` as
        ``fail``."""
        with self._write.begin() as conn:
            held = [r for r in self._budgets.rows(conn, {"ids": [i[0] for i in items]})
                    if r.status == Status.RUNNING.value and r.worker_id == worker]
            rows = self._end_attempts(conn, self.clock(), Outcome.FAILED, items, held,
                                      worker=worker, clean=clean)
            refused = [i[0] for i in items if i[0] not in rows]
            now_rows = ({r.id: r for r in self._by_ids.rows(conn, {"ids": refused})}
                        if refused else {})
        return [Job.from_row(rows[i]) if i in rows else
                refusal(now_rows.get(i), i, worker, attempt) for i, attempt, *_ in items]

    def take_back(self, conn: Connection, now: int, expired: Sequence[Any]) -> None:
        """Take back the ``expired`` leases (rows of ``statements.EXPIRED``) as failed
        attempts, in one statement however many."""
        items = [(r.id, r.attempt, LEASE_EXPIRED_ERROR, True, None) for r in expired]
        rows = self._end_attempts(conn, now, Outcome.LEASE_EXPIRED, items, expired,
                                  worker=None)
        for row in rows.values():  # its run: from its claim to the take-back
            self.ctx.on_lease_expired(row.type, (now - row.claimed_at) / 1e6)

    def _end_attempts(self, conn: Connection, now: int, outcome: Outcome,
                      items: Sequence[Ending], budgets: Sequence[Any], *,
                      worker: str | None,
                      clean: Callable[[str], str] | None = None) -> dict[int, Any]:
        """End running attempts with a failure: each retried after backoff or failed for
        good, by the retry budget of its row in ``budgets`` (id, attempt, retry_count,
        max_retries; an item without one is refused); the rows moved, by id."""
        held = {r.id: r for r in budgets}
        moves: list[Move] = []
        for job_id, attempt, error, retry, retry_in in items:
            row = held.get(job_id)
            if row is None or row.attempt != attempt:
                continue
            # Fenced: only now is the error text worth its sanitizing (a stale item costs none).
            error = clean(error) if clean is not None else error
            if retry and row.retry_count < row.max_retries:
                n = row.retry_count + 1
                delay = retry_in if retry_in is not None else backoff_seconds(
                    n, self.backoff_base, self.backoff_cap, self.rng)
                moves.append((job_id, attempt, Status.PENDING.value, n, now + to_us(delay),
                              error))
            else:
                moves.append((job_id, attempt, Status.FAILED.value, row.retry_count, None,
                              error))
        if not moves:
            return {}
        # PostgreSQL: a concurrent take-back or answer may change a row after its budget
        # was read; the statement fences each again and leaves it out (a refusal, not 500).
        rows = self._end_rows(conn, now, outcome, moves, worker)
        self.settled(conn, rows)
        return {r.id: r for r in rows}

    # -- cancel ------------------------------------------------------------------------------
    def cancel(self, job_id: int, scope: Scope = ALL, actor: str | None = None) -> Job:
        """Cancel a pending or running job (a producer only its own): a running one's
        attempt ends ``cancelled`` and its holder is fenced off; audited when ``actor`` is
        given."""
        with self._write.begin() as conn:
            now = self.clock()
            before = get_row(conn, job_id, scope)  # 404 when missing or not visible
            rows = self.cancel_rows(conn, now, jobs.c.id == job_id, running=True)
            if not rows:
                raise WrongState(f"Job {job_id} is {before.status}: only a pending, "
                                 "blocked or running job can be cancelled.")
            if actor is not None:
                record(conn, now, actor, "job.cancel", str(job_id))
        return Job.from_row(rows[0])

    def cancel_rows(self, conn: Connection, now: int, *conditions: Any,
                    running: bool = False) -> list[Any]:
        """Cancel the pending jobs matching ``conditions`` in ``conn``'s transaction (a
        single or a bulk cancel; ``running``: running ones too, their attempts ended
        ``cancelled`` and their slots freed); their rows."""
        rows = conn.execute(st.cancel(*conditions, running=running), {"now": now}).all()
        ended = 0
        if running:
            # A job cancelled while it ran has its attempt open: end it ``cancelled`` (a
            # pending job's attempts ended before, and match nothing).
            for r in rows:
                if r.attempt and self._attempt_cancel.run(conn, {
                        "jid": r.id, "att": r.attempt, "now": now}):
                    ended += 1
                    self.ctx.on_run_cancelled(r.type, (now - r.claimed_at) / 1e6)
        self.settled(conn, rows, ran=bool(ended))
        return rows

    # -- waiting for a finish ----------------------------------------------------------------
    def watch(self, job_id: int) -> bool:
        """Mark a job a request waits for, so its finish tells every process (``settled``);
        False when it has finished already (or is gone): nothing to wait for."""
        with self.backend.one_statement(self._write) as conn:
            return self._watch.run(conn, {"jid": job_id}) > 0

    # -- why not -----------------------------------------------------------------------------
    def _refusal(self, conn: Connection, job_id: int, worker: str,
                 attempt: int) -> QueuelogError:
        """Why a worker call matched no row, as the right domain error (not raised)."""
        return refusal(self._by_id.first(conn, {"jid": job_id}), job_id, worker, attempt)

    def _remember(self, limits: Mapping[str, Any]) -> None:
        """The types whose ended attempt frees a slot, as a claim's reading found them."""
        self.slot_types = frozenset(t for t, lim in limits.items() if lim.concurrency)


def refusal(row: Any, job_id: int, worker: str, attempt: int) -> QueuelogError:
    """Why a worker call on the job now in ``row`` (None: no such job) was refused."""
    if row is None:
        return JobNotFound(f"No job {job_id}.")
    if row.worker_id != worker:
        return NotHolder(f"Job {job_id} is not held by {worker}.")
    if row.attempt != attempt:
        return StaleAttempt(f"Attempt {attempt} is stale; the job is at attempt "
                            f"{row.attempt}.")
    if row.status == Status.CANCELLED.value:
        return JobCancelled(f"Job {job_id} was cancelled while attempt {attempt} ran: "
                            "stop its work.")
    return WrongState(f"Job {job_id} is {row.status}, not running.")
