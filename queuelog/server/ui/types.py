"""The dashboard's job types: one row per configured type; an admin pauses or resumes one.

Every POST is checked in the same order as the job buttons: signed in (401), admin (403),
not cross-site, then the form's CSRF token.
"""
from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app, flash, redirect, render_template, url_for

from queuelog.model.problems import JobNotFound
from queuelog.server import actions
from queuelog.server.auth import current_user, require
from queuelog.server.ui.helpers import check_form, error_page

bp = Blueprint("types", __name__)


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
