"""How long each type's jobs ran and waited in the last hour: p50 and p95, from the database.

Read from the attempts, not from a process's metrics, so every process and app server shows
the same figures. "The last hour" is the chart's 60 whole minutes (``minutes.window``).

The cost is bounded whatever the hour held: about ``SAMPLE`` attempts are read at most (a
block's share is rounded up), spread over the hour. An hour of up to ``SAMPLE`` ended
attempts (the per-minute rollup says how many, ``minutes.py``) is read whole, so its
percentiles are exact; a busier one is sampled in proportion, each block of
``BLOCK_MINUTES`` giving its newest ``ceil(SAMPLE x its attempts / the hour's)`` (one walk
of ``ix_attempts_finished`` per block), so a burst weighs what it weighed in the hour. Each
attempt's job is read by its primary key, and the database sorts per type, answering four
rows per type.

- **Run**: an attempt's ``finished_at - started_at``, for the attempts that completed or
  failed (a lease run out or a cancel measures the lease or the person, not the job).
- **Wait**: ``claimed_at - run_at`` of a job's last claim, for the jobs whose last attempt
  ended in the window and which finished (an attempt retried later has its job's
  ``run_at`` moved on by the backoff, so its own wait is no longer in the row).

Percentiles are nearest-rank (the value at rank ceil(p/100 x n)): a real observed time.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

from sqlalchemy import and_, bindparam, case, func, literal, or_, select, union_all

from queuelog.model.jobs import FINISHED, Outcome
from queuelog.server.store import minutes
from queuelog.server.store.part import Part
from queuelog.server.store.tables import job_attempts, jobs

# Attempts read at most (about): a bound on the page's cost. Of 500, the p95 is off by
# about a percentile (a rank's standard error: 5 of the 25 above it).
SAMPLE = 500
# The sample's strata: a range of the index walked per block of minutes. Fewer, longer
# blocks would weigh a burst less exactly; more would cost PostgreSQL the planning of a
# subquery each (61 of them took 25 ms a page).
BLOCK_MINUTES = 5
PERCENTILES = (50, 95)  # the typical job and its slow tail; p99 of a quiet type is noise

_a = job_attempts
_ENDED = (_a.c.outcome.in_([Outcome.COMPLETED.value, Outcome.FAILED.value]),)


def _ended(n: int) -> Any:
    """The ``n``-th range of a statement as a subquery of (type, run, wait): the newest
    ``lim{n}`` measured attempts that ended in [``lo{n}``, ``hi{n}``)."""
    return (select(jobs.c.type, (_a.c.finished_at - _a.c.started_at).label("run"),
                   case((and_(_a.c.attempt == jobs.c.attempt,
                              jobs.c.status.in_([s.value for s in FINISHED])),
                         jobs.c.claimed_at - jobs.c.run_at)).label("wait"))
            .select_from(_a.join(jobs, jobs.c.id == _a.c.job_id))
            .where(_a.c.finished_at >= bindparam(f"lo{n}"),
                   _a.c.finished_at < bindparam(f"hi{n}"), *_ENDED)
            .order_by(_a.c.finished_at.desc()).limit(bindparam(f"lim{n}")).subquery())


def _ranked(window: Any, column: str) -> Any:
    """Each type's value of ``column`` at the ranks of ``PERCENTILES``: (column, type, rank,
    n, value)."""
    value = window.c[column]
    ranked = (select(window.c.type, value.label("v"),
                     func.row_number().over(partition_by=window.c.type,
                                            order_by=value).label("rn"),
                     func.count().over(partition_by=window.c.type).label("n"))
              .where(value.is_not(None)).subquery())
    # ceil(p x n / 100) in integers, the same on both backends.
    at = [ranked.c.rn == (ranked.c.n * p + 99) // 100 for p in PERCENTILES]
    return select(literal(column).label("kind"), ranked.c.type, ranked.c.rn, ranked.c.n,
                  ranked.c.v).where(or_(*at))


@functools.lru_cache(maxsize=16)
def _statement(ranges: int) -> Any:
    """The percentiles of ``ranges`` sampled ranges, in one statement: their attempts read
    once (PostgreSQL materializes a CTE used twice)."""
    parts = [_ended(n) for n in range(ranges)]
    window = (union_all(*(select(*p.c) for p in parts)) if ranges > 1
              else select(*parts[0].c)).cte("ended")
    return union_all(_ranked(window, "run"), _ranked(window, "wait"))


def sample(per_minute: dict[int, int], start: int, end: int,
           size: int = SAMPLE) -> list[tuple[int, int, int]]:
    """The ranges to read, as (from, to, at most): the whole window when the hour's
    ``per_minute`` counts add up to ``size`` or fewer, else each ``BLOCK_MINUTES`` block
    with attempts, its share of ``size`` rounded up."""
    total = sum(per_minute.values())
    if total <= size:
        return [(start, end, size)]
    block = BLOCK_MINUTES * minutes.MINUTE_US
    blocks: dict[int, int] = {}
    for at, n in per_minute.items():
        first = start + (at - start) // block * block
        blocks[first] = blocks.get(first, 0) + n
    return [(first, min(first + block, end), -(-size * n // total))
            for first, n in sorted(blocks.items()) if n]


@dataclasses.dataclass(frozen=True)
class Timing:
    """One type's run and wait percentiles over the last hour, in microseconds (None: no
    attempt to measure)."""

    run: dict[int, int] = dataclasses.field(default_factory=dict)   # percentile -> us
    wait: dict[int, int] = dataclasses.field(default_factory=dict)


class Timings(Part):
    """The last hour's run and wait percentiles per type."""

    def timings(self, size: int = SAMPLE) -> dict[str, Timing]:
        """Per type with an attempt ended in the last hour: p50 and p95 of run and wait,
        over at most ``size`` of the hour's attempts."""
        start, end = minutes.window(self.clock())
        with self._read.connect() as conn:
            counts = {at: done + failed for at, (done, failed)
                      in minutes.per_minute(conn, start, end).items()}
            ranges = sample(counts, start, end, size)
            params = {f"{key}{n}": value for n, bounds in enumerate(ranges)
                      for key, value in zip(("lo", "hi", "lim"), bounds)}
            rows = conn.execute(_statement(len(ranges)), params).all()
        out: dict[str, Timing] = {}
        for kind, job_type, rank, n, value in rows:
            got = getattr(out.setdefault(job_type, Timing()), kind)
            for p in PERCENTILES:
                if rank == (n * p + 99) // 100:
                    got[p] = max(0, int(value))
        return out
