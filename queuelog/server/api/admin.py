"""Admin endpoints: retry one job or run it now, and repair many at once (bulk retry and
cancel)."""
from __future__ import annotations

from typing import Any

from flask import Blueprint

from queuelog.server import actions
from queuelog.server.auth import current_user, require
from queuelog.model.jobs import Priority, Status
from queuelog.server.requests.bodies import RETRY_STATUSES
from queuelog.server.requests.check import body
from queuelog.server.api.serialize import job_json

bp = Blueprint("admin", __name__)


@bp.post("/jobs/<job_id:job_id>/retry")
@require(actions.retry, write=True)
def retry(job_id: int) -> Any:
    """Failed or cancelled back to pending, with fresh retries; history kept."""
    body("Empty")  # unknown fields are a 422, as everywhere
    return job_json(actions.retry(current_user(), job_id))


@bp.post("/jobs/<job_id:job_id>/run")
@require(actions.run_now, write=True)
def run_now(job_id: int) -> Any:
    """A delayed or retrying pending job due now (200 unchanged when due already)."""
    body("Empty")
    return job_json(actions.run_now(current_user(), job_id))


@bp.post("/jobs/retry")
@require(actions.bulk_retry, write=True)
def bulk_retry() -> Any:
    """Retry every failed or cancelled job named by ``ids`` or matched by ``filter``."""
    ids, match = _bulk("BulkRetry")
    statuses = [Status(match["status"])] if match.get("status") else [
        Status(s) for s in RETRY_STATUSES]
    return {"count": actions.bulk_retry(current_user(), ids=ids, statuses=statuses,
                                        type=match.get("type"), priority=match.get("priority"))}


@bp.post("/jobs/cancel")
@require(actions.bulk_cancel, write=True)
def bulk_cancel() -> Any:
    """Cancel every pending job named or matched (a producer: only its own)."""
    ids, match = _bulk("BulkCancel")
    return {"count": actions.bulk_cancel(current_user(), ids=ids, type=match.get("type"),
                                         priority=match.get("priority"))}


def _bulk(name: str) -> tuple[list[int] | None, dict[str, Any]]:
    """A checked bulk body: its ids, or its filter (null fields left out, priority a value)."""
    data = body(name)
    match = {k: v for k, v in data.get("filter", {}).items() if v is not None}
    if "priority" in match:
        match["priority"] = int(Priority.from_label(match["priority"]))
    return data.get("ids"), match
