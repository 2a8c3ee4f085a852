"""Worker endpoints: claim (with long poll), heartbeat, complete, fail.

The worker's identity is always its key's name (V-04); a ``worker_id`` in a body is ignored.
"""
from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app, request

from .. import metrics
from ..auth import current_user, require
from ..errors import Forbidden
from ..jobs import Job
from ..longpoll import Outcome, long_polls
from ..sanitize import sanitize_error
from ..store import get_store
from ..validation import Fields, compact, json_body
from . import job_json
from .disconnect import client_gone

bp = Blueprint("worker", __name__)

MAX_WAIT = 30.0
MAX_LEASE = 43_200
JOB_ID = "<job_id:job_id>"


@bp.post("/jobs/claim")
@require("worker", write=True)
def claim() -> Any:
    """Claim the best due job (200), or answer 204 when none is due by ``wait``."""
    f = Fields(json_body(), ("types", "wait", "lease_seconds"), ignored=("worker_id",))
    types = f.string_list("types", max_items=100, default=None)
    wait = f.number("wait", 0, MAX_WAIT, default=0)
    lease = f.number("lease_seconds", 1, MAX_LEASE, default=None)
    configured = current_app.config["JOB_TYPES"]
    for name in types or ():
        if name not in configured:
            f.error("types", f"Unknown job type {name!r}.")
    f.check()
    who = current_user()
    if types is not None and who.types is not None and not set(types) <= set(who.types):
        raise Forbidden("This key may not claim some of these types.")
    if types is None:
        types = list(who.types) if who.types is not None else None
    outcome = _claim_waiting(who.name, types, lease, wait)
    if not outcome.jobs:
        headers = {} if outcome.retry_after is None else {"Retry-After": str(outcome.retry_after)}
        return "", 204, headers
    return job_json(outcome.jobs[0])


def _claim_waiting(worker: str, types: list[str] | None, lease: float | None,
                   wait: float) -> Outcome[Job]:
    """Claim now; if nothing is due, look again until ``wait`` runs out (``longpoll``)."""
    store = get_store()
    token = _bearer_token()

    def try_claim() -> list[Job]:
        # No lease given: the store uses the claimed job's type's lease, else LEASE_SECONDS.
        job = store.claim(worker, lease_seconds=lease, types=types)
        return [] if job is None else [job]

    def still_wanted() -> bool:
        # A key revoked while its claim waits must not get a job it could never complete,
        # nor a client that went away (a stopped worker): nobody would receive the job.
        return not client_gone() and store.accounts.key_for_token(token) is not None

    return long_polls().claim(try_claim, wait, still_wanted)


def _bearer_token() -> str:
    """The request's API key (workers are keys: ``require`` has checked it)."""
    return request.headers.get("Authorization", "").split(None, 1)[1].strip()


@bp.post(f"/jobs/{JOB_ID}/heartbeat")
@require("worker", write=True)
def heartbeat(job_id: int) -> Any:
    """Extend the lease of a job the caller holds."""
    f = Fields(json_body(), ("attempt", "lease_seconds"), ignored=("worker_id",))
    attempt = f.integer("attempt", 1, 2**31 - 1)
    lease = f.number("lease_seconds", 1, MAX_LEASE, default=None)
    f.check()
    return job_json(get_store().heartbeat(job_id, current_user().name, attempt,
                                          lease_seconds=lease))


@bp.post(f"/jobs/{JOB_ID}/complete")
@require("worker", write=True)
def complete(job_id: int) -> Any:
    """Complete a held job, with an optional result object."""
    f = Fields(json_body(), ("attempt", "result"), ignored=("worker_id",))
    attempt = f.integer("attempt", 1, 2**31 - 1)
    result = f.obj("result", default=None)
    result_json = None if result is None else compact(result)
    limit = current_app.config["MAX_PAYLOAD_BYTES"]
    if result_json is not None and len(result_json.encode("utf-8")) > limit:
        f.error("result", f"Larger than {limit} bytes as compact JSON.")
    f.check()
    job = get_store().complete(job_id, current_user().name, attempt, result_json)
    metrics.attempt_finished(job.type, "completed")
    return job_json(job)


@bp.post(f"/jobs/{JOB_ID}/fail")
@require("worker", write=True)
def fail(job_id: int) -> Any:
    """Fail a held attempt: retried after backoff, or failed for good."""
    f = Fields(json_body(), ("attempt", "error", "retry", "retry_in"), ignored=("worker_id",))
    attempt = f.integer("attempt", 1, 2**31 - 1)
    error = f.string("error", max_len=1_000_000, min_len=0, default="")
    retry = f.boolean("retry", default=True)
    retry_in = f.number("retry_in", 0, 86_400, default=None)
    f.check()
    clean = sanitize_error(error, current_app.config["MAX_ERROR_BYTES"])
    job = get_store().fail(job_id, current_user().name, attempt, clean, retry=retry,
                           retry_in=retry_in)
    metrics.attempt_finished(job.type, "failed")
    return job_json(job)
