"""The one place that maps domain errors (model/problems.py) and database outages to RFC 9457."""
from __future__ import annotations

import sqlite3
import sys
import threading
from typing import Any, Callable

from flask import Flask, Response, current_app, json, request
from sqlalchemy import exc as sa_exc
from werkzeug.exceptions import HTTPException

from queuelog.model.problems import PROBLEM_JSON, PROBLEM_TYPE, QueuelogError


# -- the database went away ------------------------------------------------------------
UNAVAILABLE_RETRY_AFTER = 1  # seconds; a PostgreSQL restart takes a few, clients back off
UNAVAILABLE_DETAIL = ("The database is not answering right now; nothing was changed by this "
                      "request, or its outcome is unknown. Retry it (with the same "
                      "idempotency key, if it creates a job).")
# SQLite's primary result codes that mean "the database cannot serve now", not "this
# statement is wrong": BUSY and LOCKED (past busy_timeout), NOMEM, READONLY, IOERR, FULL,
# CANTOPEN, PROTOCOL (https://sqlite.org/rescode.html).
_SQLITE_UNAVAILABLE = {5, 6, 7, 8, 10, 13, 14, 15}
_SQLITE_MESSAGES = ("database is locked", "database table is locked", "disk i/o error",
                    "database or disk is full", "unable to open database file",
                    "readonly database", "out of memory")


def is_unavailable(err: BaseException) -> bool:
    """Whether ``err`` means "the database did not answer or dropped the connection"."""
    if isinstance(err, sa_exc.TimeoutError):
        return True  # no pooled connection came free in time: the database is stuck
    if isinstance(err, sa_exc.DBAPIError):
        if err.connection_invalidated:
            return True  # SQLAlchemy saw a disconnect (and invalidated the pool)
        err = err.orig
    if isinstance(err, sqlite3.Error):
        # Syntax errors and missing tables are sqlite3.OperationalError too: go by the code.
        code = getattr(err, "sqlite_errorcode", None)
        if code is not None:
            return code & 0xFF in _SQLITE_UNAVAILABLE
        return any(text in str(err).lower() for text in _SQLITE_MESSAGES)
    psycopg = sys.modules.get("psycopg")  # a psycopg error means psycopg is loaded
    if psycopg is not None and isinstance(err, psycopg.Error):
        # OperationalError: connection lost or refused, server shutting down, disk full,
        # too many connections, serialization failure; a read-only server (a standby).
        return isinstance(err, (psycopg.OperationalError, psycopg.errors.ReadOnlySqlTransaction))
    return False


def one_line(err: BaseException) -> str:
    """The driver's message, first line, for a log line (never a traceback)."""
    orig = getattr(err, "orig", None) or err
    text = str(orig).strip().splitlines()
    return f"{type(orig).__name__}: {text[0] if text else ''}"


class DatabaseHealth:
    """Whether the database is away, so each incident logs one line going and one coming back."""

    def __init__(self) -> None:
        self.down = False
        self._lock = threading.Lock()

    def went_away(self, err: BaseException, log: Any) -> None:
        """Note a failure; log it if it starts an incident."""
        with self._lock:
            if self.down:
                return
            self.down = True
        log.warning("database unavailable (%s); answering 503 until it is back", one_line(err))

    def is_back(self, log: Any) -> None:
        """Note a success; log it if it ends an incident."""
        if not self.down:  # the common case, without the lock
            return
        with self._lock:
            if not self.down:
                return
            self.down = False
        log.warning("database is back")


def problem(status: int, slug: str, title: str, detail: str,
            errors: list[dict[str, str]] | None = None,
            headers: dict[str, str] | None = None) -> Response:
    """Build an ``application/problem+json`` response."""
    body: dict[str, Any] = {"type": PROBLEM_TYPE + slug, "title": title,
                            "status": status, "detail": detail}
    if errors is not None:
        body["errors"] = errors
    # A trailing newline like Flask's own JSON answers, so curl output stays readable.
    resp = current_app.response_class(json.dumps(body) + "\n", status=status,
                                      mimetype=PROBLEM_JSON)
    for name, value in (headers or {}).items():
        resp.headers[name] = value
    return resp


def refusal(status: int, slug: str, title: str, detail: str,
            errors: list[dict[str, str]] | None = None,
            headers: dict[str, str] | None = None) -> Any:
    """A refusal: the dashboard's HTML error page for a ``/ui/`` page, else problem+json."""
    page: Callable[..., Any] | None = current_app.extensions.get("queuelog.html_error")
    if page is None or "ui" not in request.blueprints:
        return problem(status, slug, title, detail, errors, headers)
    body, status = page(status, title, detail)
    return current_app.response_class(body, status, headers, mimetype="text/html")


def _from_domain(err: QueuelogError) -> Any:
    # A signed-in person refused on a page (403: cross-site, a role) gets the page; the rest,
    # sign-in throttling (429) included, stays problem+json as before sign-in anywhere.
    answer = refusal if err.status == 403 else problem
    return answer(err.status, err.slug, err.title, err.detail, err.errors, err.headers)


def _from_http(err: HTTPException) -> Response:
    code = err.code or 500
    headers = {k: v for k, v in err.get_headers() if k.lower() in {"allow", "retry-after"}}
    slug = (err.name or "error").lower().replace(" ", "-")
    return problem(code, slug, err.name or "Error", err.description or err.name or "", None,
                   headers)


def _from_unexpected(err: Exception) -> Any:
    if is_unavailable(err):
        return unavailable(err)
    current_app.logger.exception("unhandled error", exc_info=err)
    return problem(500, "internal-error", "Internal server error",
                   "The server failed; the error has been logged.")


def unavailable(err: BaseException, detail: str = UNAVAILABLE_DETAIL) -> Any:
    """503 with ``Retry-After``: problem+json, or the dashboard's page for ``/ui/``."""
    health(current_app).went_away(err, current_app.logger)
    headers = {"Retry-After": str(UNAVAILABLE_RETRY_AFTER)}
    page: Callable[..., Any] | None = current_app.extensions.get("queuelog.html_error")
    if page is not None and "ui" in request.blueprints:
        body, status = page(503, "Database unavailable",
                            "The database is not answering right now, so this page cannot be "
                            "shown, and an action just sent may not have been done. Try "
                            "again in a moment.")
        return current_app.response_class(body, status, headers, mimetype="text/html")
    return problem(503, "unavailable", "Service unavailable", detail, headers=headers)


def health(app: Flask) -> DatabaseHealth:
    """The app's database incident tracker."""
    return app.extensions["queuelog.db_health"]  # type: ignore[no-any-return]


def _note_success(response: Response) -> Response:
    # A request that authenticated (so it read the database) and did not fail server-side
    # ends an incident: one "back" line. Unauthenticated requests may not touch it.
    tracker = health(current_app)
    if tracker.down and response.status_code < 500 and (
            request.authorization is not None or request.endpoint == "read.healthz"):
        tracker.is_back(current_app.logger)
    return response


def init_app(app: Flask) -> None:
    """Answer every error, Flask's own included, as problem+json."""
    app.extensions["queuelog.db_health"] = DatabaseHealth()
    app.register_error_handler(QueuelogError, _from_domain)
    app.register_error_handler(HTTPException, _from_http)
    app.register_error_handler(Exception, _from_unexpected)
    app.after_request(_note_success)
