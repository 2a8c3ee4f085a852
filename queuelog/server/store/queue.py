"""The job verbs: every statement that changes jobs, one transaction per call.

Statements are built once per store and reused: building Core statements on each call
costs several times the work of running them (measured: 0.12x vs 0.35-0.43x of raw
sqlite3). Where SQLite and PostgreSQL differ (SKIP LOCKED, INDEXED BY, how the claim's
subquery runs), the store's ``Dialect`` (dialect.py) decides, once, at build time; which
types a claim may take is ``claim_policy.eligible``.
"""
from __future__ import annotations

import functools
import random
from typing import Any, Callable, Mapping, Sequence

from sqlalchemy import (BigInteger, ColumnElement, Connection, Engine, String, and_, bindparam,
                        case, cast, delete, func, literal, or_, select, update)

from queuelog.model.problems import (JobNotFound, NotHolder, QueuelogError, StaleAttempt,
                                     WrongState)
from queuelog.model.jobs import FINISHED, Done, Job, Outcome, Status, backoff_seconds
from queuelog.model.limits import Limits
from queuelog.server.store import claim_policy
from queuelog.server.store.accounts import ACTIVE_KEY, is_key
from queuelog.server.store.audit import Tally, record
from queuelog.server.store.dialect import of as dialect_of
from queuelog.server.store.dialect import sql_of
from queuelog.server.store.engine import Clock, system_clock, to_us
from queuelog.server.store.enqueue import Enqueue
from queuelog.server.store.limits import Limiter
from queuelog.server.store.prepared import Prepared
from queuelog.server.store.tables import job_attempts, jobs, type_limits
from queuelog.server.store.reads import ALL, Scope, get_row, scope_conditions, status_is

LEASE_EXPIRED_ERROR = "lease expired"
# The columns of a claim's new attempts where the claim cannot open them itself.
_ATTEMPT_COLUMNS = ("job_id", "attempt", "worker_id", "started_at", "outcome")
# A limited claim's new attempts, stamped again once its settle has seen the slots free.
_RESTAMP = (update(job_attempts).values(started_at=bindparam("later"))
            .where(job_attempts.c.job_id.in_(bindparam("ids", expanding=True)),
                   job_attempts.c.started_at == bindparam("now"),
                   job_attempts.c.finished_at.is_(None)))
EXPIRE_BATCH = 100  # expired leases taken back per claim, so one claim stays cheap
PURGE_BATCH = 500   # rows per purge transaction: no table-long lock


class Claimed(list[Job]):
    """The jobs a claim got, with what a waiting claim needs to know when it got none."""

    next_due_in: float | None = None  # seconds until a skipped type's next token comes
    revoked: bool = False             # the claim's key is no longer active: nothing taken


class _Overrun(Exception):
    """A claim taken on an unlocked reading would overrun a limit: roll it back."""


