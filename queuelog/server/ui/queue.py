"""The dashboard's queue: counts, the last hour's chart, filters, pages of jobs, one job,
and an admin's retry, cancel or "run now" of it.

Error text is removed from every job before it reaches a viewer's template (V-10), not
merely left unrendered.
"""
from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app, flash, redirect, render_template, request, url_for

from queuelog.model.jobs import Status
from queuelog.model.problems import JobNotFound, WrongState
from queuelog.server import actions
from queuelog.server.auth import Principal, current_user, require
from queuelog.server.requests.bodies import DASHBOARD_STATUSES, PRIORITIES, SCHEDULED
from queuelog.server.ui.charts import NARROW_HEIGHT, NARROW_WIDTH, minute_chart
from queuelog.server.ui.filters import PAGE_SIZE, BadFilter, parse_filters, prio_value, read
from queuelog.server.ui.helpers import check_form, error_page

bp = Blueprint("queue", __name__)
FILTERS = ("status", "type", "priority", "producer", "worker", "q")  # kept by pager links


@bp.get("/")
@require(actions.dashboard, actions.dashboard_jobs, actions.overview)
def index() -> Any:
    """The queue: counts, the last hour's chart, filters and one page of jobs."""
    try:
        f = parse_filters(request.args)
    except BadFilter as exc:
        return error_page(400, "Bad filter", str(exc))
    who, config = current_user(), current_app.config
    status = f["status"]
    page = actions.dashboard_jobs(
        who, q=f["q"], status=None if status in (None, SCHEDULED) else Status(status),
        scheduled=status == SCHEDULED, type=f["type"], priority=prio_value(f["priority"]),
        producer=f["producer"], worker=f["worker"],
        limit=PAGE_SIZE, before=f["before"], after=f["after"])
    filters = {k: f[k] for k in FILTERS if f[k]}
    head = actions.overview(who)
    types = sorted(set(config["JOB_TYPES"]) | ({f["type"]} if f["type"] else set()))
    return render_template(
        "ui/index.html", filters=filters, types=types, statuses=DASHBOARD_STATUSES,
        priorities=PRIORITIES, counts=head.counts, cap=config["COUNT_CAP"],
        chart=minute_chart(head.chart),
        narrow_chart=minute_chart(head.chart, NARROW_WIDTH, NARROW_HEIGHT), jobs=page.jobs, older=page.older, newer=page.newer,
        now=actions.dashboard(who), bulk=_bulk_offer(f, who))


@bp.get("/jump")
@require(actions.dashboard)
def jump() -> Any:
    """Go to the job whose id was typed into the search box."""
    try:
        job_id = read("Jump", request.args)["id"]
    except BadFilter as exc:
        flash(str(exc), "error")
        return redirect(url_for(".index"), 303)
    if job_id is None:
        return redirect(url_for(".index"), 303)
    return redirect(url_for(".job", job_id=job_id), 303)


@bp.get("/jobs/<job_id:job_id>")
@require(actions.dashboard, actions.dashboard_job, actions.dashboard_workflow)
def job(job_id: int) -> Any:
    """One job: details, times, its parents and dependents, payload, result, history;
    error and buttons for admins."""
    who = current_user()
    try:
        found = actions.dashboard_job(who, job_id)
    except JobNotFound:
        return error_page(404, "No such job", f"There is no job #{job_id}.")
    return render_template("ui/job.html", job=found, flow=actions.dashboard_workflow(who, found),
                           now=actions.dashboard(who))


@bp.post("/jobs/<job_id:job_id>/retry")
@require(actions.dashboard, actions.retry)
def retry(job_id: int) -> Any:
    """Admin: put a failed or cancelled job back in the queue."""
    return _act(job_id, "retry")


@bp.post("/jobs/<job_id:job_id>/cancel")
@require(actions.dashboard, actions.cancel)
def cancel(job_id: int) -> Any:
    """Admin: cancel a blocked, pending or running job (a running one's holder is fenced
    off)."""
    return _act(job_id, "cancel")


@bp.post("/jobs/<job_id:job_id>/run")
@require(actions.dashboard, actions.run_now)
def run_now(job_id: int) -> Any:
    """Admin: make a delayed or retrying pending job due now."""
    return _act(job_id, "run")


def _act(job_id: int, action: str) -> Any:
    # Authenticated and authorized by now (401/403 come first); then the form checks.
    check_form()
    try:
        if action == "retry":
            done = actions.retry(current_user(), job_id)
            # A job whose parents have not all finished waits for them again (Workflows).
            if done.status is Status.BLOCKED:
                flash(f"Job #{job_id} is blocked again, with fresh retries: it runs once "
                      f"its parents have finished.", "ok")
            else:
                flash(f"Job #{job_id} is pending again, with fresh retries.", "ok")
        elif action == "run":
            actions.run_now(current_user(), job_id)
            flash(f"Job #{job_id} is due now: the next claim takes it.", "ok")
        else:
            actions.cancel(current_user(), job_id)
            flash(f"Job #{job_id} is cancelled.", "ok")
    except JobNotFound:
        return error_page(404, "No such job", f"There is no job #{job_id}.")
    except WrongState as exc:
        flash(f"Job #{job_id} was not changed: {exc.detail}", "error")
    return redirect(url_for(".job", job_id=job_id), 303)


def _bulk_offer(f: dict[str, Any], who: Principal) -> dict[str, Any] | None:
    """The bulk action the current filter allows an admin, with its (capped) count."""
    verb = {"failed": "retry", "cancelled": "retry", "pending": "cancel",
            "blocked": "cancel"}.get(f["status"] or "")
    # Bulk verbs select by status, type and priority: never offer "all N" for a list that
    # a producer, worker or search narrowed, which would act on more jobs than it shows.
    if not who.is_admin or verb is None or any(f[k] for k in ("producer", "worker", "q")):
        return None
    cap = current_app.config["COUNT_CAP"]
    n = actions.count_matching(who, Status(f["status"]), type=f["type"],
                               priority=prio_value(f["priority"]), cap=cap)
    return {"verb": verb, "count": n, "cap": cap} if n else None

