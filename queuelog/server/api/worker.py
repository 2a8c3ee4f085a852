"""Worker endpoints: claim (with long poll; one job or ``max_jobs``), heartbeat, complete and
fail, each for one job or, for complete and fail, a batch fenced item by item.

The worker's identity is always its key's name (V-04); a ``worker_id`` in a body is ignored.
"""
from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app

from queuelog.server import actions
from queuelog.server.auth import current_user, require
from queuelog.model.problems import QueuelogError
from queuelog.model.jobs import Done, Job
from queuelog.server.requests.bodies import MAX_PROGRESS_BYTES
from queuelog.server.requests.check import FieldErrors, body, field_errors, given
from queuelog.server.requests.parse import compact
from queuelog.server.api.serialize import job_json
from queuelog.server.api.disconnect import client_gone

bp = Blueprint("worker", __name__)

JOB_ID = "<job_id:job_id>"


@bp.post("/jobs/claim")
@require(actions.claim, write=True)
def claim() -> Any:
    """Claim the best due job (200, or 204 when none is due by ``wait``); with
    ``max_jobs``, up to that many, as ``{"jobs": [...]}`` (maybe empty)."""
    data = body("ClaimRequest")
    max_jobs = given(data, "max_jobs")
    # The key's types and the revoked-key re-check of a waiting claim are actions.claim's.
    who = current_user()
    outcome = actions.claim(who, max_jobs or 1,
                            lease_seconds=given(data, "lease_seconds"),
                            types=given(data, "types"), wait=given(data, "wait", 0),
                            connected=lambda: not client_gone())
    headers = _retry_after(outcome)
    if max_jobs is not None:
        return {"jobs": [job_json(j, who) for j in outcome.jobs]}, 200, headers
    if not outcome.jobs:
        return "", 204, headers
    return job_json(outcome.jobs[0])


@bp.post(f"/jobs/{JOB_ID}/heartbeat")
@require(actions.heartbeat, write=True)
def heartbeat(job_id: int) -> Any:
    """Extend the lease of a job the caller holds; store its progress, if sent."""
    errors = FieldErrors()
    data = body("HeartbeatRequest", errors)
    progress = _object_json(data, "progress", errors, MAX_PROGRESS_BYTES)
    field_errors(errors)
    return job_json(actions.heartbeat(current_user(), job_id, data["attempt"],
                                      lease_seconds=given(data, "lease_seconds"),
                                      progress_json=progress))


@bp.post(f"/jobs/{JOB_ID}/complete")
@require(actions.complete, write=True)
def complete(job_id: int) -> Any:
    """Complete a held job, with an optional result object; with ``next``, claim another."""
    errors = FieldErrors()
    data = body("CompleteRequest", errors)
    result_json = _result_json(data, "result", errors)
    field_errors(errors)
    return _finished(actions.complete(current_user(), job_id, data["attempt"], result_json,
                                      then=_next(data), connected=lambda: not client_gone()))


@bp.post(f"/jobs/{JOB_ID}/fail")
@require(actions.fail, write=True)
def fail(job_id: int) -> Any:
    """Fail a held attempt: retried after backoff, or failed for good; with ``next``,
    claim another."""
    data = body("FailRequest")
    # The raw error text: actions.fail sanitizes it once the attempt is fenced.
    return _finished(actions.fail(current_user(), job_id, data["attempt"],
                                  given(data, "error", ""),
                                  retry=given(data, "retry", True),
                                  retry_in=given(data, "retry_in"), then=_next(data),
                                  connected=lambda: not client_gone()))


def _next(data: dict[str, Any]) -> actions.NextClaim | None:
    """A finish's ``next`` (a claim's body), or None when not asked for."""
    asked = data.get("next")
    if asked is None:
        return None
    return actions.NextClaim(types=given(asked, "types"), wait=given(asked, "wait", 0),
                             lease_seconds=given(asked, "lease_seconds"))


def _finished(done: actions.Finished) -> Any:
    """The job; with ``next``, ``{"job", "next"}`` (``next`` null when none was due)."""
    who = current_user()
    if done.next is None:
        return job_json(done.job, who)
    claimed = done.next.jobs
    return ({"job": job_json(done.job, who),
             "next": job_json(claimed[0], who) if claimed else None}, 200,
            _retry_after(done.next))


def _retry_after(outcome: Any) -> dict[str, str]:
    """``Retry-After`` when a waiting claim found no free slot to wait in."""
    return {} if outcome.retry_after is None else {"Retry-After": str(outcome.retry_after)}


@bp.post("/jobs/complete")
@require(actions.complete_many, write=True)
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
@require(actions.fail_many, write=True)
def fail_batch() -> Any:
    """Fail many held attempts in one transaction; each item fenced and answered on its own."""
    errors = FieldErrors()
    items = _items(body("FailBatch", errors), errors)
    field_errors(errors)
    done = actions.fail_many(current_user(), [
        (item["id"], item["attempt"], given(item, "error", ""), given(item, "retry", True),
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
    return _object_json(data, field, errors, current_app.config["MAX_PAYLOAD_BYTES"])


def _object_json(data: dict[str, Any], field: str, errors: FieldErrors,
                 limit: int) -> str | None:
    """An object field (``field``'s last name) as stored, compact JSON; over ``limit``
    bytes is an error at ``field``."""
    value = data.get(field.rsplit(".", 1)[-1]) if isinstance(data, dict) else None
    if not isinstance(value, dict) or errors.at(field):
        return None
    out = compact(value)
    if len(out.encode("utf-8")) > limit:
        errors.append({"field": field, "detail": f"Larger than {limit} bytes as compact JSON."})
    return out


def _outcome(job_id: int, got: Job | Done | QueuelogError) -> dict[str, Any]:
    """One item of a batch answer: the job's new status, or the problem as the single
    route would answer it."""
    if isinstance(got, QueuelogError):
        return {"id": job_id, "status": got.status, "type": got.type_uri, "detail": got.detail}
    return {"id": job_id, "status": 200, "job_status": got.status.value}
