"""Problem types and domain errors: what went wrong, in words both worlds share (no Flask)."""
from __future__ import annotations


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

    @property
    def type_uri(self) -> str:
        """The problem ``type`` this error is answered with."""
        return PROBLEM_TYPE + self.slug


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


class JobCancelled(QueuelogError):
    """A worker call on an attempt whose job was cancelled while it ran: stop the work."""

    status, slug, title = 409, "cancelled", "Job was cancelled"


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


class ConfigError(ValueError):
    """A configuration queuelog cannot start with; its message names the setting.

    Here, beside the other errors, so the store and the config can both raise it without
    importing each other (``queuelog.server.config`` re-exports it).
    """
