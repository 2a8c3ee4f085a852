"""The dashboard: server-rendered pages for viewers and admins, signed in with HTTP Basic.

One blueprint per page module (``queue``, ``types``, ``schedules``, ``workers``, ``audit``, ``bulk``,
``signout``), nested in the
``ui`` blueprint at ``/ui``: their endpoints are ``ui.<page>.<view>``. Viewers and admins
are roles, so an admin API key opens the dashboard too (a browser never sends a Bearer key
by itself, so that adds no CSRF risk).
"""
from __future__ import annotations

from typing import Any

from flask import Blueprint, Flask, Request, current_app, redirect, request, url_for
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface
from flask_wtf.csrf import CSRFError

from queuelog.server import actions
from queuelog.server.auth import current_user, require, signed_in
from queuelog.server.ui import audit, bulk, helpers, queue, schedules, signout, types, workers
from queuelog.server.ui.helpers import csrf, error_page

# The header's pages, in order: (endpoint, label, admins only). A page appears once its
# blueprint is registered, so the schedules and workers pages join when they exist; the
# browser test walks this list, so every page in it is checked at phone width and by axe.
NAV = [("ui.queue.index", "Jobs", False), ("ui.types.types", "Types", False),
       ("ui.schedules.schedules_page", "Schedules", False), ("ui.workers.workers", "Workers", False),
       ("ui.audit.audit", "Audit", True)]
# Pages where a reload could repeat or lose something (a confirmation, an error) get no
# auto-refresh; every other page offers it.
NO_REFRESH = {"ui.bulk.bulk_confirm", "ui.signout.signout"}


def init_app(app: Flask) -> None:
    """Register the dashboard, CSRF for its forms, template helpers and security headers."""
    # CSRF is checked inside the dashboard's POST views, after authentication: never
    # before it (401 comes first) and never on the JSON API, which has its own rules.
    app.config["WTF_CSRF_CHECK_DEFAULT"] = False
    csrf.init_app(app)
    if app.config.get("SESSION_COOKIE_SAMESITE") is None:
        app.config["SESSION_COOKIE_SAMESITE"] = "Lax"  # the session holds the CSRF secret
    app.session_interface = _Sessions()
    ui = Blueprint("ui", __name__, url_prefix="/ui")
    for page in (queue, types, schedules, workers, audit, bulk, signout):
        ui.register_blueprint(page.bp)
    app.register_blueprint(ui)
    app.register_error_handler(CSRFError, _csrf_failed)
    app.extensions["queuelog.html_error"] = error_page  # errors.unavailable: the 503 page
    helpers.init_app(app)
    app.add_url_rule("/", "index", _root)
    app.context_processor(_who)


class _Sessions(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions; a request without cookies (every API call) gets its
    empty session without the signer being built for it (Flask builds one per request)."""

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        """An empty session when no cookie came; else Flask's."""
        if "HTTP_COOKIE" not in request.environ and app.secret_key:
            return self.session_class()
        return super().open_session(app, request)


def _who() -> dict[str, Any]:
    # A 403 (a viewer on an admin's page) keeps the header and navigation: who signed in.
    who = (current_user() or signed_in()) if "ui" in request.blueprints else None
    is_admin = bool(who and who.is_admin)
    nav = [(endpoint, label) for endpoint, label, admins in NAV
           if endpoint in current_app.view_functions and (is_admin or not admins)]
    return {"me": who, "is_admin": is_admin, "nav": nav,
            "autorefresh": request.endpoint not in NO_REFRESH}


def _csrf_failed(exc: CSRFError) -> Any:
    return error_page(400, "Form expired", "This form is too old or did not come from this "
                      "dashboard, so nothing was changed. Reload the page and try again.")


@require(actions.dashboard)
def _root() -> Any:
    # Behind sign-in like every endpoint but /healthz (V-01); a browser asks, then follows.
    return redirect(url_for("ui.queue.index"))
