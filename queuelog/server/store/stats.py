"""Dashboard reads: counts per status and the per-minute outcome series.

Both stay cheap at any table size. Jobs per status come from the trigger-kept counts
(``counts.py``: exact, and as cheap at 10M jobs as at 1k); the dashboard still shows them
capped (``COUNT_CAP``, "10,000+"). "Scheduled" depends on the clock, so it stays an index
range of at most cap+1 entries. The chart reads the hour's rows of the per-minute rollup
(``minutes.py``, migration 0015): it costs the types and workers that ran, not the hour's
attempts, and not history.

Also the /metrics gauges (``gauges``) and purge's ``--dry-run`` count; every gauge reads
the counts or index ranges that do not grow with history.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Sequence

from sqlalchemy import bindparam, func, literal_column, select

from queuelog.model.jobs import FINISHED, Priority, Status
from queuelog.server.store import minutes
from queuelog.server.store.part import Part
from queuelog.server.store.tables import jobs, paused_types
from queuelog.server.store.counts import fold, job_counts_of, keeps_deltas
from queuelog.server.store.reads import status_is


@dataclasses.dataclass(frozen=True)
class Gauges:
    """What /metrics reads from the database at scrape time."""

    now: int                                 # epoch microseconds of the snapshot
    counts: list[tuple[tuple[str, str], int]]  # ((status, type), jobs)
    oldest_due: dict[str, int]               # type -> run_at of its oldest due pending job
    expired: dict[str, int]                  # type -> running jobs past their lease
    paused: set[str]


@dataclasses.dataclass(frozen=True)
class Series:
    """Attempts finished per minute, oldest minute first; the last is the current minute."""

    start: int              # epoch microseconds of the first bucket
    bucket: int             # bucket width in microseconds
    completed: list[int]
    failed: list[int]       # failed attempts, lease expiries included


def _capped(*cond: Any) -> Any:
    # COUNT over a LIMITed subquery: the database stops reading at cap + 1 rows.
    sub = (select(literal_column("1")).select_from(jobs).where(*cond)
           .limit(bindparam("cap")).subquery())
    return select(func.count()).select_from(sub).scalar_subquery()


@functools.lru_cache(maxsize=1)
def _scheduled_statement() -> Any:
    """Capped counts of scheduled jobs, one per priority, in one SELECT."""
    # Scheduled = pending with a future run_at. One range per priority over the claim
    # index (priority, run_at), so a million due jobs are never walked to find them.
    pending = jobs.c.status == literal_column(f"'{Status.PENDING.value}'")
    cols = [_capped(pending, jobs.c.priority == literal_column(str(int(p))),
                     jobs.c.run_at > bindparam("now")).label(f"scheduled_{p.label}")
             for p in Priority]
    return select(*cols)


@functools.lru_cache(maxsize=8)
def _oldest_due_statement(n_types: int) -> Any:
    """The oldest due run_at of each type, one scalar subquery per type, in one SELECT.

    Each is one seek in the (type, run_at) partial index of pending jobs: its first entry
    of the type with run_at <= now is the answer, however long the queue.
    """
    return select(*[select(jobs.c.run_at)
                    .where(status_is(Status.PENDING), jobs.c.type == bindparam(f"t{i}"),
                           jobs.c.run_at <= bindparam("now"))
                    .order_by(jobs.c.run_at).limit(1).scalar_subquery().label(f"t{i}")
                    for i in range(n_types)])


@functools.lru_cache(maxsize=1)
def _purgeable_statement() -> Any:
    return (select(func.count()).select_from(jobs)
            .where(jobs.c.status.in_(bindparam("wanted", expanding=True)),
                   jobs.c.finished_at < bindparam("cutoff")))


class Stats(Part):
    """Read-only dashboard queries."""


    def job_counts(self) -> dict[tuple[str, str], int]:
        """Exact jobs per (status, type); pairs with no job are left out."""
        return job_counts_of(self._read, self._write)

    def fold_counts(self) -> bool:
        """Fold the count deltas into the totals now; False where none are kept (SQLite)."""
        return fold(self._write)

    @property
    def keeps_count_deltas(self) -> bool:
        """True where the counts' deltas grow until folded (PostgreSQL)."""
        return keeps_deltas(self.engine)

    def gauges(self, types: Sequence[str]) -> Gauges:
        """The /metrics gauges, from one connection; each read walks an index."""
        types = list(types)
        now = self.clock()
        counts = sorted(self.job_counts().items())
        with self._read.connect() as conn:
            oldest: dict[str, int] = {}
            if types:
                row = conn.execute(_oldest_due_statement(len(types)), {
                    "now": now, **{f"t{i}": t for i, t in enumerate(types)}}).one()
                oldest = {t: int(v) for t, v in zip(types, row) if v is not None}
            expired = {t: int(n) for t, n in conn.execute(
                self.backend.expired_by_type(), {"now": now})}
            paused = set(conn.execute(select(paused_types.c.type)).scalars())
        return Gauges(now, counts, oldest, expired, paused)

    def count_purgeable(self, older_than_us: int, statuses: Sequence[Status]) -> int:
        """How many jobs ``purge`` with these arguments would delete now (``--dry-run``)."""
        wanted = [s.value for s in statuses if s in FINISHED]
        if not wanted:
            return 0
        with self._read.connect() as conn:  # the (status, finished_at) index, as purge
            return int(conn.execute(_purgeable_statement(), {
                "wanted": wanted, "cutoff": self.clock() - older_than_us}).scalar_one())

    def count_by_status(self, cap: int) -> dict[str, int]:
        """Jobs per status plus ``scheduled``, each shown only up to ``cap`` + 1."""
        with self._read.connect() as conn:
            row = conn.execute(_scheduled_statement(), {"cap": cap + 1,
                                                        "now": self.clock()}).one()
        out = {s.value: 0 for s in Status}
        for (status, _type), n in self.job_counts().items():
            out[status] = out.get(status, 0) + n
        out = {k: min(n, cap + 1) for k, n in out.items()}
        scheduled = sum(int(row._mapping[f"scheduled_{p.label}"]) for p in Priority)
        out["scheduled"] = min(scheduled, cap + 1)
        return out

    def outcomes_per_minute(self, count: int = minutes.HOUR_MINUTES) -> Series:
        """Completed and failed attempts per minute over the last ``count`` minutes (the
        current one last; the rollup keeps two hours, so older minutes read 0)."""
        start, end = minutes.window(self.clock(), count)
        with self._read.connect() as conn:
            ended = minutes.per_minute(conn, start, end)
        done = [ended.get(start + i * minutes.MINUTE_US, (0, 0)) for i in range(count)]
        return Series(start, minutes.MINUTE_US, [c for c, _ in done], [f for _, f in done])
