"""What the client raises, and how an error answer becomes a ``ProblemError``.

Every error answer is a ``ProblemError`` (problem+json or not: a proxy's HTML page too), a
server that does not answer at all is ``Unreachable``, and a wait that ran out before the job
finished is ``JobWaitTimeout``; all three are ``ClientError``.
"""
from __future__ import annotations

import json
from typing import Any

import httpx

# Answers whose outcome is unknown: the request may or may not have been applied.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


class ClientError(Exception):
    """Base of the errors raised by ``Client``."""


class ProblemError(ClientError):
    """An error answer (RFC 9457 problem+json), or any non-2xx answer turned into one."""

    def __init__(self, status: int, type: str, detail: str,
                 errors: list[dict[str, Any]] | None = None, *, title: str = "",
                 retry_after: float | None = None) -> None:
        super().__init__(f"{status} {type}: {detail}")
        self.status = status
        self.type = type
        self.title = title
        self.detail = detail
        self.errors = errors or []
        self.retry_after = retry_after

    @property
    def transient(self) -> bool:
        """True when retrying the same request later may succeed (5xx, 429)."""
        return self.status in TRANSIENT_STATUSES or self.status > 500

    @property
    def cancelled(self) -> bool:
        """True for the 409 its holder gets once a running job was cancelled."""
        return self.status == 409 and self.type.endswith("cancelled")


class JobWaitTimeout(ClientError, TimeoutError):
    """``wait`` (or ``enqueue(wait=)``) ran out before the job finished.

    A ``TimeoutError``, as Celery's ``AsyncResult.get`` and RQ raise, so that an unfinished
    job is never mistaken for a finished one; it keeps the job's ``id`` and the ``job`` as
    last seen (``None`` if no answer came), so the caller can wait again or cancel it.
    """

    def __init__(self, id: int, job: dict[str, Any] | None, timeout: float) -> None:
        status = job.get("status") if job else "unknown"
        super().__init__(f"job {id} did not finish within {timeout:g} s (status {status})")
        self.id = id
        self.job = job


class Unreachable(ClientError):
    """The server did not answer: connection refused or reset, or a timeout."""


def retry_after(resp: httpx.Response) -> float | None:
    """The answer's ``Retry-After`` in seconds, if it has one."""
    try:
        return float(resp.headers.get("Retry-After", ""))
    except ValueError:
        return None


def problem(resp: httpx.Response) -> ProblemError:
    """A ``ProblemError`` from an error answer, problem+json or not (a proxy's HTML page)."""
    pause = retry_after(resp)
    try:
        body = resp.json()
    except (ValueError, json.JSONDecodeError):
        body = None
    if isinstance(body, dict) and "type" in body:
        return ProblemError(resp.status_code, str(body.get("type")), str(body.get("detail", "")),
                            body.get("errors") if isinstance(body.get("errors"), list) else None,
                            title=str(body.get("title", "")), retry_after=pause)
    text = " ".join(resp.text.split())[:200] or resp.reason_phrase
    return ProblemError(resp.status_code, "about:blank", text, None, title=resp.reason_phrase,
                        retry_after=pause)
