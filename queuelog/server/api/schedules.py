"""Recurring jobs: list the schedules, pause and resume one, run one now."""
from __future__ import annotations

from typing import Any

from flask import Blueprint, url_for

from queuelog.model.jobs import isoformat
from queuelog.server import actions, schedules
from queuelog.server.api.serialize import job_json
from queuelog.server.auth import current_user, require
from queuelog.server.requests.check import body
from queuelog.server.schedules import Schedule
from queuelog.server.store import ScheduleState

bp = Blueprint("schedules", __name__)


def schedule_json(s: Schedule, state: ScheduleState, now: int) -> dict[str, Any]:
    """A schedule as ``GET /schedules`` shows it (the contract's fields, exactly)."""
    return {"name": s.name, "cron": s.cron_text, "timezone": s.timezone, "type": s.type,
            "paused": state.paused, "next_run_at": isoformat(s.cron.next_after(now)),
            "last_run_at": isoformat(state.last_run_at),
            "last_job": None if state.last_job is None else
            {"id": state.last_job[0], "status": state.last_job[1].value}}


@bp.get("/schedules")
@require(actions.schedule_states)
def list_schedules() -> Any:
    """Every configured schedule: its cron, zone, type, pause, next and last run."""
    defined = schedules.defined()
    states = actions.schedule_states(current_user(), list(defined))
    now = actions.now()
    return {"schedules": [schedule_json(defined[st.name], st, now) for st in states]}


@bp.post("/schedules/<name>/<any(pause, resume):verb>")
@require(actions.set_schedule_paused, write=True)
def pause_or_resume(name: str, verb: str) -> Any:
    """Skip this schedule's ticks while paused (kept in the database), or stop skipping."""
    body("Empty")
    defined = schedules.defined()
    state = actions.set_schedule_paused(current_user(), name, verb == "pause", list(defined))
    return schedule_json(defined[name], state, actions.now())


@bp.post("/schedules/<name>/run")
@require(actions.run_schedule, write=True)
def run(name: str) -> Any:
    """Enqueue one job of this schedule now, outside its ticks (201 with the job)."""
    body("Empty")
    jobs = {n: s.new_job() for n, s in schedules.defined().items()}
    job = actions.run_schedule(current_user(), name, jobs)
    return job_json(job), 201, {"Location": url_for("read.get_job", job_id=job.id)}
