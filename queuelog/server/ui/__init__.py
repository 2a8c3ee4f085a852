"""The dashboard: server-rendered pages for viewers and admins, signed in with HTTP Basic.

One blueprint per page module (``queue``, ``types``, ``schedules``, ``audit``, ``bulk``), nested in the
``ui`` blueprint at ``/ui``: their endpoints are ``ui.<page>.<view>``. Viewers and admins
are roles, so an admin API key opens the dashboard too (a browser never sends a Bearer key
by itself, so that adds no CSRF risk).
"""
from __future__ import annotations

from typing import Any

from flask import Blueprint, Flask, redirect, request, url_for
from flask_wtf.csrf import CSRFError

from queuelog.server.auth import current_user, require
from queuelog.server.ui import audit, bulk, helpers, queue, schedules, types
from queuelog.server.ui.helpers import csrf, error_page


def init_app(app: Flask) -> None:
    """Register the dashboard, CSRF for its forms, template helpers and security headers."""
    # CSRF is checked inside the dashboard's POST views, after authentication: never
    # before it (401 comes first) and never on the JSON API, which has its own rules.
    app.config["WTF_CSRF_CHECK_DEFAULT"] = False
    csrf.init_app(app)
    if app.config.get("SESSION_COOKIE_SAMESITE") is None:
        app.config["SESSION_COOKIE_SAMESITE"] = "Lax"  # the session holds the CSRF secret
    ui = Blueprint("ui", __name__, url_prefix="/ui")
    for page in (queue, types, schedules, audit, bulk):
        ui.register_blueprint(page.bp)
    app.register_blueprint(ui)
    app.register_error_handler(CSRFError, _csrf_failed)
    app.extensions["queuelog.html_error"] = error_page  # errors.unavailable: the 503 page
    helpers.init_app(app)
    app.add_url_rule("/", "index", _root)
    app.context_processor(_who)


def _who() -> dict[str, Any]:
    who = current_user() if "ui" in request.blueprints else None
    return {"me": who, "is_admin": bool(who and who.is_admin)}


def _csrf_failed(exc: CSRFError) -> Any:
    return error_page(400, "Form expired", "This form is too old or did not come from this "
                      "dashboard, so nothing was changed. Reload the page and try again.")


@require("viewer", "admin")
def _root() -> Any:
    # Behind sign-in like every endpoint but /healthz (V-01); a browser asks, then follows.
    return redirect(url_for("ui.queue.index"))
