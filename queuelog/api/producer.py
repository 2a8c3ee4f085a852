"""Producer endpoints: enqueue and cancel."""
from __future__ import annotations

import hashlib
import json
from typing import Any

from flask import Blueprint, current_app, request, url_for

from .. import actions, metrics
from ..auth import current_user, require
from ..errors import Forbidden
from ..jobs import Priority
from ..store import NewJob, get_store
from ..validation import Fields, compact, idempotency_header, json_body
from . import job_json, notify

bp = Blueprint("producer", __name__)

ENQUEUE_FIELDS = ("type", "payload", "priority", "max_retries", "run_at", "delay_seconds",
                  "idempotency_key")
MAX_DELAY_SECONDS = 366 * 86_400


@bp.post("/jobs")
@require("producer", "admin", write=True)
def enqueue() -> Any:
    """Enqueue a job (201), or replay an idempotent request (200)."""
    new = parse_new_job(json_body())
    job, created = get_store().enqueue(new)
    body = job_json(job)
    if created:
        notify()
        metrics.jobs_enqueued(job.type)
        return body, 201, {"Location": url_for("read.get_job", job_id=job.id)}
    return body, 200, {"Idempotent-Replayed": "true",
                       "Location": url_for("read.get_job", job_id=job.id)}


@bp.post("/jobs/<job_id:job_id>/cancel")
@require("producer", "admin", write=True)
def cancel(job_id: int) -> Any:
    """Cancel a pending job: a producer its own, an admin any."""
    Fields(json_body(), ()).check()  # a body, if sent, must be a JSON object with no fields
    return job_json(actions.cancel(current_user(), job_id))


def parse_new_job(body: dict[str, Any]) -> NewJob:
    """Validate an enqueue body (422), then check the key's limits (403)."""
    config = current_app.config
    f = Fields(body, ENQUEUE_FIELDS)
    job_type = f.string("type", max_len=100)
    options: dict[str, Any] = {}
    if job_type is not None:
        options = config["JOB_TYPES"].get(job_type, _UNKNOWN)
        if options is _UNKNOWN:
            f.error("type", f"Unknown job type; allowed: {', '.join(sorted(config['JOB_TYPES']))}.")
            options = {}
    payload = f.obj("payload", default={})
    payload_json = compact(payload) if payload is not None else None
    limit = int(options.get("max_payload_bytes", config["MAX_PAYLOAD_BYTES"]))
    if payload_json is not None and len(payload_json.encode("utf-8")) > limit:
        f.error("payload", f"Larger than {limit} bytes as compact JSON.")
    label = f.string("priority", max_len=16, default="low")
    priority = None
    if label is not None:
        try:
            priority = Priority.from_label(label)
        except KeyError:
            f.error("priority", "Must be one of low, medium, high, critical.")
    default_retries = int(options.get("max_retries", config["DEFAULT_MAX_RETRIES"]))
    max_retries = f.integer("max_retries", 0, 25, default=default_retries)
    run_at = f.timestamp("run_at")
    delay = f.number("delay_seconds", 0, MAX_DELAY_SECONDS, default=None)
    if "run_at" in body and "delay_seconds" in body:
        f.error("delay_seconds", "Give run_at or delay_seconds, not both.")
    key = _idempotency_key(f)
    f.check()
    who = current_user()
    if who.role == "producer":
        if who.types is not None and job_type not in who.types:
            raise Forbidden(f"This key may not enqueue jobs of type {job_type!r}.")
        if priority > who.max_priority:
            raise Forbidden("This key may not enqueue at priority "
                            f"{label!r} (its maximum is "
                            f"{Priority.from_value(who.max_priority).label!r}).")
    request_hash = None
    if key is not None:
        request_hash = hashlib.sha256(json.dumps(
            # delay_seconds omitted, 0 and 0.0 all mean "now"; 5 and 5.0 are one number.
            [job_type, payload, int(priority), max_retries, run_at,
             float(delay) if delay else None],
            sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return NewJob(producer=who.name, type=job_type, payload_json=payload_json,
                  priority=int(priority), max_retries=max_retries, run_at=run_at,
                  delay_seconds=delay, idempotency_key=key, request_hash=request_hash)


_UNKNOWN: Any = object()


def _idempotency_key(f: Fields) -> str | None:
    """The key from the body or the ``Idempotency-Key`` header; they must agree."""
    in_body = f.string("idempotency_key", max_len=255, printable_ascii=True, default=None)
    header = idempotency_header(request.headers.get("Idempotency-Key"))
    if header is not None:
        if not 1 <= len(header) <= 255 or not all(" " <= c <= "~" for c in header):
            f.error("Idempotency-Key", "Must be 1 to 255 printable ASCII characters.")
            return None
        if in_body is not None and in_body != header:
            f.error("idempotency_key", "Differs from the Idempotency-Key header.")
        return header
    return in_body
