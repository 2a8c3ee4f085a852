"""The dashboard: server-rendered pages for viewers and admins, signed in with HTTP Basic.

Viewers and admins are roles, so an admin API key opens the dashboard too (a browser never
sends a Bearer key by itself, so that adds no CSRF risk). Error text is removed from every
job before it reaches a viewer's template (V-10), not merely left unrendered.
"""
from __future__ import annotations

import json
from typing import Any

from flask import (Blueprint, Flask, current_app, flash, redirect, render_template, request,
                   url_for)
from flask_wtf.csrf import CSRFError, CSRFProtect

from queuelog.server import actions
from queuelog.server.auth import current_user, refuse_cross_site, require
from queuelog.server.ui.charts import minute_chart
from queuelog.model.problems import JobNotFound, WrongState
from queuelog.model.jobs import Priority, Status, isoformat, to_datetime
from queuelog.server.store import get_store
from queuelog.server.requests.check import MAX_JOB_ID, is_name

bp = Blueprint("ui", __name__, url_prefix="/ui")
csrf = CSRFProtect()

PAGE_SIZE = 50
SCHEDULED = "scheduled"  # a dashboard-only status: pending with a future run_at
STATUS_CHOICES = ["pending", SCHEDULED, "running", "completed", "failed", "cancelled"]
PRIORITY_CHOICES = [p.label for p in Priority]
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; object-src 'none'; base-uri 'none'; "
                               "frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


class BadFilter(Exception):
    """A query-string value the dashboard cannot use."""


def parse_filters(args: Any) -> dict[str, Any]:
    """The filters and cursors of ``/ui/`` from the query string; empty means "any"."""
    out: dict[str, Any] = {}
    for name, choices in (("status", STATUS_CHOICES), ("priority", PRIORITY_CHOICES)):
        value = args.get(name) or None
        if value is not None and value not in choices:
            raise BadFilter(f"{name} must be one of {', '.join(choices)}.")
        out[name] = value
    out["type"] = args.get("type") or None
    if out["type"] is not None and not is_name(out["type"]):
        raise BadFilter("type must be at most 100 printable characters.")
    for name in ("before", "after"):
        out[name] = parse_id(args.get(name), name)
    return out


def parse_id(raw: str | None, name: str = "id") -> int | None:
    """A job id from the query string (None when absent); BadFilter when not one."""
    if raw is None or raw == "":
        return None
    raw = raw.strip().lstrip("#")
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 19 or not 0 < int(raw) <= MAX_JOB_ID:
        raise BadFilter(f"{name} must be a job id (a positive whole number).")
    return int(raw)


def _error_page(status: int, title: str, detail: str) -> Any:
    return render_template("ui/error.html", title=title, detail=detail), status


@bp.get("/")
@require("viewer", "admin")
def index() -> Any:
    """The queue: counts, the last hour's chart, filters and one page of jobs."""
    try:
        f = parse_filters(request.args)
    except BadFilter as exc:
        return _error_page(400, "Bad filter", str(exc))
    store, who = get_store(), current_user()
    status = f["status"]
    page = store.list_jobs(
        status=None if status in (None, SCHEDULED) else Status(status),
        scheduled=status == SCHEDULED, type=f["type"],
        priority=None if f["priority"] is None else int(Priority.from_label(f["priority"])),
        limit=PAGE_SIZE, before=f["before"], after=f["after"])
    filters = {k: f[k] for k in ("status", "type", "priority") if f[k]}
    types = sorted(set(current_app.config["JOB_TYPES"]) | ({f["type"]} if f["type"] else set()))
    return render_template(
        "ui/index.html", filters=filters, types=types, statuses=STATUS_CHOICES,
        priorities=PRIORITY_CHOICES, counts=store.count_by_status(current_app.config["COUNT_CAP"]),
        cap=current_app.config["COUNT_CAP"], chart=minute_chart(store.outcomes_per_minute(60)),
        jobs=[actions.visible(j, who) for j in page.jobs], older=page.older, newer=page.newer,
        now=store.clock(), bulk=_bulk_offer(f, who.is_admin))


@bp.get("/jump")
@require("viewer", "admin")
def jump() -> Any:
    """Go to the job whose id was typed into the search box."""
    try:
        job_id = parse_id(request.args.get("id"))
    except BadFilter as exc:
        flash(str(exc), "error")
        return redirect(url_for(".index"), 303)
    if job_id is None:
        return redirect(url_for(".index"), 303)
    return redirect(url_for(".job", job_id=job_id), 303)


