"""Read endpoints: list and get jobs, health, metrics, the OpenAPI document."""
from __future__ import annotations

import base64
import binascii
from typing import Any

from flask import Blueprint, current_app, request

from queuelog.server import actions
from queuelog.server.auth import READERS, current_user, require
from queuelog.server.errors import unavailable
from queuelog.model.jobs import Priority, Status
from queuelog.server.store import get_store
from queuelog.server.requests.check import field_errors
from queuelog.server.api.serialize import job_json

bp = Blueprint("read", __name__)

LIST_PARAMS = ("status", "type", "priority", "limit", "cursor")


@bp.get("/jobs")
@require(*READERS)
def list_jobs() -> Any:
    """A newest-first page of the jobs the caller may see, with a keyset cursor."""
    args = request.args
    errors: list[dict[str, str]] = []
    status = _choice(args, "status", {s.value: s for s in Status}, errors)
    priority = _choice(args, "priority", {p.label: int(p) for p in Priority}, errors)
    job_type = args.get("type")
    # NUL: no type holds one, and PostgreSQL refuses it in a query (a 500, not a 422).
    if job_type is not None and (not 1 <= len(job_type) <= 100 or "\x00" in job_type):
        errors.append({"field": "type", "detail": "Must be 1 to 100 characters, no NUL."})
    limit = _int_arg(args, "limit", 1, 200, 50, errors)
    before = decode_cursor(args["cursor"], errors) if "cursor" in args else None
    field_errors(errors)
    page = actions.list_jobs(current_user(), status=status, type=job_type, priority=priority,
                             limit=limit, before=before)
    return {"jobs": [job_json(j) for j in page.jobs],
            "next_cursor": None if page.older is None else encode_cursor(page.older)}


@bp.get("/jobs/<job_id:job_id>")
@require(*READERS)
def get_job(job_id: int) -> Any:
    """One job with its attempt history (404 when not visible to the caller)."""
    return job_json(actions.get_job(current_user(), job_id))


@bp.get("/healthz")
def healthz() -> Any:
    """Liveness and database reachability; the one endpoint without credentials."""
    try:
        get_store().ping()
    except Exception as exc:  # any driver error means "not healthy", never a 500
        # One log line per incident (errors.unavailable), not a traceback per probe.
        return unavailable(exc, "The database does not answer.")
    return {"status": "ok"}


@bp.get("/metrics")
@require("admin", "metrics")
def metrics() -> Any:
    """Prometheus exposition: gauges read from the database now, counters, latencies."""
    from queuelog.server.metrics import exposition
    body, content_type = exposition(get_store(), list(current_app.config["JOB_TYPES"]),
                                    request.headers.get("Accept"))
    return body, 200, {"Content-Type": content_type}


@bp.get("/openapi.json")
@require(*READERS, "metrics")
def openapi() -> Any:
    """The OpenAPI 3.1 document of this API."""
    from queuelog.server.requests.openapi import document
    return document(current_app.config)


def encode_cursor(job_id: int) -> str:
    """An opaque cursor for the page after ``job_id``."""
    return base64.urlsafe_b64encode(f"v1:{job_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str, errors: list[dict[str, str]]) -> int | None:
    """The job id inside a cursor; records an error if it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        prefix, _, number = raw.partition(":")
        if prefix == "v1" and number.isdigit() and len(number) <= 18:
            return int(number)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    errors.append({"field": "cursor", "detail": "Not a cursor from a previous page."})
    return None


def _choice(args: Any, name: str, options: dict[str, Any], errors: list[dict[str, str]]) -> Any:
    value = args.get(name)
    if value is None:
        return None
    if value not in options:
        errors.append({"field": name, "detail": f"Must be one of {', '.join(options)}."})
    return options.get(value)


def _int_arg(args: Any, name: str, lo: int, hi: int, default: int,
             errors: list[dict[str, str]]) -> int:
    raw = args.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 6 or not lo <= int(raw) <= hi:
        errors.append({"field": name, "detail": f"Must be an integer from {lo} to {hi}."})
        return default
    return int(raw)
