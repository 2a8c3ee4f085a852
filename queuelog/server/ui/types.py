"""The dashboard's job types: one row per configured type; an admin pauses or resumes one.

Every POST is checked in the same order as the job buttons: signed in (401), admin (403),
not cross-site, then the form's CSRF token.
"""
from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app, flash, redirect, render_template, request, url_for

from queuelog.model.problems import JobNotFound, ValidationFailed
from queuelog.server import actions
from queuelog.server.auth import current_user, require
from queuelog.server.requests.check import validate
from queuelog.server.store import Timing
from queuelog.server.ui.helpers import check_form, error_page

bp = Blueprint("types", __name__)


@bp.get("/types")
@require(actions.dashboard, actions.job_types, actions.job_timings)
def types() -> Any:
    """One row per configured type: paused, counts, queue age, the last hour (with its run
    and wait percentiles)."""
    config, who = current_app.config, current_user()
    return render_template("ui/types.html", cap=config["COUNT_CAP"],
                           types=actions.job_types(who, list(config["JOB_TYPES"]),
                                                   config["COUNT_CAP"]),
                           timings=actions.job_timings(who), empty=Timing())


@bp.post("/types/<path:job_type>/<any(pause, resume):verb>")
@require(actions.dashboard, actions.set_paused)
def pause_or_resume(job_type: str, verb: str) -> Any:
    """Admin: pause or resume a type."""
    check_form()
    config = current_app.config
    try:
        actions.set_paused(current_user(), job_type, verb == "pause", list(config["JOB_TYPES"]),
                           config["COUNT_CAP"])
    except JobNotFound as exc:
        return error_page(404, "No such job type", exc.detail)
    flash(f"Type {job_type} is paused: its jobs wait until it is resumed." if verb == "pause"
          else f"Type {job_type} runs again.", "ok")
    return redirect(url_for(".types"), 303)


@bp.post("/types/<path:job_type>/limits")
@require(actions.dashboard, actions.set_limits, actions.reset_limits)
def limits(job_type: str) -> Any:
    """Admin: set a type's limits from the form (an empty field removes that limit), or
    ``reset`` them to the configured ones."""
    check_form()
    config = current_app.config
    args = (list(config["JOB_TYPES"]), config["COUNT_CAP"])
    try:
        if request.form.get("reset"):
            actions.reset_limits(current_user(), job_type, *args)
            flash(f"Type {job_type} is back to its configured limits.", "ok")
        else:
            fields = validate("TypeLimits", _limit_fields())  # the API's declaration: one rule
            actions.set_limits(current_user(), job_type, fields, *args)
            flash(f"Limits of type {job_type} saved.", "ok")
    except JobNotFound as exc:
        return error_page(404, "No such job type", exc.detail)
    except ValidationFailed as exc:
        return error_page(422, "Limits not saved", exc.detail)
    return redirect(url_for(".types"), 303)


def _limit_fields() -> dict[str, Any]:
    """The form's three fields as the API body: blank is null, digits a number."""
    out: dict[str, Any] = {}
    for name in ("concurrency", "rate", "burst"):
        text = request.form.get(name, "").strip()
        # isdecimal, not isdigit: "²" is a digit int() refuses; left text, it is a 422.
        out[name] = None if not text else int(text) if text.isdecimal() and name != "rate" \
            else text
    return out
