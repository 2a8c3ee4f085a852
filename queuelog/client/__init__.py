"""A small HTTP client for any queuelog server (the worker runner is built on it).

It imports nothing from the server side (no Flask, no SQLAlchemy), so a worker host needs only
this package and httpx. Jobs are plain dicts, as the API sends them; every error answer is a
``ProblemError``, and a server that does not answer at all is ``Unreachable``.

``from queuelog.client import Client`` is the public import path; the parts behind it are
``api`` (one method per API call), ``retries`` (what is retried and for how long),
``transport`` (the kept-alive HTTP) and ``errors``.
"""
from __future__ import annotations

from queuelog.client.api import Client
from queuelog.client.errors import (TRANSIENT_STATUSES, ClientError, JobWaitTimeout,
                                    ProblemError, Unreachable)
from queuelog.client.retries import (EARLY_ANSWER_PAUSE, FINISHED, MAX_LEASES_KEPT, MAX_WAIT,
                                     RETRY_FIRST_SECONDS, RETRY_MAX_SECONDS, HeldJob, backoff,
                                     lease_deadline)
from queuelog.client.transport import KEEPALIVE_EXPIRY, TIMEOUT

__all__ = [
    "Client", "ClientError", "ProblemError", "JobWaitTimeout", "Unreachable", "HeldJob",
    "backoff", "lease_deadline", "TIMEOUT", "KEEPALIVE_EXPIRY", "RETRY_FIRST_SECONDS",
    "RETRY_MAX_SECONDS", "TRANSIENT_STATUSES", "MAX_WAIT", "EARLY_ANSWER_PAUSE", "FINISHED",
    "MAX_LEASES_KEPT",
]
