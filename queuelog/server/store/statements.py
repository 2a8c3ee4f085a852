"""The job verbs' Core statements both backends share, built once per store.

A backend takes them as they are or makes its own form of one (backends/): PostgreSQL's
claim locks its walk and opens the attempts in the same statement; SQLite's pins its walk
to an index. Lease lengths are the store's configuration, so the statements are built per
store, not at import.
"""
from __future__ import annotations

from typing import Any, Mapping

from sqlalchemy import (BigInteger, ColumnElement, String, and_, bindparam, case, cast, func,
                        literal, or_, select, update)

from queuelog.model.jobs import FINISHED, Status
from queuelog.server.store import claim_policy
from queuelog.server.store.accounts import ACTIVE_KEY
from queuelog.server.store.engine import to_us
from queuelog.server.store.reads import status_is
from queuelog.server.store.tables import job_attempts, jobs, type_limits

EXPIRE_BATCH = 50  # leases taken back per claim: one claim stays within 50 ms on 2 cores
b = bindparam


def lease_until(lease_seconds: float, type_leases: Mapping[str, float]) -> Any:
    """The lease a claim sets: the caller's, else the job's type's, else the
    default. Decided in SQL, because only the UPDATE knows which job it got."""
    default_us = literal(to_us(lease_seconds), BigInteger)
    by_type = {t: literal(to_us(s), BigInteger) for t, s in type_leases.items()}
    return b("now", type_=BigInteger) + func.coalesce(
        b("lease_us", type_=BigInteger),
        case(by_type, value=jobs.c.type, else_=default_us) if by_type else default_us)


CAND = jobs.alias("cand")  # the claim's walk: not correlated with the UPDATE's own jobs
POLICY = claim_policy.eligible(CAND)
# The first :n due jobs in claim order, as the claim's walk picks them.
DUE = (select(CAND.c.id).where(status_is(Status.PENDING, CAND), CAND.c.run_at <= b("now"),
                               POLICY)
       .order_by(CAND.c.priority.desc(), CAND.c.run_at, CAND.c.id).limit(b("n")))
# By the claim's types (``kind``): one type is an equality, which walks that type's own
# index (ix_jobs_pending_type_claim), not every type's jobs ahead of it.
WALKS = {"any": DUE, "one": DUE.where(CAND.c.type == b("type1"))}
SKIP = claim_policy.not_blocked(CAND)  # a limited claim's walks skip the types at limit


def of_type(type_: Any) -> Any:
    """The due jobs of the type ``type_`` names, in claim order, with their order's columns:
    a claim of several types walks each type's own."""
    return DUE.add_columns(CAND.c.priority, CAND.c.run_at).where(CAND.c.type == type_)


def claim_update(lease: Any) -> Any:
    """The claim's UPDATE of the rows its walk picked (the caller adds which)."""
    return (update(jobs)
            .values(status=Status.RUNNING.value, attempt=jobs.c.attempt + 1,
                    worker_id=b("wkr"), claimed_at=b("now"), lease_expires_at=lease,
                    updated_at=b("now"))
            .returning(*jobs.c))


HELD = (jobs.c.id == b("jid"), status_is(Status.RUNNING), jobs.c.attempt == b("att"))
OWN = jobs.c.worker_id == b("wkr")


# The lease a running job holds now, in microseconds: the claim and each heartbeat set
# ``updated_at`` to their now and ``lease_expires_at`` to now + the lease, and nothing else
# writes either while the job runs, so their difference is the lease last chosen.
HELD_LEASE = jobs.c.lease_expires_at - jobs.c.updated_at


def heartbeat() -> Any:
    """A worker's heartbeat: the lease extended from now by ``:lease_us``, else by the
    lease the job holds (the claim's, or the last heartbeat's), fenced by holder and
    attempt; ``:progress`` (JSON text) replaces the job's, NULL keeps it."""
    lease = b("now", type_=BigInteger) + func.coalesce(b("lease_us", type_=BigInteger),
                                                       HELD_LEASE)
    return (update(jobs).where(*HELD, OWN)
            .values(lease_expires_at=lease, updated_at=b("now"),
                    progress=func.coalesce(b("progress", type_=String), jobs.c.progress))
            .returning(*jobs.c))


