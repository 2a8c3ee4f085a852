"""Producer endpoints: enqueue one job or a batch, and cancel."""
from __future__ import annotations

from typing import Any, Mapping

from flask import Blueprint, current_app, request

from queuelog.server import actions
from queuelog.server.auth import Principal, current_user, require
from queuelog.model.problems import ValidationFailed
from queuelog.model.jobs import Priority
from queuelog.model.tracecontext import from_headers
from queuelog.server.store import Item, NewJob
from queuelog.server.requests.bodies import IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_RULE
from queuelog.server.requests.check import FieldErrors, body, declared, field_errors, given
from queuelog.server.requests.parse import compact, idempotency_header, timestamp_us
from queuelog.server.api.serialize import job_json

bp = Blueprint("producer", __name__)



@bp.post("/jobs")
@require(actions.enqueue, write=True)
def enqueue() -> Any:
    """Enqueue a job (201), or replay an idempotent request (200)."""
    errors = FieldErrors()
    data = body("NewJob", errors)
    header = _header_key(errors)
    if header is not None and not errors.at("idempotency_key") \
            and given(data, "idempotency_key", header) != header:
        errors.append({"field": "idempotency_key",
                       "detail": "Differs from the Idempotency-Key header."})
    who = current_user()
    new = parse_new_job(data, who, "", errors, header, trace=_trace())
    field_errors(errors)
    job, created = actions.enqueue(who, new)  # 403 past the key's limits
    # The path of read.get_job, written out: url_for would build a URL adapter for it on
    # every enqueue, the hottest route. A test pins the two equal, under a mount point too.
    location = {"Location": f"{request.script_root}/jobs/{job.id}"}
    if created:
        return job_json(job), 201, location
    return job_json(job), 200, {"Idempotent-Replayed": "true", **location}


@bp.post("/jobs/batch")
@require(actions.enqueue_many, write=True)
def enqueue_batch() -> Any:
    """Enqueue many jobs in one transaction, all or nothing (201; 200 if all replayed)."""
    errors = FieldErrors()
    data = body("NewJobBatch", errors)
    if "Idempotency-Key" in request.headers:
        errors.append({"field": "Idempotency-Key", "detail": "Not taken on a batch: give "
                       "each item its own idempotency_key."})
    # Items are read only when the list itself passed (a list over MAX_BATCH is not walked).
    items = data["jobs"] if not errors.exactly("jobs", "") else []
    who = current_user()
    config = current_app.config
    trace = _trace()  # one request, one trace context: every item keeps it
    news: list[NewJob | None] = []
    first_use: dict[str, int] = {}
    for i, item in enumerate(items):
        prefix = f"jobs[{i}]"
        news.append(parse_new_job(item, who, prefix, errors, config=config, trace=trace)
                    if isinstance(item, dict) else None)
        key = item.get("idempotency_key") if isinstance(item, dict) else None
        if isinstance(key, str):
            if key in first_use:
                errors.append({"field": f"{prefix}.idempotency_key",
                               "detail": f"Used by jobs[{first_use[key]}] too."})
            first_use.setdefault(key, i)
    field_errors(errors)  # 422 over 403: any invalid item fails the batch as a 422
    jobs, replayed = actions.enqueue_many(who, [n for n in news if n is not None])
    created = len(replayed) < len(jobs)
    return {"jobs": [job_json(j, who) for j in jobs], "replayed": replayed}, 201 if created else 200


@bp.post("/jobs/<job_id:job_id>/cancel")
@require(actions.cancel, write=True)
def cancel(job_id: int) -> Any:
    """Cancel a pending job: a producer its own, an admin any."""
    body("Empty")  # a body, if sent, must be a JSON object with no fields
    return job_json(actions.cancel(current_user(), job_id))


