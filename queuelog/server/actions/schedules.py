"""Recurring jobs: the ticker's jobs, the schedules' states, an admin's pause, resume or run."""
from __future__ import annotations

from typing import Mapping, Sequence

from queuelog.model.jobs import Job
from queuelog.model.problems import JobNotFound
from queuelog.server import metrics
from queuelog.server.actions.gate import BOARD, SYSTEM, gate
from queuelog.server.auth import Principal
from queuelog.server.db import get_store
from queuelog.server.store import NewJob, ScheduleState


@gate(SYSTEM)
def schedule_tick(who: Principal, name: str, tick: int, new: NewJob) -> Job | None:
    """The ticker: make the job of ``name``'s ``tick`` unless another server did (or it is
    paused); woken and counted like an enqueue."""
    job = get_store().make_tick(name, tick, new)
    if job is not None:
        metrics.jobs_enqueued(job.type)
    return job


@gate(*BOARD, SYSTEM)
def schedule_states(who: Principal, names: Sequence[str]) -> list[ScheduleState]:
    """What the database knows of each schedule: paused, last run, last job."""
    return get_store().schedule_states(list(names))


@gate("admin")
def set_schedule_paused(who: Principal, name: str, paused: bool,
                        names: Sequence[str]) -> ScheduleState:
    """Admin: pause or resume a configured schedule (404 otherwise; audited)."""
    if name not in names:
        raise JobNotFound(f"No schedule {name!r} is configured.")
    store = get_store()
    store.set_schedule_paused(name, paused, who.name)
    return store.schedule_states([name])[0]


@gate("admin")
def run_schedule(who: Principal, name: str, jobs: Mapping[str, NewJob]) -> Job:
    """Admin: one job of a configured schedule now, outside its ticks (audited)."""
    if name not in jobs:
        raise JobNotFound(f"No schedule {name!r} is configured.")
    job = get_store().run_schedule(name, jobs[name], who.name)
    metrics.jobs_enqueued(job.type)
    return job
