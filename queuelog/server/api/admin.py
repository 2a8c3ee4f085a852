"""Admin endpoints: retry one job, and repair many at once (bulk retry and cancel)."""
from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app

from queuelog.server import actions
from queuelog.server.auth import current_user, require
from queuelog.model.jobs import Priority, Status
from queuelog.server.requests.check import MAX_JOB_ID, Fields, json_body
from queuelog.server.api.serialize import job_json

bp = Blueprint("admin", __name__)

MAX_BULK_IDS = 1000  # ids in one bulk request; a filter has no limit
RETRY_STATUSES = (Status.FAILED.value, Status.CANCELLED.value)


@bp.post("/jobs/<job_id:job_id>/retry")
@require("admin", write=True)
def retry(job_id: int) -> Any:
    """Failed or cancelled back to pending, with fresh retries; history kept."""
    Fields(json_body(), ()).check()  # unknown fields are a 422, as everywhere
    return job_json(actions.retry(current_user(), job_id))


@bp.post("/jobs/retry")
@require("admin", write=True)
def bulk_retry() -> Any:
    """Retry every failed or cancelled job named by ``ids`` or matched by ``filter``."""
    ids, match = parse_bulk(json_body(), ("status", "type", "priority"))
    statuses = [Status(match["status"])] if match.get("status") else [
        Status(s) for s in RETRY_STATUSES]
    return {"count": actions.bulk_retry(current_user(), ids=ids, statuses=statuses,
                                        type=match.get("type"), priority=match.get("priority"))}


@bp.post("/jobs/cancel")
@require("producer", "admin", write=True)
def bulk_cancel() -> Any:
    """Cancel every pending job named or matched (a producer: only its own)."""
    ids, match = parse_bulk(json_body(), ("type", "priority"))
    return {"count": actions.bulk_cancel(current_user(), ids=ids, type=match.get("type"),
                                         priority=match.get("priority"))}


def parse_bulk(body: dict[str, Any], filters: tuple[str, ...]) -> tuple[list[int] | None,
                                                                        dict[str, Any]]:
    """``{"ids": [...]}`` or ``{"filter": {...}}`` (exactly one), validated whole (422)."""
    f = Fields(body, ("ids", "filter"))
    if ("ids" in body) == ("filter" in body):
        f.error("ids", "Give ids or filter, not both and not neither.")
    ids: list[int] | None = None
    match: dict[str, Any] = {}
    if "ids" in body:
        raw = body["ids"]
        # JSON has one number type: 7.0 is the id 7, as everywhere in the API.
        if isinstance(raw, list):
            raw = [int(i) if isinstance(i, float) and i.is_integer() else i for i in raw]
        if (not isinstance(raw, list) or not 1 <= len(raw) <= MAX_BULK_IDS or not all(
                isinstance(i, int) and not isinstance(i, bool) and 1 <= i <= MAX_JOB_ID
                for i in raw)):
            f.error("ids", f"Must be a list of 1 to {MAX_BULK_IDS} job ids.")
        else:
            ids = raw
    if "filter" in body:
        given = f.obj("filter")
        if given is not None:
            match = _parse_filter(f, given, filters)
    f.check()
    return ids, match


def _parse_filter(f: Fields, given: dict[str, Any], filters: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in given.items():
        field = f"filter.{name}"
        if name not in filters:
            f.error(field, f"Unknown filter; allowed: {', '.join(filters)}.")
        elif value is None:
            continue  # null means "any", as elsewhere
        elif name == "status":
            if value not in RETRY_STATUSES:
                f.error(field, "Must be failed or cancelled.")
            else:
                out[name] = value
        elif name == "type":
            if not isinstance(value, str) or value not in current_app.config["JOB_TYPES"]:
                f.error(field, "Unknown job type; allowed: "
                        f"{', '.join(sorted(current_app.config['JOB_TYPES']))}.")
            else:
                out[name] = value
        elif name == "priority":
            if not isinstance(value, str) or value not in {p.label for p in Priority}:
                f.error(field, "Must be one of low, medium, high, critical.")
            else:
                out[name] = int(Priority.from_label(value))
    return out
