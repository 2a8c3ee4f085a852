"""Purge: finished jobs (and their history) deleted after their time, in bounded batches;
and the per-minute rollup's minutes past its two hours (``minutes.py``)."""
from __future__ import annotations

from typing import Sequence

from sqlalchemy import delete, exists, or_, select

from queuelog.model.jobs import FINISHED, Status
from queuelog.server.store import minutes
from queuelog.server.store.audit import Tally
from queuelog.server.store.part import Context, Part
from queuelog.server.store.tables import job_attempts, job_dependencies, jobs

PURGE_BATCH = 500   # rows per purge transaction: no table-long lock


_CHILD = jobs.alias("child")
# A finished job an unfinished job still depends on is kept (its result is that job's input).
NOT_NEEDED = or_(~jobs.c.has_dependents, ~exists(
    select(job_dependencies.c.child_id)
    .join(_CHILD, _CHILD.c.id == job_dependencies.c.child_id)
    .where(job_dependencies.c.parent_id == jobs.c.id,
           _CHILD.c.status.notin_([s.value for s in FINISHED]))))


class Purge(Part):
    """The purge of finished jobs (retention, ``queuelog purge``, the dashboard)."""

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        # Locked (PostgreSQL) so an admin retry racing the purge cannot have its job, now
        # pending again, deleted under it; SQLite's write lock serializes the two.
        self._pick = self.backend.skip_locked(select(jobs.c.id).order_by(jobs.c.finished_at))

    def purge(self, older_than_us: int, statuses: Sequence[Status] = FINISHED,
              batch: int = PURGE_BATCH, max_batches: int | None = None,
              actor: str | None = None, audit_empty: bool = False) -> int:
        """Delete finished jobs (and their history) finished before the cutoff, in batches.

        With an ``actor`` the purge is audited (``jobs.purge``, one event counting every
        batch); ``audit_empty`` records it even when nothing was deleted. The last batch's
        transaction also prunes the rollup's old minutes (no transaction of its own).
        """
        wanted = [s.value for s in statuses if s in FINISHED]
        tally = Tally(actor, "jobs.purge", None,
                      {"older_than_seconds": older_than_us // 1_000_000, "status": wanted})
        total = batches = 0
        while wanted and (max_batches is None or batches < max_batches):
            batches += 1
            with self._write.begin() as conn:
                cutoff = self.clock() - older_than_us
                ids = conn.execute(self._pick.where(
                    jobs.c.status.in_(wanted), jobs.c.finished_at < cutoff, NOT_NEEDED)
                    .limit(batch)).scalars().all()
                if ids:
                    conn.execute(delete(job_attempts).where(job_attempts.c.job_id.in_(ids)))
                    conn.execute(delete(jobs).where(jobs.c.id.in_(ids)))
                last = len(ids) < batch or (max_batches is not None and batches >= max_batches)
                tally.add(conn, cutoff + older_than_us, len(ids), force=audit_empty and last)
                if last:
                    minutes.prune(conn, cutoff + older_than_us)
            total += len(ids)
            if len(ids) < batch:
                break
        return total

    def prune_minutes(self) -> int:
        """Delete the per-minute rollup's minutes older than two hours; rows deleted."""
        with self._write.begin() as conn:
            return minutes.prune(conn, self.clock())
