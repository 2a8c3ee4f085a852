"""Read endpoints: list and get jobs, health, metrics, the OpenAPI document."""
from __future__ import annotations

from typing import Any

from flask import Blueprint, request

from queuelog.server import actions
from queuelog.server.auth import current_user, require
from queuelog.server.errors import unavailable
from queuelog.model.jobs import Priority, Status
from queuelog.server.requests.check import query
from queuelog.server.requests.parse import decode_cursor, encode_cursor
from queuelog.server.api.serialize import job_json
from queuelog.server.api.disconnect import client_gone

bp = Blueprint("read", __name__)


@bp.get("/jobs")
@require(actions.list_jobs)
def list_jobs() -> Any:
    """A newest-first page of the jobs the caller may see, with a keyset cursor."""
    q = query("JobListQuery")
    status = Status(q["status"]) if "status" in q else None
    priority = int(Priority.from_label(q["priority"])) if "priority" in q else None
    job_type, limit = q.get("type"), q.get("limit", 50)
    before = decode_cursor(q["cursor"]) if "cursor" in q else None
    who = current_user()
    page = actions.list_jobs(who, status=status, type=job_type, priority=priority,
                             limit=limit, before=before, schedule=q.get("schedule"),
                             producer=q.get("producer"), worker=q.get("worker"))
    return {"jobs": [job_json(j, who) for j in page.jobs],
            "next_cursor": None if page.older is None else encode_cursor(page.older)}


@bp.get("/jobs/<job_id:job_id>")
@require(actions.get_job)
def get_job(job_id: int) -> Any:
    """One job with its attempt history (404 when not visible to the caller); with
    ``wait``, answered once it has finished, or when the wait runs out."""
    who = current_user()
    job, retry_after = actions.get_job(who, job_id, wait=query("JobQuery").get("wait", 0),
                                       connected=lambda: not client_gone())
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    return job_json(job, who), 200, headers


@bp.get("/healthz")
def healthz() -> Any:
    """Liveness, database reachability, and whether a write could be made now; the one
    endpoint without credentials."""
    try:
        problem = actions.health()
    except Exception as exc:  # any driver error means "not healthy", never a 500
        # One log line per incident (errors.unavailable), not a traceback per probe.
        return unavailable(exc, "The database does not answer.")
    # The database answers (200 {"status": "ok"}, as the contract has it); writes may
    # still be impossible (a write lock held elsewhere, a full disk): said in fields added
    # then, so a healthy answer keeps its pinned shape.
    if problem is not None:
        return {"status": "ok", "writes": "unavailable", "writes_detail": problem}
    return {"status": "ok"}


@bp.get("/metrics")
@require(actions.scrape)
def metrics() -> Any:
    """Prometheus exposition: gauges read from the database now, counters, latencies."""
    body, content_type = actions.scrape(current_user(), request.headers.get("Accept"))
    return body, 200, {"Content-Type": content_type}


@bp.get("/openapi.json")
@require(actions.api_document)
def openapi() -> Any:
    """The OpenAPI 3.1 document of this API."""
    return actions.api_document(current_user())
