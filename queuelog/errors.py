"""Domain errors raised by the store and views, and the one place that maps them to RFC 9457."""
from __future__ import annotations

from typing import Any

from flask import Flask, Response, current_app, json
from werkzeug.exceptions import HTTPException

PROBLEM_TYPE = "urn:queuelog:problem:"
PROBLEM_JSON = "application/problem+json"


class QueuelogError(Exception):
    """Base of every error that becomes a problem+json answer."""

    status = 400
    slug = "bad-request"
    title = "Bad request"

    def __init__(self, detail: str, errors: list[dict[str, str]] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = errors
        self.headers = headers or {}


class MalformedRequest(QueuelogError):
    """The body is not strict JSON, or not an object."""

    status, slug, title = 400, "malformed-request", "Malformed request"


class Forbidden(QueuelogError):
    """Authenticated, but this principal may not do this."""

    status, slug, title = 403, "forbidden", "Forbidden"


class JobNotFound(QueuelogError):
    """No such job, or not visible to the caller."""

    status, slug, title = 404, "not-found", "Not found"


class WrongState(QueuelogError):
    """The job is not in a state this transition starts from."""

    status, slug, title = 409, "wrong-state", "Job is in the wrong state"


class NotHolder(QueuelogError):
    """A worker call on a job the caller does not hold."""

    status, slug, title = 409, "not-holder", "Job is not held by this worker"


class StaleAttempt(QueuelogError):
    """The attempt named is not the job's current one (fencing)."""

    status, slug, title = 409, "stale-attempt", "Stale attempt"


class Conflict(QueuelogError):
    """A name already taken, and similar conflicts with stored state."""

    status, slug, title = 409, "conflict", "Conflict"


class UnsupportedMediaType(QueuelogError):
    """The body is not ``application/json``."""

    status, slug, title = 415, "unsupported-media-type", "Unsupported media type"


class ValidationFailed(QueuelogError):
    """One or more fields fail validation."""

    status, slug, title = 422, "validation-error", "Validation failed"


class IdempotencyMismatch(QueuelogError):
    """The idempotency key was used before for a different request."""

    status, slug, title = 422, "idempotency-key-mismatch", "Idempotency key reused"


class TooManyRequests(QueuelogError):
    """Too many failed sign-ins (or password checks at once); carries Retry-After."""

    status, slug, title = 429, "too-many-requests", "Too many requests"


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


def _from_domain(err: QueuelogError) -> Response:
    return problem(err.status, err.slug, err.title, err.detail, err.errors, err.headers)


def _from_http(err: HTTPException) -> Response:
    code = err.code or 500
    headers = {k: v for k, v in err.get_headers() if k.lower() in {"allow", "retry-after"}}
    slug = (err.name or "error").lower().replace(" ", "-")
    return problem(code, slug, err.name or "Error", err.description or err.name or "", None,
                   headers)


def _from_unexpected(err: Exception) -> Response:
    current_app.logger.exception("unhandled error", exc_info=err)
    return problem(500, "internal-error", "Internal server error",
                   "The server failed; the error has been logged.")


def init_app(app: Flask) -> None:
    """Answer every error, Flask's own included, as problem+json."""
    app.register_error_handler(QueuelogError, _from_domain)
    app.register_error_handler(HTTPException, _from_http)
    app.register_error_handler(Exception, _from_unexpected)