@bp.get("/jobs/<job_id:job_id>")
@require("viewer", "admin")
def job(job_id: int) -> Any:
    """One job: details, times, payload, result, history; error and buttons for admins."""
    try:
        found = actions.visible(get_store().get(job_id), current_user())
    except JobNotFound:
        return _error_page(404, "No such job", f"There is no job #{job_id}.")
    return render_template("ui/job.html", job=found, now=get_store().clock())


@bp.post("/jobs/<job_id:job_id>/retry")
@require("admin")
def retry(job_id: int) -> Any:
    """Admin: put a failed or cancelled job back in the queue."""
    return _act(job_id, "retry")


@bp.post("/jobs/<job_id:job_id>/cancel")
@require("admin")
def cancel(job_id: int) -> Any:
    """Admin: cancel a pending job."""
    return _act(job_id, "cancel")


def _act(job_id: int, action: str) -> Any:
    # Authenticated and authorized by now (401/403 come first); then the form checks.
    refuse_cross_site()
    csrf.protect()
    try:
        if action == "retry":
            actions.retry(current_user(), job_id)
            flash(f"Job #{job_id} is pending again, with fresh retries.", "ok")
        else:
            actions.cancel(current_user(), job_id)
            flash(f"Job #{job_id} is cancelled.", "ok")
    except JobNotFound:
        return _error_page(404, "No such job", f"There is no job #{job_id}.")
    except WrongState as exc:
        flash(f"Job #{job_id} was not changed: {exc.detail}", "error")
    return redirect(url_for(".job", job_id=job_id), 303)


def _bulk_offer(f: dict[str, Any], is_admin: bool) -> dict[str, Any] | None:
    """The bulk action the current filter allows an admin, with its (capped) count."""
    verb = {"failed": "retry", "cancelled": "retry", "pending": "cancel"}.get(f["status"] or "")
    if not is_admin or verb is None:
        return None
    cap = current_app.config["COUNT_CAP"]
    n = get_store().count_matching(Status(f["status"]), type=f["type"],
                                   priority=_prio_value(f["priority"]), cap=cap)
    return {"verb": verb, "count": n, "cap": cap} if n else None


def _prio_value(label: str | None) -> int | None:
    return None if label is None else int(Priority.from_label(label))


def _csrf_failed(exc: CSRFError) -> Any:
    return _error_page(400, "Form expired", "This form is too old or did not come from this "
                       "dashboard, so nothing was changed. Reload the page and try again.")


def _secure_headers(response: Any) -> Any:
    for name, value in HEADERS.items():
        response.headers[name] = value
    return response


def init_app(app: Flask) -> None:
    """Register the dashboard, CSRF for its forms, template helpers and security headers."""
    # CSRF is checked inside the dashboard's POST views, after authentication: never
    # before it (401 comes first) and never on the JSON API, which has its own rules.
    app.config["WTF_CSRF_CHECK_DEFAULT"] = False
    csrf.init_app(app)
    if app.config.get("SESSION_COOKIE_SAMESITE") is None:
        app.config["SESSION_COOKIE_SAMESITE"] = "Lax"  # the session holds the CSRF secret
    from queuelog.server.ui import admin as ui_admin  # noqa: F401  (its pages register on this blueprint
    app.register_blueprint(bp)
    app.register_error_handler(CSRFError, _csrf_failed)
    app.extensions["queuelog.html_error"] = _error_page  # errors.unavailable: the 503 page
    app.after_request(_secure_headers)
    app.add_url_rule("/", "index", _root)
    app.jinja_env.filters.update(ts=_ts, iso=isoformat, count=_count, prio=_prio,
                                 pretty=_pretty, duration=_duration)

    @app.context_processor
    def _who() -> dict[str, Any]:
        who = current_user() if request.blueprint == "ui" else None
        return {"me": who, "is_admin": bool(who and who.is_admin)}


@require("viewer", "admin")
def _root() -> Any:
    # Behind sign-in like every endpoint but /healthz (V-01); a browser asks, then follows.
    return redirect(url_for("ui.index"))


def _ts(us: int | None) -> str:
    return "" if us is None else to_datetime(us).strftime("%Y-%m-%d %H:%M:%S")


def _count(value: int, cap: int) -> str:
    return f"{cap:,}+" if value > cap else f"{value:,}"


def _prio(value: int) -> str:
    return Priority.from_value(value).label


def _duration(us: int | None) -> str:
    """A span of time for people: 850 ms, 12.3 s, 4 min 05 s, 2 h 03 min."""
    if us is None:
        return ""
    seconds = us / 1_000_000
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {sec:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)
