"""The operator's pages of the dashboard: job types (pause, resume), the audit log, and
bulk retry or cancel of every job the current filter shows, after a confirmation page.

Every POST is checked in the same order as the job buttons: signed in (401), admin
(403), not cross-site, then the form's CSRF token.
"""
from __future__ import annotations

from typing import Any

from flask import current_app, flash, redirect, render_template, request, url_for

from queuelog.server import actions
from queuelog.server.auth import current_user, refuse_cross_site, require
from queuelog.model.problems import JobNotFound
from queuelog.model.jobs import Status
from queuelog.server.store import get_store
from queuelog.server.ui.queue import PAGE_SIZE, BadFilter, _error_page, _prio_value, bp, csrf, parse_filters, parse_id

BULK = {"retry": ("failed", "cancelled"), "cancel": ("pending",)}


@bp.get("/types")
@require("viewer", "admin")
def types() -> Any:
    """One row per configured type: paused, counts, queue age, the last hour."""
    config = current_app.config
    return render_template("ui/types.html", cap=config["COUNT_CAP"],
                           types=actions.job_types(list(config["JOB_TYPES"]),
                                                   config["COUNT_CAP"]))


@bp.post("/types/<job_type>/<any(pause, resume):verb>")
@require("admin")
def pause_or_resume(job_type: str, verb: str) -> Any:
    """Admin: pause or resume a type."""
    _check_form()
    config = current_app.config
    try:
        actions.set_paused(current_user(), job_type, verb == "pause", list(config["JOB_TYPES"]),
                           config["COUNT_CAP"])
    except JobNotFound as exc:
        return _error_page(404, "No such job type", exc.detail)
    flash(f"Type {job_type} is paused: its jobs wait until it is resumed." if verb == "pause"
          else f"Type {job_type} runs again.", "ok")
    return redirect(url_for(".types"), 303)


@bp.get("/audit")
@require("admin")
def audit() -> Any:
    """Admin: the audit log, newest first, one page at a time."""
    try:
        before = parse_id(request.args.get("before"), "before")
    except BadFilter as exc:
        return _error_page(400, "Bad filter", str(exc))
    events, older = actions.audit_events(current_user(), limit=PAGE_SIZE, before=before)
    return render_template("ui/audit.html", events=events, older=older, paged=before is not None)


@bp.get("/bulk/<any(retry, cancel):verb>")
@require("admin")
def bulk_confirm(verb: str) -> Any:
    """Admin: how many jobs the filter matches now, and a form to act on all of them."""
    try:
        f = _bulk_filters(verb)
    except BadFilter as exc:
        return _error_page(400, "Bad filter", str(exc))
    n = get_store().count_matching(Status(f["status"]), type=f["type"],
                                   priority=_prio_value(f["priority"]))
    return render_template("ui/bulk.html", verb=verb, count=n,
                           filters={k: v for k, v in f.items() if v})


@bp.post("/bulk/<any(retry, cancel):verb>")
@require("admin")
def bulk(verb: str) -> Any:
    """Admin: retry or cancel every job the filter matches (in bounded transactions)."""
    _check_form()
    try:
        f = _bulk_filters(verb, request.form)
    except BadFilter as exc:
        return _error_page(400, "Bad filter", str(exc))
    who, prio = current_user(), _prio_value(f["priority"])
    if verb == "retry":
        n = actions.bulk_retry(who, statuses=[Status(f["status"])], type=f["type"],
                               priority=prio)
        flash(f"{n:,} job(s) are pending again, with fresh retries.", "ok")
    else:
        n = actions.bulk_cancel(who, type=f["type"], priority=prio)
        flash(f"{n:,} pending job(s) are cancelled.", "ok")
    return redirect(url_for(".index", **{k: v for k, v in f.items() if v}), 303)


def _bulk_filters(verb: str, source: Any = None) -> dict[str, Any]:
    """The filter of a bulk action; its status must be one the action starts from."""
    f = parse_filters(source if source is not None else request.args)
    if f["status"] not in BULK[verb]:
        raise BadFilter(f"status must be one of {', '.join(BULK[verb])} to {verb} in bulk.")
    return {k: f[k] for k in ("status", "type", "priority")}


def _check_form() -> None:
    refuse_cross_site()
    csrf.protect()
