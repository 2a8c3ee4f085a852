"""How long each type's jobs ran and waited in the last hour: p50 and p95, from the database.

Read from the attempts, not from a process's metrics, so every process and app server shows
the same figures. The cost is bounded whatever the table holds: one walk of
``ix_attempts_finished`` over the last hour (newest first, at most ``SAMPLE`` attempts), a
primary-key lookup of each attempt's job, and a sort per type inside the database, which
answers four rows per type.

- **Run**: an attempt's ``finished_at - started_at``, for the attempts that completed or
  failed (a lease run out or a cancel measures the lease or the person, not the job).
- **Wait**: ``claimed_at - run_at`` of a job's last claim, for the jobs whose last attempt
  ended in the window and which finished (an attempt retried later has its job's
  ``run_at`` moved on by the backoff, so its own wait is no longer in the row).

Percentiles are nearest-rank (the value at rank ceil(p/100 x n)): a real observed time.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import and_, bindparam, case, func, literal, or_, select, union_all

from queuelog.model.jobs import FINISHED, Outcome
from queuelog.server.store.part import Part
from queuelog.server.store.tables import job_attempts, jobs

HOUR_US = 3_600_000_000
SAMPLE = 20_000  # the newest attempts of the hour read at most: a bound on the page's cost
PERCENTILES = (50, 95)  # the typical job and its slow tail; p99 of a quiet type is noise

_a = job_attempts
_window = (select(jobs.c.type, (_a.c.finished_at - _a.c.started_at).label("run"),
                  case((and_(_a.c.attempt == jobs.c.attempt,
                             jobs.c.status.in_([s.value for s in FINISHED])),
                        jobs.c.claimed_at - jobs.c.run_at)).label("wait"))
           .select_from(_a.join(jobs, jobs.c.id == _a.c.job_id))
           .where(_a.c.finished_at >= bindparam("since"),
                  _a.c.outcome.in_([Outcome.COMPLETED.value, Outcome.FAILED.value]))
           .order_by(_a.c.finished_at.desc()).limit(SAMPLE).cte("ended"))


def _ranked(column: str) -> Any:
    """Each type's value of ``column`` at the ranks of ``PERCENTILES``: (column, type, rank,
    n, value)."""
    value = _window.c[column]
    ranked = (select(_window.c.type, value.label("v"),
                     func.row_number().over(partition_by=_window.c.type,
                                            order_by=value).label("rn"),
                     func.count().over(partition_by=_window.c.type).label("n"))
              .where(value.is_not(None)).subquery())
    # ceil(p x n / 100) in integers, the same on both backends.
    at = [ranked.c.rn == (ranked.c.n * p + 99) // 100 for p in PERCENTILES]
    return select(literal(column).label("kind"), ranked.c.type, ranked.c.rn, ranked.c.n,
                  ranked.c.v).where(or_(*at))


# One statement, the hour's attempts read once (PostgreSQL materializes a CTE used twice).
_TIMINGS = union_all(_ranked("run"), _ranked("wait"))


@dataclasses.dataclass(frozen=True)
class Timing:
    """One type's run and wait percentiles over the last hour, in microseconds (None: no
    attempt to measure)."""

    run: dict[int, int] = dataclasses.field(default_factory=dict)   # percentile -> us
    wait: dict[int, int] = dataclasses.field(default_factory=dict)


class Timings(Part):
    """The last hour's run and wait percentiles per type."""

    def timings(self) -> dict[str, Timing]:
        """Per type with an attempt ended in the last hour: p50 and p95 of run and wait."""
        since = self.clock() - HOUR_US
        with self._read.connect() as conn:
            rows = conn.execute(_TIMINGS, {"since": since}).all()
        out: dict[str, Timing] = {}
        for kind, job_type, rank, n, value in rows:
            got = getattr(out.setdefault(job_type, Timing()), kind)
            for p in PERCENTILES:
                if rank == (n * p + 99) // 100:
                    got[p] = max(0, int(value))
        return out