def parse_new_job(data: dict[str, Any], who: Principal, prefix: str, errors: FieldErrors,
                  header_key: str | None = None,
                  config: Mapping[str, Any] | None = None,
                  trace: tuple[str | None, str | None] = (None, None)) -> NewJob | None:
    """A checked enqueue body as a NewJob; what no schema states goes to ``errors``
    (payload size per type, 422). The key's limits are ``actions.enqueue``'s (403).
    ``config``: the app's, looked up once by a batch for all its items; ``trace``: the
    request's (traceparent, tracestate), checked."""
    config = current_app.config if config is None else config
    payload_at = f"{prefix}.payload" if prefix else "payload"
    job_type = data.get("type")
    options = config["JOB_TYPES"].get(job_type, {}) if isinstance(job_type, str) else {}
    payload = given(data, "payload", {})
    # errors.at is O(1): a batch of bad items costs its size, not its size squared (bug 8).
    payload_json = None if errors and errors.at(payload_at) else compact(payload)
    limit = int(options.get("max_payload_bytes", config["MAX_PAYLOAD_BYTES"]))
    # A character is at most 4 bytes: only text that may be over is encoded to measure it.
    if payload_json is not None and len(payload_json) * 4 > limit \
            and len(payload_json.encode("utf-8")) > limit:
        errors.append({"field": payload_at,
                       "detail": f"Larger than {limit} bytes as compact JSON."})
    if errors and errors.at(prefix):
        return None  # this item (or the body) is invalid: the request will be a 422
    label = given(data, "priority", "low")
    priority = Priority.from_label(label)
    max_retries = given(data, "max_retries",
                        int(options.get("max_retries", config["DEFAULT_MAX_RETRIES"])))
    run_at = given(data, "run_at")
    run_at_us = None if run_at is None else timestamp_us(run_at)
    delay = given(data, "delay_seconds")
    key = header_key if header_key is not None else given(data, "idempotency_key")
    parents = _parents(given(data, "depends_on", ()), prefix, errors)
    if parents is None:
        return None
    return NewJob(producer=who.name, type=job_type, payload_json=payload_json or "{}",
                  priority=int(priority), max_retries=max_retries, run_at=run_at_us,
                  delay_seconds=delay, idempotency_key=key, depends_on=parents,
                  on_parent_failure=given(data, "on_parent_failure"),
                  traceparent=trace[0], tracestate=trace[1])


def _parents(given_: Any, prefix: str, errors: FieldErrors) -> tuple[Any, ...] | None:
    """``depends_on`` as job ids and ``Item``s; an item must name an earlier one (else
    None, the error said). Whether each id is a job the caller may read is the store's."""
    index = int(prefix[5:-1]) if prefix.startswith("jobs[") else 0
    out: list[Any] = []
    for k, parent in enumerate(given_):
        if isinstance(parent, dict):
            if parent["item"] >= index:
                errors.append({"field": f"{prefix}.depends_on[{k}]", "detail":
                               "Must name an earlier item of this batch."})
                return None
            out.append(Item(parent["item"]))
        else:
            out.append(parent)
    return tuple(out)


def _trace() -> tuple[str | None, str | None]:
    """The request's W3C trace context, checked; what is invalid is dropped, not refused
    (the spec: a receiver that cannot parse ``traceparent`` starts afresh)."""
    headers = request.headers
    if "traceparent" not in headers:
        return None, None  # the common case: no list built
    return from_headers(headers.getlist("traceparent"), headers.getlist("tracestate"))


def _header_key(errors: FieldErrors) -> str | None:
    """The ``Idempotency-Key`` header as a key (checked as the body's field is), or None."""
    try:
        header = idempotency_header(request.headers.get("Idempotency-Key"))
    except ValidationFailed as exc:
        errors.extend(exc.errors or [])
        return None
    if header is not None and not declared(IDEMPOTENCY_KEY).passes(header):
        errors.append({"field": "Idempotency-Key", "detail": IDEMPOTENCY_KEY_RULE})
        return None
    return header
