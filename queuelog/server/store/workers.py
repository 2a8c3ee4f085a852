"""Who is working (``GET /workers``, ``/ui/workers``): per worker key, its jobs and its hour.

Three reads, none of which grows with the table's history:
- the running jobs, from the partial index of running jobs (``ix_jobs_lease``): as many
  rows as jobs run now;
- the last claim of every worker name, two seeks per name in ``(worker_id, started_at)``
  (``ix_attempts_worker_started``, migration 0009): it costs the names that ever claimed,
  not the claims (a day of attempts is 24x the last hour's at a steady rate);
- completed and failed attempts per worker in the last hour, from the per-minute rollup
  (``minutes.py``, migration 0015): its rows, not the hour's attempts.
"""
from __future__ import annotations

import dataclasses

from sqlalchemy import select, text

from queuelog.model.jobs import Status
from queuelog.server.store import minutes
from queuelog.server.store.part import Part
from queuelog.server.store.reads import status_is
from queuelog.server.store.tables import jobs

DAY_US = 86_400_000_000


@dataclasses.dataclass(frozen=True)
class RunningJob:
    """A job a worker holds now."""

    id: int
    type: str
    attempt: int
    claimed_at: int
    lease_expires_at: int


@dataclasses.dataclass(frozen=True)
class WorkerSummary:
    """One worker key: what it holds, when it last claimed, its last hour."""

    name: str
    running: list[RunningJob]
    last_claim_at: int | None
    completed_last_hour: int
    failed_last_hour: int

    def expired(self, now: int) -> list[RunningJob]:
        """Its jobs whose lease has run out (the worker is stuck or gone)."""
        return [j for j in self.running if j.lease_expires_at < now]


_RUNNING = (select(jobs.c.worker_id, jobs.c.id, jobs.c.type, jobs.c.attempt, jobs.c.claimed_at,
                   jobs.c.lease_expires_at)
            .where(status_is(Status.RUNNING)).order_by(jobs.c.claimed_at, jobs.c.id))
# A loose index scan (portable SQL, as reads.HOLDING_KEY): hop from one worker name to the
# next, then the newest start under each name; the 24 hours are applied to the few rows.
_LAST_CLAIMS = text("""
WITH RECURSIVE w(name) AS (
    SELECT MIN(worker_id) FROM job_attempts
    UNION ALL
    SELECT (SELECT MIN(worker_id) FROM job_attempts WHERE worker_id > w.name) FROM w
    WHERE w.name IS NOT NULL)
SELECT name, (SELECT MAX(started_at) FROM job_attempts WHERE worker_id = w.name) FROM w
WHERE name IS NOT NULL
""")


class Workers(Part):
    """The workers read."""


    def workers(self) -> list[WorkerSummary]:
        """Every worker that holds a job or claimed in the last 24 hours, by name."""
        now = self.clock()
        running: dict[str, list[RunningJob]] = {}
        with self._read.connect() as conn:
            for r in conn.execute(_RUNNING):
                running.setdefault(r.worker_id, []).append(RunningJob(
                    r.id, r.type, r.attempt, r.claimed_at, r.lease_expires_at))
            last = {w: int(t) for w, t in conn.execute(_LAST_CLAIMS) if t >= now - DAY_US}
            hour = minutes.per_worker(conn, now)
        names = sorted(set(running) | set(last))
        return [WorkerSummary(name, running.get(name, []), _latest(last.get(name), running.get(name)),
                              *hour.get(name, (0, 0)))
                for name in names]


def _latest(last: int | None, held: list[RunningJob] | None) -> int | None:
    # A job held since before the 24 hours still dates its claim.
    times = [t for t in [last, *(j.claimed_at for j in held or [])] if t is not None]
    return max(times) if times else None
