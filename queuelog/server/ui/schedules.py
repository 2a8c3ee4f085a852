"""The dashboard's schedules: each with its next run; an admin pauses, resumes or runs one now.

POSTs are checked as on the types page: signed in (401), admin (403), not cross-site, then
the form's CSRF token.
"""
from __future__ import annotations

from typing import Any

from flask import Blueprint, flash, redirect, render_template, url_for

from queuelog.model.jobs import to_datetime
from queuelog.model.problems import JobNotFound
from queuelog.server import actions, schedules
from queuelog.server.auth import current_user, require
from queuelog.server.ui.helpers import check_form, error_page

bp = Blueprint("schedules", __name__)


@bp.get("/schedules")
@require(actions.dashboard, actions.schedule_states)
def schedules_page() -> Any:
    """One row per schedule: cron, zone, type, state, next run (and how soon), last run."""
    defined = schedules.defined()
    who = current_user()
    now = actions.dashboard(who)
    rows = []
    for state in actions.schedule_states(who, list(defined)):
        s = defined[state.name]
        next_at = s.cron.next_after(now)
        local = None if next_at is None else to_datetime(next_at).astimezone(s.cron.zone)
        rows.append({"s": s, "state": state, "next_at": next_at,
                     "next_in": None if next_at is None else next_at - now,
                     "next_local": local and local.strftime("%Y-%m-%d %H:%M:%S %Z")})
    return render_template("ui/schedules.html", rows=rows)


@bp.post("/schedules/<name>/<any(pause, resume, run):verb>")
@require(actions.dashboard, actions.run_schedule, actions.set_schedule_paused)
def act(name: str, verb: str) -> Any:
    """Admin: pause, resume or run a schedule now."""
    check_form()
    defined = schedules.defined()
    try:
        if verb == "run":
            job = actions.run_schedule(current_user(), name,
                                       {n: s.new_job() for n, s in defined.items()})
            flash(f"Schedule {name} ran now: job #{job.id}.", "ok")
        else:
            actions.set_schedule_paused(current_user(), name, verb == "pause", list(defined))
            flash(f"Schedule {name} is paused: its ticks are skipped." if verb == "pause"
                  else f"Schedule {name} runs again.", "ok")
    except JobNotFound as exc:
        return error_page(404, "No such schedule", exc.detail)
    return redirect(url_for(".schedules_page"), 303)
