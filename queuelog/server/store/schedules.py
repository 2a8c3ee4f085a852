"""Recurring jobs in the database: one job per tick, pauses, and each schedule's last run.

A tick's job is written in one transaction with its ``schedule_ticks`` row, whose primary
key (schedule, tick) lets exactly one of any number of racing servers commit it: the
others' insert of that row fails first, and they roll back having written nothing.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from sqlalchemy import Connection, bindparam, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from queuelog.model.jobs import Job, Status
from queuelog.model.problems import Conflict
from queuelog.server.store.audit import record
from queuelog.server.store.enqueue import NewJob, new_row
from queuelog.server.store.part import Part
from queuelog.server.store.tables import jobs, paused_schedules, schedule_ticks

KEEP_TICKS_US = 3_600_000_000  # tick rows kept behind a schedule's newest: an hour's worth
# A tick that fell in a pause keeps a row with this job id (ids start at 1): the tick was
# handled while a server ran, so a server starting later does not catch it up.
SKIPPED = 0
PAUSE_TRIES = 3

_INSERT_JOB = insert(jobs).returning(*jobs.c)
_INSERT_TICK = insert(schedule_ticks)
_SET_TICK_JOB = (update(schedule_ticks).where(schedule_ticks.c.schedule == bindparam("s"),
                                              schedule_ticks.c.tick == bindparam("t"))
                 .values(job_id=bindparam("jid")))
_PRUNE = delete(schedule_ticks).where(schedule_ticks.c.schedule == bindparam("s"),
                                      schedule_ticks.c.tick < bindparam("before"))
_PRUNE_SKIPPED = _PRUNE.where(schedule_ticks.c.job_id == SKIPPED)
_IS_PAUSED = select(paused_schedules.c.schedule).where(
    paused_schedules.c.schedule == bindparam("s"))
_LAST_JOB = (select(jobs.c.id, jobs.c.status, jobs.c.scheduled_for)
             .where(jobs.c.schedule == bindparam("s")).order_by(jobs.c.id.desc()).limit(1))
_HANDLED_TICKS = (select(schedule_ticks.c.schedule, func.max(schedule_ticks.c.tick))
                  .group_by(schedule_ticks.c.schedule))
_LAST_TICKS = _HANDLED_TICKS.where(schedule_ticks.c.job_id != SKIPPED)


@dataclasses.dataclass(frozen=True)
class ScheduleState:
    """What the database knows of one schedule."""

    name: str
    paused: bool
    paused_at: int | None
    paused_by: str | None
    last_run_at: int | None       # its newest job's scheduled_for (a tick, or a run now)
    last_job: tuple[int, Status] | None
    last_tick: int | None         # the newest tick that made a job


class Schedules(Part):
    """Schedule verbs."""


    def make_tick(self, name: str, tick: int, new: NewJob) -> Job | None:
        """The job of ``name``'s ``tick``, if this call made it: None if another server
        did, or the schedule is paused (a tick in a pause is skipped, not kept for later)."""
        try:
            with self._write.begin() as conn:
                if conn.execute(_IS_PAUSED, {"s": name}).first() is not None:
                    # Its row, with no job: catch_up must not make it at a later start.
                    # Older skipped rows go, so a long pause keeps an hour of them; the
                    # newest made tick stays (last_run_at, the last-run metric).
                    conn.execute(_INSERT_TICK, {"schedule": name, "tick": tick,
                                                "job_id": SKIPPED})
                    conn.execute(_PRUNE_SKIPPED, {"s": name, "before": tick - KEEP_TICKS_US})
                    return None
                # First, so a loser fails before it writes a job (and PostgreSQL's loser
                # waits here for the winner's commit, then fails).
                conn.execute(_INSERT_TICK, {"schedule": name, "tick": tick, "job_id": 0})
                job = self._insert(conn, name, tick, new)
                conn.execute(_SET_TICK_JOB, {"s": name, "t": tick, "jid": job.id})
                conn.execute(_PRUNE, {"s": name, "before": tick - KEEP_TICKS_US})
        except IntegrityError:
            return None  # this tick is another server's
        self.on_jobs_written()
        return job

    def run_schedule(self, name: str, new: NewJob, actor: str) -> Job:
        """A job of ``name`` now, outside its ticks (audited as ``schedule.run``)."""
        with self._write.begin() as conn:
            now = self.clock()
            job = self._insert(conn, name, now, new)
            record(conn, now, actor, "schedule.run", name, {"job": job.id})
        self.on_jobs_written()
        return job

    def _insert(self, conn: Connection, name: str, when: int, new: NewJob) -> Job:
        # run_at is the tick itself, even when the tick is made a moment late (contract).
        values = {**new_row(new, self.clock()), "run_at": when, "schedule": name,
                  "scheduled_for": when}
        job = Job.from_row(conn.execute(_INSERT_JOB, values).one())
        self.notifier.notify(conn)  # a new job: waiting claims hear of it, as of an enqueue
        return job

    def set_schedule_paused(self, name: str, paused: bool, actor: str) -> None:
        """Pause or resume ``name`` (idempotent); audited as ``schedule.pause``/``.resume``."""
        for _ in range(PAUSE_TRIES):
            try:
                with self._write.begin() as conn:
                    now = self.clock()
                    exists = conn.execute(_IS_PAUSED, {"s": name}).first()
                    if paused and exists is None:
                        conn.execute(insert(paused_schedules).values(
                            schedule=name, paused_at=now, paused_by=actor[:100]))
                    elif not paused and exists is not None:
                        conn.execute(delete(paused_schedules)
                                     .where(paused_schedules.c.schedule == name))
                    record(conn, now, actor, "schedule.pause" if paused else "schedule.resume",
                           name, {"changed": (exists is None) == paused})
                    return
            except IntegrityError:
                continue  # another admin paused it at the same instant; look again
        raise Conflict(f"Could not change schedule {name!r}: it kept changing; try again.")

    def last_ticks(self, *, handled: bool = False) -> dict[str, int]:
        """Each schedule's newest tick that made a job; ``handled``: or that a pause skipped."""
        with self._read.connect() as conn:
            query = _HANDLED_TICKS if handled else _LAST_TICKS
            return {s: int(t) for s, t in conn.execute(query).all()}

    def schedule_states(self, names: Sequence[str]) -> list[ScheduleState]:
        """The database's view of each of ``names``, in that order."""
        with self._read.connect() as conn:
            paused = {r.schedule: r for r in conn.execute(select(paused_schedules)).all()}
            ticks = {s: int(t) for s, t in conn.execute(_LAST_TICKS).all()}
            last = {name: conn.execute(_LAST_JOB, {"s": name}).first() for name in names}
        out = []
        for name in names:
            p, job = paused.get(name), last[name]
            out.append(ScheduleState(
                name=name, paused=p is not None, paused_at=p and p.paused_at,
                paused_by=p and p.paused_by,
                last_run_at=job.scheduled_for if job is not None else ticks.get(name),
                last_job=None if job is None else (int(job.id), Status(job.status)),
                last_tick=ticks.get(name)))
        return out