# Ending attempts with a failure (a worker's fail, or leases taken back): the rows with
# their retry budgets, read before the backend's one statement moves them on (and fences
# them). A worker's items are read by primary key alone, their holder checked on the rows
# (``Finishing.fail_many``): with the status and worker as conditions, PostgreSQL weighed
# their indexes by statistics and, with a new table's, walked every job the worker held.
_BUDGET = select(jobs.c.id, jobs.c.attempt, jobs.c.retry_count, jobs.c.max_retries)
BUDGETS = _BUDGET.add_columns(jobs.c.status, jobs.c.worker_id).where(
    jobs.c.id.in_(b("ids", expanding=True)))
# A running job cancelled: its open attempt ends ``cancelled`` (an ended one is left).
ATTEMPT_CANCEL = (update(job_attempts)
                  .where(job_attempts.c.job_id == b("jid"), job_attempts.c.attempt == b("att"),
                         job_attempts.c.finished_at.is_(None))
                  .values(finished_at=b("now"), outcome="cancelled"))
# A limited claim's new attempts, stamped again once its settle has seen the slots free.
RESTAMP = (update(job_attempts).values(started_at=b("later"))
           .where(job_attempts.c.job_id.in_(b("ids", expanding=True)),
                  job_attempts.c.started_at == b("now"), job_attempts.c.finished_at.is_(None)))
BY_ID = select(jobs).where(jobs.c.id == b("jid"))
BY_IDS = select(jobs).where(jobs.c.id.in_(b("ids", expanding=True)))
EXPIRED = (_BUDGET
           .where(status_is(Status.RUNNING), jobs.c.lease_expires_at < b("now"))
           .order_by(jobs.c.lease_expires_at).limit(EXPIRE_BATCH))


def cancel(*conditions: Any, running: bool = False) -> Any:
    """Blocked and pending jobs matching ``conditions`` (``running``: and running ones, a
    single cancel) cancelled at ``:now``; a running one's lease ends with it."""
    states = [Status.BLOCKED.value, Status.PENDING.value,
              *([Status.RUNNING.value] if running else [])]
    return (update(jobs).where(jobs.c.status.in_(states), *conditions)
            .values(status=Status.CANCELLED.value, finished_at=b("now"), updated_at=b("now"),
                    lease_expires_at=None)
            .returning(*jobs.c))


# The types among ``:types`` with a concurrency set at run time (PUT /types/{type}/limits,
# by any app server): a finish of one frees a slot, though this process never claimed since.
CONCURRENCY_SET = select(type_limits.c.type).where(
    type_limits.c.type.in_(b("types", expanding=True)), type_limits.c.overridden,
    type_limits.c.concurrency.is_not(None))
# A finished job a request waits for (GET /jobs/{id}?wait=): marked, unless finished.
WATCH = (update(jobs).where(jobs.c.id == b("jid"),
                            jobs.c.status.notin_([s.value for s in FINISHED]))
         .values(watched=True))


def alone_guard() -> ColumnElement[bool]:
    """What lets a claim run alone, as SQL: no lease run out, the key ``:th`` (NULL: none
    sent) still active, and no limiter row at all (a type with a limit in force has one;
    the config's limited types never get here)."""
    late = jobs.alias("late")
    # The earliest lease run out, in lease order, not "EXISTS a lease < :now": PostgreSQL
    # plans that one as a sequential scan once the statement's plan is generic, which reads
    # every running row when none has run out. ORDER BY ... LIMIT 1 walks the partial lease
    # index from its start and stops at :now: a few entries, whatever the plan.
    first_late = (select(late.c.lease_expires_at)
                  .where(status_is(Status.RUNNING, late), late.c.lease_expires_at < b("now"))
                  .order_by(late.c.lease_expires_at).limit(1).scalar_subquery())
    return and_(first_late.is_(None),
                or_(cast(b("th"), String).is_(None), ACTIVE_KEY.exists()),
                ~select(type_limits.c.type).exists())
