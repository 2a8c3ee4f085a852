"""Reading jobs: one job with its history, newest-first keyset pages.

Who may see what is decided here too (``Scope``), so every read and every write that
must answer 404 for an invisible job uses the same conditions.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from sqlalchemy import Connection, bindparam, literal_column, select, text

from queuelog.model.problems import JobNotFound
from queuelog.model.jobs import Attempt, Job, Status
from queuelog.server.store.part import Part
from queuelog.server.store.tables import job_attempts, job_dependencies, jobs

_ATTEMPTS = (select(job_attempts).where(job_attempts.c.job_id == bindparam("jid"))
             .order_by(job_attempts.c.attempt))


def status_is(status: Status, table: Any = jobs) -> Any:
    """``status = '<literal>'``: a literal, so SQLite can match the partial indexes."""
    return table.c.status == literal_column(f"'{status.value}'")


# No index starts with the idempotency key (the unique one is (producer, key)), so a plain
# "WHERE idempotency_key = ?" reads every job. This walks the distinct producers instead,
# one seek each on (producer, id) (a loose index scan, portable SQL), and finds the key
# under each producer with the unique index: the cost grows with producers, not jobs.
# CROSS JOIN: SQLite keeps that join order (PostgreSQL reads it as a plain join). With a
# free order SQLite built a temporary index of every job instead (its statistics count
# the jobs without a key as one value), a cost that grows with the table.
HOLDING_KEY = text("""
WITH RECURSIVE p(name) AS (
    SELECT MIN(producer) FROM jobs
    UNION ALL
    SELECT (SELECT MIN(producer) FROM jobs WHERE producer > p.name) FROM p
    WHERE p.name IS NOT NULL)
SELECT j.id FROM p CROSS JOIN jobs j WHERE j.producer = p.name AND j.idempotency_key = :key
""")


MAX_DEPENDENTS = 100  # dependents listed on one job (then ``dependents_truncated``)
_DEPENDENTS = (select(job_dependencies.c.child_id)
               .where(job_dependencies.c.parent_id == bindparam("jid"))
               .order_by(job_dependencies.c.child_id).limit(MAX_DEPENDENTS + 1))


@dataclasses.dataclass(frozen=True)
class Scope:
    """Whose jobs a reader may see: a producer its own, a worker those it held, else all."""

    producer: str | None = None
    worker: str | None = None


ALL = Scope()


@dataclasses.dataclass(frozen=True)
class Page:
    """One page of a newest-first listing."""

    jobs: list[Job]
    older: int | None   # id to pass as ``before`` for the next (older) page
    newer: int | None   # id to pass as ``after`` for the previous (newer) page


def scope_conditions(scope: Scope) -> list[Any]:
    """WHERE conditions limiting jobs to those the scope may see."""
    cond: list[Any] = []
    if scope.producer is not None:
        cond.append(jobs.c.producer == scope.producer)
    if scope.worker is not None:
        # Every claim writes an attempt row, so "holds or held" is "has an attempt";
        # the (worker_id, job_id) index drives it instead of a walk over all jobs.
        cond.append(jobs.c.id.in_(select(job_attempts.c.job_id)
                                  .where(job_attempts.c.worker_id == scope.worker)))
    return cond


def get_row(conn: Connection, job_id: int, scope: Scope) -> Any:
    """The job's row if the scope may see it; JobNotFound otherwise."""
    row = conn.execute(select(jobs).where(jobs.c.id == job_id, *scope_conditions(scope))).first()
    if row is None:
        raise JobNotFound(f"No job {job_id}.")
    return row


class Reads(Part):
    """Read verbs over jobs."""


    def get(self, job_id: int, scope: Scope = ALL) -> Job:
        """One job with its attempt history; JobNotFound when missing or not visible."""
        with self._read.connect() as conn:
            row = get_row(conn, job_id, scope)
            attempts = conn.execute(_ATTEMPTS, {"jid": job_id}).all()
            job = Job.from_row(row).with_attempts(
                tuple(Attempt.from_row(a._mapping) for a in attempts))
            shown, more = (conn.execute(_DEPENDENTS, {"jid": job_id}).scalars().all()
                           if row.has_dependents else [], False)
            if len(shown) > MAX_DEPENDENTS:
                shown, more = shown[:MAX_DEPENDENTS], True
            return dataclasses.replace(job, dependents=tuple(shown), dependents_truncated=more)

    def statuses(self, ids: Sequence[int],
                 scope: Scope = ALL) -> dict[int, tuple[str, Status]]:
        """The type and status of each of ``ids`` the scope may see, by id, in one read; a
        job missing (purged) or not visible is left out."""
        if not ids:
            return {}  # a job with no parents nor dependents: no connection taken
        query = select(jobs.c.id, jobs.c.type, jobs.c.status).where(
            jobs.c.id.in_(sorted(set(ids))), *scope_conditions(scope))
        with self._read.connect() as conn:
            return {r.id: (r.type, Status(r.status)) for r in conn.execute(query)}

    def list_jobs(self, *, scope: Scope = ALL, status: Status | None = None,
                  type: str | None = None, priority: int | None = None, limit: int = 50,
                  before: int | None = None, after: int | None = None,
                  scheduled: bool = False, producer: str | None = None,
                  worker: str | None = None, match_id: int | None = None,
                  match_key: str | None = None, schedule: str | None = None) -> Page:
        """A newest-first page; ``before``/``after`` are keyset cursors (job ids).

        ``scheduled`` keeps only pending jobs whose ``run_at`` is still in the future;
        ``match_id`` and ``match_key`` (a search) keep the job with that id OR that
        idempotency key (of any producer), whichever are given.
        """
        cond = scope_conditions(scope)
        if status is not None:
            cond.append(jobs.c.status == status.value)
        if scheduled:
            cond += [status_is(Status.PENDING), jobs.c.run_at > self.clock()]
        if type is not None:
            cond.append(jobs.c.type == type)
        if priority is not None:
            cond.append(jobs.c.priority == priority)
        if producer is not None:
            cond.append(jobs.c.producer == producer)
        if worker is not None:
            cond.append(jobs.c.worker_id == worker)
        if match_id is not None or match_key is not None:
            found = [] if match_id is None else [match_id]
            if match_key is not None:
                found += self._holding_key(match_key)
            cond.append(jobs.c.id.in_(found))
        if schedule is not None:
            cond.append(jobs.c.schedule == schedule)
        query = select(jobs).where(*cond).limit(limit + 1)
        if after is not None:  # walking towards newer jobs: ascending, then reversed
            query = query.where(jobs.c.id > after).order_by(jobs.c.id)
        else:
            if before is not None:
                query = query.where(jobs.c.id < before)
            query = query.order_by(jobs.c.id.desc())
        with self._read.connect() as conn:
            rows = conn.execute(query).all()
        more = len(rows) > limit
        found = [Job.from_row(r) for r in rows[:limit]]
        if after is not None:
            found.reverse()
            return Page(found, found[-1].id if found else None,
                        found[0].id if more and found else None)
        return Page(found, found[-1].id if more else None,
                    found[0].id if before is not None and found else None)

    def _holding_key(self, key: str) -> list[int]:
        """The ids of the jobs whose idempotency key is ``key``, of any producer."""
        with self._read.connect() as conn:
            return list(conn.execute(HOLDING_KEY, {"key": key}).scalars())

    def ping(self) -> None:
        """Raise unless the database answers."""
        with self._read.connect() as conn:
            conn.execute(text("SELECT 1"))
