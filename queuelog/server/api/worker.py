"""Worker endpoints: claim (with long poll; one job or ``max_jobs``), heartbeat, complete and
fail, each for one job or, for complete and fail, a batch fenced item by item.

The worker's identity is always its key's name (V-04); a ``worker_id`` in a body is ignored.
"""
from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app, request

from queuelog.server import actions
from queuelog.server.auth import Principal, current_user, require
from queuelog.model.problems import Forbidden, QueuelogError
from queuelog.model.jobs import Job
from queuelog.server.longpoll import PollResult, long_polls
from queuelog.server.sanitize import sanitize_error
from queuelog.server.requests.bodies import MAX_LEASE, MAX_WAIT  # noqa: F401  (re-exported: their old home)
from queuelog.server.store import get_store
from queuelog.server.requests.check import FieldErrors, body, field_errors, given
from queuelog.server.requests.parse import compact
from queuelog.server.api import job_json
from queuelog.server.api.disconnect import client_gone

bp = Blueprint("worker", __name__)

JOB_ID = "<job_id:job_id>"


@bp.post("/jobs/claim")
@require("worker", write=True)
def claim() -> Any:
    """Claim the best due job (200, or 204 when none is due by ``wait``); with
    ``max_jobs``, up to that many, as ``{"jobs": [...]}`` (maybe empty)."""
    data = body("ClaimRequest")
    types = given(data, "types")
    who = current_user()
    if types is not None and who.types is not None and not set(types) <= set(who.types):
        raise Forbidden("This key may not claim some of these types.")
    if types is None:
        types = list(who.types) if who.types is not None else None
    max_jobs = given(data, "max_jobs")
    outcome = _claim_waiting(who, types, given(data, "lease_seconds"),
                             given(data, "wait", 0), max_jobs or 1)
    headers = {} if outcome.retry_after is None else {"Retry-After": str(outcome.retry_after)}
    if max_jobs is not None:
        return {"jobs": [job_json(j) for j in outcome.jobs]}, 200, headers
    if not outcome.jobs:
        return "", 204, headers
    return job_json(outcome.jobs[0])


def _claim_waiting(who: Principal, types: list[str] | None, lease: float | None,
                   wait: float, max_jobs: int = 1) -> PollResult[Job]:
    """Claim now; if nothing is due, look again until ``wait`` runs out (``longpoll``)."""
    accounts = get_store().accounts
    token = _bearer_token()

    def try_claim() -> list[Job]:
        # No lease given: the store uses the claimed job's type's lease, else LEASE_SECONDS.
        return actions.claim(who, max_jobs, lease_seconds=lease, types=types)

    def still_wanted() -> bool:
        # A key revoked while its claim waits must not get a job it could never complete,
        # nor a client that went away (a stopped worker): nobody would receive the job.
        return not client_gone() and accounts.key_for_token(token) is not None

    return long_polls().claim(try_claim, wait, still_wanted)


def _bearer_token() -> str:
    """The request's API key (workers are keys: ``require`` has checked it)."""
    return request.headers.get("Authorization", "").split(None, 1)[1].strip()


@bp.post(f"/jobs/{JOB_ID}/heartbeat")
@require("worker", write=True)
def heartbeat(job_id: int) -> Any:
    """Extend the lease of a job the caller holds."""
    data = body("HeartbeatRequest")
    return job_json(actions.heartbeat(current_user(), job_id, data["attempt"],
                                      lease_seconds=given(data, "lease_seconds")))


@bp.post(f"/jobs/{JOB_ID}/complete")
@require("worker", write=True)
def complete(job_id: int) -> Any:
    """Complete a held job, with an optional result object."""
    errors = FieldErrors()
    data = body("CompleteRequest", errors)
    result_json = _result_json(data, "result", errors)
    field_errors(errors)
    return job_json(actions.complete(current_user(), job_id, data["attempt"], result_json))


@bp.post(f"/jobs/{JOB_ID}/fail")
@require("worker", write=True)
def fail(job_id: int) -> Any:
    """Fail a held attempt: retried after backoff, or failed for good."""
    data = body("FailRequest")
    return job_json(actions.fail(current_user(), job_id, data["attempt"], _clean_error(data),
                                 retry=given(data, "retry", True),
                                 retry_in=given(data, "retry_in")))


@bp.post("/jobs/complete")
@require("worker", write=True)
def complete_batch() -> Any:
    """Complete many held jobs in one transaction; each item fenced and answered on its own."""
    errors = FieldErrors()
    data = body("CompleteBatch", errors)
    items = _items(data, errors)
    results = [_result_json(item, f"jobs[{i}].result", errors) for i, item in enumerate(items)]
    field_errors(errors)
    done = actions.complete_many(current_user(), [
        (item["id"], item["attempt"], result) for item, result in zip(items, results)])
    return {"results": [_outcome(item["id"], got) for item, got in zip(items, done)]}


@bp.post("/jobs/fail")
@require("worker", write=True)
def fail_batch() -> Any:
    """Fail many held attempts in one transaction; each item fenced and answered on its own."""
    errors = FieldErrors()
    items = _items(body("FailBatch", errors), errors)
    field_errors(errors)
    done = actions.fail_many(current_user(), [
        (item["id"], item["attempt"], _clean_error(item), given(item, "retry", True),
         given(item, "retry_in")) for item in items])
    return {"results": [_outcome(item["id"], got) for item, got in zip(items, done)]}


def _items(data: dict[str, Any], errors: FieldErrors) -> list[dict[str, Any]]:
    """A checked batch's items; the same job twice in one request is a 422."""
    if errors.exactly("jobs"):
        return []  # not a list, or over MAX_BATCH: its items were not checked
    items: list[dict[str, Any]] = data["jobs"]
    first: dict[int, int] = {}
    for i, item in enumerate(items):
        job_id = item.get("id") if isinstance(item, dict) else None
        if not isinstance(job_id, int):
            continue  # already an error of the schema's
        if job_id in first:
            errors.append({"field": f"jobs[{i}].id", "detail":
                           f"Job {job_id} is also jobs[{first[job_id]}]."})
        first.setdefault(job_id, i)
    return items


def _result_json(data: dict[str, Any], field: str, errors: FieldErrors) -> str | None:
    """A result object as stored (compact JSON); too large is an error at ``field``."""
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, dict) or errors.at(field):
        return None
    out = compact(result)
    limit = current_app.config["MAX_PAYLOAD_BYTES"]
    if len(out.encode("utf-8")) > limit:
        errors.append({"field": field, "detail": f"Larger than {limit} bytes as compact JSON."})
    return out


def _clean_error(data: dict[str, Any]) -> str:
    """The worker's error text, sanitized and cut before it is stored (V-10)."""
    return sanitize_error(given(data, "error", ""), current_app.config["MAX_ERROR_BYTES"])


def _outcome(job_id: int, got: Job | QueuelogError) -> dict[str, Any]:
    """One item of a batch answer: the job's new status, or the problem as the single
    route would answer it."""
    if isinstance(got, QueuelogError):
        return {"id": job_id, "status": got.status, "type": got.type_uri, "detail": got.detail}
    return {"id": job_id, "status": 200, "job_status": got.status.value}