class Queue(Enqueue):
    """The job verbs: enqueue (enqueue.py), claim, heartbeat, complete, fail, cancel, retry,
    purge."""

    def __init__(self, engine: Engine, *, clock: Clock = system_clock,
                 backoff_base: float = 2.0, backoff_cap: float = 3600.0,
                 rng: random.Random | None = None, lease_seconds: float = 300.0,
                 type_leases: Mapping[str, float] | None = None,
                 type_limits: Mapping[str, Limits] | None = None) -> None:
        self.engine = engine
        self.dialect = dialect_of(engine)
        self._write = self.dialect.writer(engine)
        self._read = self.dialect.reader(engine)  # every pure read connects through it
        self.clock = clock
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.rng = rng or random.Random()
        self.lease_seconds = lease_seconds
        self.type_leases = dict(type_leases or {})
        self.configured_limits = dict(type_limits or {})  # JOB_TYPES' flow control
        # Types with a concurrency limit in force (slot_types) and with any limit
        # (limited_types), as this process's last claim saw them; the config's until then.
        self.slot_types: frozenset[str] = frozenset()
        self.limited_types: frozenset[str] = frozenset()
        self._remember(self.configured_limits)
        # Told the type of each job whose lease a claim took back (the metrics count them).
        self.on_lease_expired: Callable[[str], None] = lambda job_type: None
        # Told when a call created or finished jobs (retention purges after such requests).
        self.on_jobs_written: Callable[[], None] = lambda: None
        # Told after a commit that made jobs claimable (this process's long polls wake;
        # other processes hear the dialect's notify): see wakeups.py.
        self.on_claimable: Callable[[], None] = lambda: None
        self.dialect.watch_claimable(engine, lambda: self.on_claimable())
        self._build()

    # -- statements, built once ------------------------------------------------
    def _build(self) -> None:
        lease_until = self._lease_until()
        self._build_claim(lease_until)
        self._build_answers(lease_until)
        self._build_lookups()
        self._prepare()

    # The statements the job verbs run on every call: compiled once and run on the
    # driver's cursor (prepared.py); purge's pick is still extended per call, as Core.
    HOT = ("_expired", "_attempt_end", "_heartbeat", "_complete", "_by_id", "_by_ids")
    # Dicts of them: the claims by their types' kind (_kind), the rest by holder.
    HOT_BY_KEY = ("_claims", "_claims_b", "_claims_g", "_budget", "_retry_later", "_fail_now")

    def _prepare(self) -> None:
        self._prepare_enqueue()
        self.limiter = Limiter(self.engine, self.dialect)
        self._complete_rows = Prepared(self.dialect.complete_rows(), self.engine.dialect)
        self._active_key = Prepared(ACTIVE_KEY, self.engine.dialect)
        if not self._claim_opens_attempts:  # SQLite: a claim's attempts, then a complete's
            self._open_attempts = Prepared(
                self.dialect.insert_rows(job_attempts, _ATTEMPT_COLUMNS), self.engine.dialect)
        if not self._complete_closes_attempt:
            self._close_attempts = Prepared(self.dialect.close_attempt_rows(),
                                            self.engine.dialect)
        sa_dialect = self.engine.dialect
        for name in self.HOT:
            setattr(self, name, Prepared(getattr(self, name), sa_dialect))
        for name in self.HOT_BY_KEY:
            setattr(self, name, {own: Prepared(stmt, sa_dialect)
                                 for own, stmt in getattr(self, name).items()})

    def _lease_until(self) -> Any:
        """The lease a claim or heartbeat sets: the caller's, else the job's type's, else
        the default. Decided in SQL, because only the UPDATE knows which job it got."""
        b = bindparam
        default_us = literal(to_us(self.lease_seconds), BigInteger)
        by_type = {t: literal(to_us(s), BigInteger) for t, s in self.type_leases.items()}
        return b("now", type_=BigInteger) + func.coalesce(
            b("lease_us", type_=BigInteger),
            case(by_type, value=jobs.c.type, else_=default_us) if by_type else default_us)

    def _build_claim(self, lease_until: Any) -> None:
        """The claim (any type, or the worker's types) and the lease take-back."""
        b = bindparam
        cand = jobs.alias("cand")  # not correlated with the UPDATE's own jobs
        policy = claim_policy.eligible(cand)
        due = (select(cand.c.id).where(status_is(Status.PENDING, cand), cand.c.run_at <= b("now"),
                                       policy)
               .order_by(cand.c.priority.desc(), cand.c.run_at, cand.c.id).limit(b("n")))
        # By the claim's types (_kind): one type is an equality, which walks that type's
        # own index (ix_jobs_pending_type_claim), not every type's jobs ahead of it; the
        # dialect makes the claim of several types ("many") of one walk per type.
        walks = {"any": due, "one": due.where(cand.c.type == b("type1"))}

        def of_type(type_: Any) -> Any:
            """The due jobs of the type ``type_`` names, in claim order, with their order's
            columns: a claim of several types walks each type's own."""
            return due.add_columns(cand.c.priority, cand.c.run_at).where(cand.c.type == type_)

        # The same walks skipping the types at their limit (flow control): used only when a
        # limit leaves some type nothing, so a claim without one runs the statement above.
        skip = claim_policy.not_blocked(cand)
        walks_b = self.dialect.claim_candidates(
            {kind: walk.where(skip) for kind, walk in walks.items()},
            f"{sql_of(policy)} AND {claim_policy.BLOCKED_SQL}", (claim_policy.BLOCKED_PARAM,),
            of_type=lambda type_: of_type(type_).where(skip))
        walks = self.dialect.claim_candidates(walks, sql_of(policy), of_type=of_type)
        # No "still pending" of its own: the walk's rows are pending and held (PostgreSQL:
        # locked by its FOR UPDATE, rechecked at the lock; SQLite: the write lock), so the
        # UPDATE finds them by id alone. With it, PostgreSQL's planner took them from a
        # pending-only index filtered by id, a walk of every pending job per claim, wherever
        # its statistics predated a burst (bench/bench_claim_plan.py: a drain of 20,000,
        # 9.4 ms a 100-job claim against 4.5). Without it the other way is a sequential
        # scan, costed by the table's true size, so taken only where the table is small.
        claim = (update(jobs)
                 .values(status=Status.RUNNING.value, attempt=jobs.c.attempt + 1,
                         worker_id=b("wkr"), claimed_at=b("now"),
                         lease_expires_at=lease_until, updated_at=b("now"))
                 .returning(*jobs.c))
        # The first n due jobs in claim order (one for a single claim). PostgreSQL: the
        # subquery locks them, skipping rows another claim holds; SQLite: the write lock.
        def claiming(walk: Any, **guarded: Any) -> Any:
            """The claim of what ``walk`` picks, opening their attempts where the database
            does that in the same statement (PostgreSQL: none are inserted after)."""
            taking = claim.where(self.dialect.in_subquery(jobs.c.id, walk))
            recording = self.dialect.claim_recording(taking, job_attempts,
                                                     Outcome.RUNNING.value, **guarded)
            return taking if recording is None else recording

        self._claim_opens_attempts = self.dialect.claim_recording(
            claim, job_attempts, Outcome.RUNNING.value) is not None
        self._claims = {kind: claiming(walk) for kind, walk in walks.items()}
        self._claims_b = {kind: claiming(walk) for kind, walk in walks_b.items()}
        # A claim and its attempts in one statement may run in autocommit (_claim_alone).
        self._claims_alone = self._claim_opens_attempts and self.dialect.autocommits
        # The same, guarded in SQL by what the first reads check in Python: one round trip
        # where the reads and then the claim were two (_claim_alone).
        self._claims_g: dict[str, Any] = {}
        if self._claims_alone:
            guard = _alone_guard()
            self._claims_g = {kind: claiming(walk.where(guard), alone=guard)
                              for kind, walk in walks.items()}
        self._seen_limiter_rows = True  # until a claim's first reads say otherwise
        expired = (select(jobs.c.id, jobs.c.attempt)
                   .where(status_is(Status.RUNNING), jobs.c.lease_expires_at < b("now"))
                   .order_by(jobs.c.lease_expires_at).limit(EXPIRE_BATCH))
        self._expired = self.dialect.expired_leases(expired, EXPIRE_BATCH)

    def _build_answers(self, lease_until: Any) -> None:
        """A worker's heartbeat, complete and fail, each fenced by holder and attempt."""
        b = bindparam
        self._attempt_end = (update(job_attempts)
                             .where(job_attempts.c.job_id == b("jid"),
                                    job_attempts.c.attempt == b("att"))
                             .values(finished_at=b("now"), outcome=b("outcome"),
                                     error=b("error")))
        held = (jobs.c.id == b("jid"), status_is(Status.RUNNING),
                jobs.c.attempt == b("att"))
        self._heartbeat = (update(jobs).where(*held, jobs.c.worker_id == b("wkr"))
                           .values(lease_expires_at=lease_until, updated_at=b("now"))
                           .returning(*jobs.c))
        # One job's complete (complete_many's, for many at once, is the dialect's).
        complete_each = (update(jobs).where(*held, jobs.c.worker_id == b("wkr"))
                               .values(status=Status.COMPLETED.value, result=b("res"),
                                       lease_expires_at=None, finished_at=b("now"),
                                       updated_at=b("now")))
        self._complete = complete_each.returning(*jobs.c)
        closing = self.dialect.closing_attempts(self._complete, job_attempts,
                                                Outcome.COMPLETED.value)
        self._complete_closes_attempt = closing is not None
        if closing is not None:  # PostgreSQL: the attempt closed by the same statement
            self._complete = closing
        # Ending an attempt with a failure (a worker's fail, or a lease taken back): read
        # the retry budget, then move the job on; ``own`` adds "held by this worker".
        own = jobs.c.worker_id == b("wkr")
        budget = select(jobs.c.retry_count, jobs.c.max_retries)
        self._budget = {False: budget.where(*held), True: budget.where(*held, own)}
        back = update(jobs).values(status=Status.PENDING.value, retry_count=b("n"),
                                   run_at=b("run_at"), error=b("error"),
                                   lease_expires_at=None, updated_at=b("now"))
        dead = update(jobs).values(status=Status.FAILED.value, finished_at=b("now"),
                                   error=b("error"), lease_expires_at=None,
                                   updated_at=b("now"))
        self._retry_later = {o: back.where(*held, *([own] if o else [])).returning(*jobs.c)
                             for o in (False, True)}
        self._fail_now = {o: dead.where(*held, *([own] if o else [])).returning(*jobs.c)
                          for o in (False, True)}

    def _build_lookups(self) -> None:
        """Reads by id, and purge's pick."""
        b = bindparam
        self._by_id = select(jobs).where(jobs.c.id == b("jid"))
        self._by_ids = select(jobs).where(jobs.c.id.in_(b("ids", expanding=True)))
        self._purge_ids = self.dialect.skip_locked(select(jobs.c.id).order_by(jobs.c.finished_at))

    # -- writes ------------------------------------------------------------------
    def claim(self, worker: str, *, lease_seconds: float | None = None,
              types: Sequence[str] | None = None) -> Job | None:
        """Take back expired leases, then atomically claim the best due job, or None.

        ``lease_seconds`` None: the claimed job's type's lease, else the default.
        """
        got = self.claim_many(worker, 1, lease_seconds=lease_seconds, types=types)
        return got[0] if got else None

    def claim_many(self, worker: str, max_jobs: int, *, lease_seconds: float | None = None,
                   types: Sequence[str] | None = None, key: str | None = None) -> Claimed:
        """Take back expired leases, then claim up to ``max_jobs`` due jobs in one
        transaction; in claim order (priority, run_at, id), each with its own attempt,
        within the types' limits (claim_policy.py).

        ``key``: the token hash of the API key the claim is made with, read again with the
        claim's first reads (no round trip of its own); if it is no longer active, nothing
        is claimed (``Claimed.revoked``). A claim that waited sends it (actions.claim).
        """
        claim = functools.partial(self._claim_in_turn, worker, max_jobs, lease_seconds, types,
                                  key)
        try:
            out, rows = claim(False)
        except _Overrun:  # rare: a limit reached meanwhile; again, with the rows locked first
            try:
                out, rows = claim(True)
            except _Overrun:  # not expected under the lock; if it comes: nothing, not a 500
                out, rows = Claimed(), []
        # Built after the commit: the write lock (SQLite's, one writer at a time) is held
        # for the SQL alone, not for a hundred jobs' Python.
        out.extend(Job.from_row(r) for r in rows)
        return out

    def _claim_in_turn(self, worker: str, max_jobs: int, lease_seconds: float | None,
                       types: Sequence[str] | None, key: str | None,
                       locked: bool) -> tuple[Claimed, list[Any]]:
        """One claim transaction (``claim_many``); raises _Overrun, rolled back, where it
        would overrun a limit (claim_policy.settle)."""
        # A type the last reading found limited goes the transaction's way at once: the
        # one-statement claim would read, decline, and leave the reads to do again.
        if not locked and self._claims_alone and not (
                self.limited_types if types is None else self.limited_types & set(types)):
            alone = self._claim_alone(worker, max_jobs, lease_seconds, types, key)
            if alone is not None:
                return alone
        with self._write.begin() as conn:
            now = self.clock()
            out = Claimed()
            expired, first, still = self._first_reads(conn, now, key)
            if not still:
                return _revoked(), []
            if expired:
                self._expire_leases(conn, now, expired)
            params = _claim_params(now, worker, max_jobs, lease_seconds, types)
            allow, limits = claim_policy.allowance(
                conn, self.limiter, self.configured_limits, types, now, locked=locked,
                first=None if expired else first)
            self._remember(limits)
            if allow is None:
                rows = self._claims[_kind(types)].rows(conn, params)
            else:
                rows = claim_policy.take(
                    lambda blocked, k: self._claim_round(conn, types, params, blocked, k),
                    max_jobs, allow)
                if not rows and allow.next_due_us is not None:
                    out.next_due_in = (allow.next_due_us - now) / 1e6
            if not rows:
                return out, rows
            if len(rows) > 1:  # RETURNING has no order of its own
                rows.sort(key=lambda r: (-r.priority, r.run_at, r.id))
            if not self._claim_opens_attempts:  # one statement for all
                for params in self.dialect.rows_params(_ATTEMPT_COLUMNS, [
                        {"job_id": r.id, "attempt": r.attempt, "worker_id": worker,
                         "started_at": now, "outcome": Outcome.RUNNING.value} for r in rows]):
                    self._open_attempts.run(conn, params)
            # Last before the commit: on PostgreSQL this locks the types' limiter rows, so
            # claims of one limited type take turns for these statements alone.
            if allow is not None and not claim_policy.settle(
                    conn, self.limiter, self.configured_limits, allow, rows, now):
                raise _Overrun
            # ``now`` was read before the reads and the settle; a slot they found free may
            # have been freed by a completion stamped after it: the attempts start no
            # earlier than the settle saw that (SQLite read all of it in the write lock).
            later = self.clock()
            if allow is not None and later > now and not self.dialect.writes_lock_reads:
                conn.execute(_RESTAMP, {"later": later, "now": now, "ids": [r.id for r in rows]})
        return out, rows

    def _remember(self, limits: Mapping[str, Limits]) -> None:
        """What a claim's reading found in force, for the next calls of this process: the
        types whose complete or fail frees a slot, and those a claim takes in a
        transaction."""
        self.slot_types = frozenset(t for t, lim in limits.items() if lim.concurrency)
        self.limited_types = frozenset(t for t, lim in limits.items() if lim.any)

    def _first_reads(self, conn: Connection, now: int, key: str | None,
                     ) -> tuple[list[Any], list[Any], bool]:
        """A claim's first reads, together (PostgreSQL: one round trip, with the BEGIN if
        any): the leases run out, the limiter rows, and whether ``key`` is still active."""
        reads = [(self._expired, {"now": now}),
                 claim_policy.first_read(self.limiter, self.configured_limits)]
        if key is not None:
            reads.append((self._active_key, {"th": key}))
        got = Prepared.together(conn, reads, pipelined=self.dialect.pipelines)
        self._seen_limiter_rows = bool(got[1])
        return got[0], got[1], key is None or is_key(got[2][0] if got[2] else None, key)

    def _claim_alone(self, worker: str, max_jobs: int, lease_seconds: float | None,
                     types: Sequence[str] | None, key: str | None,
                     ) -> tuple[Claimed, list[Any]] | None:
        """The common claim as one statement in autocommit (``Dialect.autocommits``): the
        claim and its attempts are one statement, whole by itself, so no BEGIN and COMMIT
        round trips. Only when the first reads find no lease run out and no limit in force
        for these types; else None, and the claim runs as a transaction."""
        with self.dialect.one_statement(self._write) as conn:
            now = self.clock()
            params = _claim_params(now, worker, max_jobs, lease_seconds, types)
            if not self._seen_limiter_rows:
                # No limiter row when last read (none is the common case): the claim alone,
                # guarded in SQL by the first reads' conditions, answers whether they held.
                # If not, the transaction reads them itself and decides.
                got = self._claims_g[_kind(types)].rows(conn, {**params, "th": key})
                if not got[0].alone:
                    return None
                rows = [r for r in got if r.id is not None]
            else:
                expired, first, still = self._first_reads(conn, now, key)
                if not still:
                    return _revoked(), []
                everywhere, limited = claim_policy.limited_types(self.configured_limits,
                                                                 types, first)
                self._remember(everywhere)
                if expired or limited:
                    return None
                rows = self._claims[_kind(types)].rows(conn, params)
        if len(rows) > 1:  # RETURNING has no order of its own
            rows.sort(key=lambda r: (-r.priority, r.run_at, r.id))
        return Claimed(), rows

    def _claim_round(self, conn: Connection, types: Sequence[str] | None,
                     params: dict[str, Any], blocked: list[str], n: int) -> list[Any]:
        """One claim statement for up to ``n`` jobs, skipping the ``blocked`` types."""
        if not blocked:
            return self._claims[_kind(types)].rows(conn, {**params, "n": n})
        return self._claims_b[_kind(types)].rows(conn, {**params, "n": n, "blocked": blocked})

    def heartbeat(self, job_id: int, worker: str, attempt: int, *,
                  lease_seconds: float | None = None) -> Job:
        """Extend the lease of a job the worker holds at this attempt (from now)."""
        with self.dialect.one_statement(self._write) as conn:  # one UPDATE: whole alone
            now = self.clock()
            row = self._heartbeat.first(conn, {
                "jid": job_id, "att": attempt, "wkr": worker, "now": now,
                "lease_us": _us_or_none(lease_seconds)})
            if row is None:
                self._refuse(conn, job_id, worker, attempt)
            return Job.from_row(row)

    def complete(self, job_id: int, worker: str, attempt: int,
                 result_json: str | None = None) -> Job:
        """Mark a held job completed, storing its result."""
        with self._one_write() as conn:
            return _or_raise(self._complete_one(conn, self.clock(), job_id, worker, attempt,
                                                result_json))

    def _one_write(self) -> Any:
        """The connection of a single complete: in autocommit where its one statement
        closes the attempt too (``Dialect.one_statement``), else a transaction."""
        if self._complete_closes_attempt:
            return self.dialect.one_statement(self._write)
        return self._write.begin()

    def complete_many(self, worker: str, items: Sequence[tuple[int, int, str | None]],
                      ) -> list[Done | QueuelogError]:
        """Complete many held jobs (id, attempt, result JSON; ids distinct) in one
        transaction, each fenced on its own: a refused item changes nothing and is answered
        by its error; a completed one by its id, type and status (``Done``: SQLite made
        every column of each returned row inside the lock, and each a ``Job`` after it).

        One UPDATE joins the items, one JSON text, to their rows (SQLite ``json_each``,
        PostgreSQL ``jsonb_array_elements``: dialect.py) and returns the rows it completed;
        only the refused items are read again, to say why (measured: an executemany of the
        fenced UPDATE and a read of every item cost a third of a 100-job batch lifecycle's
        store time).
        """
        if not items:
            return []
        # Where its one UPDATE closes the attempts too (PostgreSQL), the write is that
        # statement alone, a transaction by itself: in autocommit, as a single complete's
        # (no BEGIN and COMMIT round trips); the refused items' read is no write.
        whole = self.dialect.complete_rows_close_attempts
        with self.dialect.one_statement(self._write) if whole else self._write.begin() as conn:
            now = self.clock()
            rows = {r.id: r for r in self._complete_rows.rows(conn, {
                "now": now, "wkr": worker, "slot_types": sorted(self.slot_types),
                **self.dialect.complete_params(items)})}
            refused = [job_id for job_id, _, _ in items if job_id not in rows]
            now_rows = ({r.id: r for r in self._by_ids.rows(conn, {"ids": refused})}
                        if refused else {})
            done: list[Any] = []  # per item: its completed row, or why it was refused
            ended = []
            for job_id, attempt, _ in items:
                row = rows.get(job_id)
                if row is not None:
                    done.append(row)
                    ended.append((job_id, attempt, None))
                else:
                    done.append(_refusal(now_rows.get(job_id), job_id, worker, attempt))
            if ended:
                if not self.dialect.complete_rows_close_attempts:  # one statement for all
                    self._close_attempts.run(conn, {"now": now,
                                                    "outcome": Outcome.COMPLETED.value,
                                                    **self.dialect.complete_params(ended)})
                self.on_jobs_written()
                self._freed(conn, [r.type for r in done if not isinstance(r, QueuelogError)],
                            told=self.dialect.complete_rows_close_attempts)
        return [r if isinstance(r, QueuelogError) else Done.from_row(r) for r in done]

    def _complete_one(self, conn: Connection, now: int, job_id: int, worker: str,
                      attempt: int, result_json: str | None) -> Job | QueuelogError:
        row = self._complete.first(conn, {"jid": job_id, "att": attempt, "wkr": worker,
                                          "now": now, "res": result_json,
                                          "slot_types": sorted(self.slot_types)})
        if row is None:
            return self._refusal(conn, job_id, worker, attempt)
        if not self._complete_closes_attempt:
            self._attempt_end.run(conn, {"jid": job_id, "att": attempt, "now": now,
                                         "outcome": Outcome.COMPLETED.value, "error": None})
        self.on_jobs_written()
        job = Job.from_row(row)
        self._freed(conn, [job.type], told=self._complete_closes_attempt)
        return job

    def fail(self, job_id: int, worker: str, attempt: int, error: str, *,
             retry: bool = True, retry_in: float | None = None,
             clean: Callable[[str], str] | None = None) -> Job:
        """Record a failed attempt: back to pending after backoff, or failed for good.
        ``clean`` (the sanitizer) is applied to ``error`` once the attempt is fenced."""
        with self._write.begin() as conn:
            now = self.clock()
            job = self._end_attempt(conn, job_id, attempt, now, Outcome.FAILED, error,
                                    retry=retry, retry_in=retry_in, worker=worker,
                                    clean=clean)
            self.on_jobs_written()
            return _or_raise(job if job is not None else
                             self._refusal(conn, job_id, worker, attempt))

    def fail_many(self, worker: str,
                  items: Sequence[tuple[int, int, str, bool, float | None]],
                  clean: Callable[[str], str] | None = None) -> list[Job | QueuelogError]:
        """Fail many held attempts (id, attempt, error, retry, retry_in) in one
        transaction, each fenced on its own, as ``complete_many``; ``clean`` as ``fail``."""
        out: list[Job | QueuelogError] = []
        with self._write.begin() as conn:
            now = self.clock()
            for job_id, attempt, error, retry, retry_in in items:
                job = self._end_attempt(conn, job_id, attempt, now, Outcome.FAILED, error,
                                        retry=retry, retry_in=retry_in, worker=worker,
                                        clean=clean)
                out.append(job if job is not None else
                           self._refusal(conn, job_id, worker, attempt))
        self.on_jobs_written()
        return out

    def cancel(self, job_id: int, scope: Scope = ALL, actor: str | None = None) -> Job:
        """Cancel a pending job (a producer only its own); audited when ``actor`` is given."""
        with self._write.begin() as conn:
            now = self.clock()
            cond = [jobs.c.id == job_id, status_is(Status.PENDING), *scope_conditions(scope)]
            row = conn.execute(update(jobs).where(*cond).values(
                status=Status.CANCELLED.value, finished_at=now, updated_at=now)
                .returning(*jobs.c)).first()
            if row is None:
                get_row(conn, job_id, scope)  # 404 when missing or not visible
                raise WrongState("Only a pending job can be cancelled.")
            if actor is not None:
                record(conn, now, actor, "job.cancel", str(job_id))
            self.on_jobs_written()
            return Job.from_row(row)

    def retry(self, job_id: int, actor: str | None = None) -> Job:
        """Put a failed or cancelled job back to pending with fresh retries (admin)."""
        with self._write.begin() as conn:
            now = self.clock()
            row = conn.execute(update(jobs).where(
                jobs.c.id == job_id,
                jobs.c.status.in_([Status.FAILED.value, Status.CANCELLED.value]))
                .values(status=Status.PENDING.value, retry_count=0, run_at=now,
                        lease_expires_at=None, finished_at=None, updated_at=now)
                .returning(*jobs.c)).first()
            if row is None:
                get_row(conn, job_id, ALL)
                raise WrongState("Only a failed or cancelled job can be retried.")
            if actor is not None:
                record(conn, now, actor, "job.retry", str(job_id))
            self.dialect.notify(conn)
            return Job.from_row(row)

    def purge(self, older_than_us: int, statuses: Sequence[Status] = FINISHED,
              batch: int = PURGE_BATCH, max_batches: int | None = None,
              actor: str | None = None, audit_empty: bool = False) -> int:
        """Delete finished jobs (and their history) finished before the cutoff, in batches.

        With an ``actor`` the purge is audited (``jobs.purge``, one event counting every
        batch); ``audit_empty`` records it even when nothing was deleted.
        """
        wanted = [s.value for s in statuses if s in FINISHED]
        tally = Tally(actor, "jobs.purge", None,
                      {"older_than_seconds": older_than_us // 1_000_000, "status": wanted})
        total = batches = 0
        while wanted and (max_batches is None or batches < max_batches):
            batches += 1
            with self._write.begin() as conn:
                cutoff = self.clock() - older_than_us
                # Locked (PostgreSQL) so an admin retry racing the purge cannot have
                # its job, now pending again, deleted under it; SQLite's write lock
                # already serializes the two.
                ids = conn.execute(self._purge_ids.where(
                    jobs.c.status.in_(wanted), jobs.c.finished_at < cutoff)
                    .limit(batch)).scalars().all()
                if ids:
                    conn.execute(delete(job_attempts).where(job_attempts.c.job_id.in_(ids)))
                    conn.execute(delete(jobs).where(jobs.c.id.in_(ids)))
                last = len(ids) < batch or (max_batches is not None and batches >= max_batches)
                tally.add(conn, cutoff + older_than_us, len(ids), force=audit_empty and last)
            total += len(ids)
            if len(ids) < batch:
                break
        return total

    # -- helpers -----------------------------------------------------------------
    def _refuse(self, conn: Connection, job_id: int, worker: str, attempt: int) -> None:
        """Explain why a worker call matched no row, as the right domain error."""
        raise self._refusal(conn, job_id, worker, attempt)

    def _refusal(self, conn: Connection, job_id: int, worker: str,
                 attempt: int) -> QueuelogError:
        """Why a worker call matched no row, as the right domain error (not raised)."""
        return _refusal(self._by_id.first(conn, {"jid": job_id}), job_id, worker,
                        attempt)

    def _expire_leases(self, conn: Connection, now: int, expired: Sequence[Any]) -> None:
        """Take back the ``expired`` leases, (id, attempt) rows of ``_expired`` (each ended
        attempt notifies as ``_end_attempt`` does)."""
        for job_id, attempt in expired:
            job = self._end_attempt(conn, job_id, attempt, now, Outcome.LEASE_EXPIRED,
                                    LEASE_EXPIRED_ERROR, retry=True, retry_in=None, worker=None)
            if job is not None:
                self.on_lease_expired(job.type)

    def _end_attempt(self, conn: Connection, job_id: int, attempt: int, now: int,
                     outcome: Outcome, error: str, *, retry: bool, retry_in: float | None,
                     worker: str | None, clean: Callable[[str], str] | None = None,
                     ) -> Job | None:
        """End a running attempt with a failure: retry after backoff, or fail for good."""
        own = worker is not None
        params: dict[str, Any] = {"jid": job_id, "att": attempt, "wkr": worker, "now": now}
        row = self._budget[own].first(conn, params)
        if row is None:
            return None
        # Fenced: only now is the error text worth its sanitizing (a stale item costs none).
        params["error"] = error = clean(error) if clean is not None else error
        if retry and row.retry_count < row.max_retries:
            n = row.retry_count + 1
            delay = retry_in if retry_in is not None else backoff_seconds(
                n, self.backoff_base, self.backoff_cap, self.rng)
            updated = self._retry_later[own].first(
                conn, {**params, "n": n, "run_at": now + to_us(delay)})
            if updated is not None:
                self.dialect.notify(conn)  # due at its run_at: waiting polls time their look
        else:
            updated = self._fail_now[own].first(conn, params)
        if updated is None:
            # PostgreSQL: a concurrent take-back or answer changed the row after the
            # SELECT above; the UPDATE re-checked and matched nothing. Refuse, not 500.
            return None
        self._attempt_end.run(conn, {"jid": job_id, "att": attempt, "now": now,
                                     "outcome": outcome.value, "error": error})
        job = Job.from_row(updated)
        self._freed(conn, [job.type])
        return job

    def _freed(self, conn: Connection, ended_types: Sequence[str], *,
               told: bool = False) -> None:
        """An ended attempt of a concurrency-limited type frees a slot: in this transaction,
        tell every waiting claim (the one wake-up mechanism, as for a new job). ``told``:
        the statement that ended it told the other processes (PostgreSQL's complete)."""
        if self.slot_types and any(t in self.slot_types for t in ended_types):
            self.dialect.notify(conn, told=told)


def _refusal(row: Any, job_id: int, worker: str, attempt: int) -> QueuelogError:
    """Why a worker call on the job now in ``row`` (None: no such job) was refused."""
    if row is None:
        return JobNotFound(f"No job {job_id}.")
    if row.worker_id != worker:
        return NotHolder(f"Job {job_id} is not held by {worker}.")
    if row.attempt != attempt:
        return StaleAttempt(f"Attempt {attempt} is stale; the job is at attempt "
                            f"{row.attempt}.")
    return WrongState(f"Job {job_id} is {row.status}, not running.")


def _or_raise(got: Job | QueuelogError) -> Job:
    """The job, or raise the error that refused it."""
    if isinstance(got, QueuelogError):
        raise got
    return got


def _claim_params(now: int, worker: str, max_jobs: int, lease_seconds: float | None,
                  types: Sequence[str] | None) -> dict[str, Any]:
    """The claim statements' parameters."""
    params: dict[str, Any] = {"now": now, "wkr": worker, "n": max_jobs,
                              "lease_us": _us_or_none(lease_seconds)}
    if types is not None and len(types) == 1:
        params["type1"] = types[0]
    elif types is not None:
        params["types"] = list(types)
    return params


def _kind(types: Sequence[str] | None) -> str:
    """Which of a claim's statements serves ``types``: any type, one, or several."""
    return "any" if types is None else "one" if len(types) == 1 else "many"


def _alone_guard() -> ColumnElement[bool]:
    """What lets a claim run alone, as SQL (``_claim_alone``): no lease run out, the key
    ``:th`` (NULL: none sent) still active, and no limiter row at all (a type with a limit
    in force has one; the config's limited types never get here)."""
    b = bindparam
    late = jobs.alias("late")
    # The earliest lease run out, in lease order, not "EXISTS a lease < :now": PostgreSQL
    # plans that one as a sequential scan once the statement's plan is generic (it guesses
    # a third of the running rows match, so the first is near), which reads every running
    # row when none has run out. Nor min() of every running lease: the planner took a
    # status index for it, and read each dead 'running' entry left by the claims since the
    # last vacuum. ORDER BY ... LIMIT 1 walks the partial lease index from its start and
    # stops at :now: a few entries, whatever the plan.
    first_late = (select(late.c.lease_expires_at)
                  .where(status_is(Status.RUNNING, late), late.c.lease_expires_at < b("now"))
                  .order_by(late.c.lease_expires_at).limit(1).scalar_subquery())
    return and_(first_late.is_(None),
                or_(cast(b("th"), String).is_(None), ACTIVE_KEY.exists()),
                ~select(type_limits.c.type).exists())


def _revoked() -> Claimed:
    """A claim's answer when its key is no longer active: nothing."""
    out = Claimed()
    out.revoked = True
    return out


def _us_or_none(seconds: float | None) -> int | None:
    """Seconds as microseconds, keeping None (meaning: the configured default)."""
    return None if seconds is None else to_us(seconds)
