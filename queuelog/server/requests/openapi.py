"""The OpenAPI 3.1 document of the JSON API. Request bodies and query strings are the
declarations the views check (``bodies.py``), published as they are; responses are
described here, and the words (tags, rules, links) in ``openapi_text.py``. Every schema is
named once: code generators (openapi-python-client) drop models whose names collide.

It is exact in both directions on purpose: the schemathesis test sends data the document
calls valid and expects it accepted, and data it calls invalid and expects a 4xx.
"""
from __future__ import annotations

from typing import Any, Mapping

from queuelog.model.jobs import Outcome, Status
from queuelog.server.requests.bodies import (IDEMPOTENCY_KEY, MAX_JOB_ID, PRIORITIES, bodies,
                                             queries)
from queuelog.server.requests.openapi_text import (
    BATCH,
    ERRORS,
    FENCED,
    IDEMPOTENT,
    PER_ITEM,
    RUN_NOW,
    TAG_OF,
    TAGS,
)
from queuelog.server.requests.openapi_text import links as _links

TIMESTAMP = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$"
# The Idempotency-Key header: a bare key, or a structured-field string ("k-1", with \" and
# \\ escapes; the parser takes a bare " inside too); once unquoted, a key as
# bodies.IDEMPOTENCY_KEY declares it (printable ASCII, at least one character, at most
# maxLength; a bare key's first and last characters are not blanks the header would lose).
_KEY_MAX = IDEMPOTENCY_KEY["maxLength"]
KEY_HEADER = (rf'^[ \t]*(?:[!#-~](?:[ -~]{{0,{_KEY_MAX - 2}}}[!-~])?'
              rf'|"(?:[ -~]{{0,{_KEY_MAX - 2}}}[!#-~])?'
              rf'|"(?:[ -\[\]-~]|\\["\\]){{1,{_KEY_MAX}}}")[ \t]*$')
PROBLEM = "application/problem+json"
BEARER: list[dict[str, list[str]]] = [{"bearer": []}]
ANY_AUTH: list[dict[str, list[str]]] = [{"bearer": []}, {"basic": []}]

JSON = dict[str, Any]


def _ref(name: str) -> JSON:
    """A reference to a schema in components."""
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(properties: JSON, required: tuple[str, ...] = (), closed: bool = True,
         **extra: Any) -> JSON:
    """An object schema; ``closed`` mirrors the views' 422 on unknown fields."""
    out: JSON = {"type": "object", "properties": properties, **extra}
    if required:
        out["required"] = list(required)
    if closed:
        out["additionalProperties"] = False
    return out


def _int(lo: int, hi: int | None = None) -> JSON:
    """An integer in [lo, hi]."""
    return {"type": "integer", "minimum": lo, **({} if hi is None else {"maximum": hi})}


def _num(lo: float, hi: float) -> JSON:
    """A number in [lo, hi]."""
    return {"type": "number", "minimum": lo, "maximum": hi}


def _ts(nullable: bool = False) -> JSON:
    """A timestamp as the API writes it: ISO 8601 UTC, microseconds, ``Z``."""
    return {"type": ["string", "null"] if nullable else "string", "format": "date-time",
            "pattern": TIMESTAMP}


def _schemas(config: Mapping[str, Any]) -> JSON:
    """Every reusable schema: what the API answers, and what it accepts (``bodies.py``)."""
    return {**_job_schemas(), **_answer_schemas(), **bodies(config),
            **_operating_schemas(config)}


def _job_schemas() -> JSON:
    """A job, an attempt, and a job with its history."""
    admin_only = {"type": ["string", "null"], "description": "Admins only; absent otherwise."}
    attempt_props = {
        "attempt": _int(1), "worker_id": {"type": "string"}, "started_at": _ts(),
        "finished_at": _ts(nullable=True),
        "outcome": _ref("Outcome"),
        "error": admin_only,
    }
    job_props = {
        "id": _int(1, MAX_JOB_ID), "type": {"type": "string"},
        "payload": _ref("JobPayload"),
        "priority": _ref("Priority"), "status": _ref("Status"),
        "attempt": _int(0), "retry_count": _int(0), "max_retries": _int(0),
        "idempotency_key": {"type": ["string", "null"], "description":
                            "Shown only to the producer that set it and to admins."},
        "producer": {"type": "string"}, "worker_id": {"type": ["string", "null"]},
        "run_at": _ts(), "claimed_at": _ts(True), "lease_expires_at": _ts(True),
        "result": {"anyOf": [_ref("JobResult"), {"type": "null"}]}, "error": admin_only,
        "created_at": _ts(), "updated_at": _ts(), "finished_at": _ts(True),
        "schedule": {"type": ["string", "null"],
                     "description": "The schedule that made the job, else null."},
        "scheduled_for": _ts(True) | {"description": "That schedule's tick, else null."},
        "progress": {"type": ["object", "null"], "description":
                     "The last progress a heartbeat reported, else null."},
        "depends_on": {"type": "array", "items": _int(1, MAX_JOB_ID),
                       "description": "The jobs this one waits for, [] when none."},
        "on_parent_failure": {"type": "string", "enum": ["cancel", "run"]},
        "cancelled_by_parent": {"type": ["integer", "null"], "description":
                                "The parent whose failure cancelled it, else null."},
        "parents": {"type": "array", "items": _ref("Parent"), "description":
                    "On a claimed job with parents: each, in depends_on order."},
        "dependents": {"type": "array", "items": _int(1, MAX_JOB_ID), "description":
                       "On GET /jobs/{id}: the jobs that depend on it (at most 100)."},
        "dependents_truncated": {"type": "boolean", "description":
                                 "Present (true) when more than 100 depend on it."},
        "attempts": {"type": "array", "items": _ref("Attempt"),
                     "description": "The attempt history; on GET /jobs/{id} only."},
    }
    sometimes = ("error", "attempts", "parents", "dependents", "dependents_truncated")
    required = tuple(k for k in job_props if k not in sometimes)
    # Every schema is named once, and JobWithHistory repeats Job's properties instead of an
    # ``allOf`` of it: generators (openapi-python-client) name the inline models of an allOf
    # after the parent, so Job's payload became a second "JobPayload" and the tool dropped
    # Job and everything that refers to it.
    return {
        "Job": _obj(job_props, required),
        "JobWithHistory": _obj(job_props, (*required, "attempts", "dependents")),
        "Parent": _obj({"id": _int(1, MAX_JOB_ID), "type": {"type": ["string", "null"]},
                        "status": {"anyOf": [_ref("Status"), {"type": "null"}]},
                        "result": {"anyOf": [_ref("JobResult"), {"type": "null"}],
                                   "description": "Absent for a parent purged since."}},
                       ("id", "type", "status")),
        "Attempt": _obj(attempt_props, tuple(k for k in attempt_props if k != "error")),
        "JobPayload": {"type": "object", "description": "The job's input, as enqueued."},
        "JobResult": {"type": "object", "description": "What the worker reported on complete."},
        "Priority": {"type": "string", "enum": PRIORITIES},
        "Status": {"type": "string", "enum": [s.value for s in Status]},
        "Outcome": {"type": "string", "enum": [o.value for o in Outcome]},
    }


def _answer_schemas() -> JSON:
    """Pages, problems, and the answers of the batch routes."""
    return {
        "JobPage": _obj({"jobs": {"type": "array", "items": _ref("Job")},
                         "next_cursor": {"type": ["string", "null"]}},
                        ("jobs", "next_cursor")),
        "FinishedAndNext": _obj({"job": _ref("Job"),
                                 "next": {"anyOf": [_ref("Job"), {"type": "null"}]}},
                                ("job", "next")),
        "Health": _obj({"status": {"const": "ok"},
                        "writes": {"const": "unavailable", "description":
                                   "Present when a write cannot be made now (SQLite's write "
                                   "lock held elsewhere, a full disk, a read-only server)."},
                        "writes_detail": {"type": "string"}}, ("status",)),
        "Problem": _obj({
            "type": {"type": "string", "format": "uri-reference"},
            "title": {"type": "string"}, "status": _int(400, 599), "detail": {"type": "string"},
            "errors": {"type": "array", "items": _obj(
                {"field": {"type": "string"}, "detail": {"type": "string"}},
                ("field", "detail"))},
        }, ("type", "title", "status", "detail"), closed=False),
        "JobList": _obj({"jobs": {"type": "array", "items": _ref("Job")}}, ("jobs",)),
        "Enqueued": _obj({"jobs": {"type": "array", "items": _ref("Job")},
                          "replayed": {"type": "array", "items": _int(0), "description":
                                       "Indexes of the items that were idempotent replays."}},
                         ("jobs", "replayed")),
        "ItemResults": _obj({"results": {"type": "array", "items": _obj({
            "id": _int(1, MAX_JOB_ID), "status": _int(200, 599),
            "job_status": {"type": "string", "enum": [s.value for s in Status]},
            "type": {"type": "string"}, "detail": {"type": "string"}}, ("id", "status"))}},
            ("results",)),
    }


def _operating_schemas(config: Mapping[str, Any]) -> JSON:
    """Job types, bulk repair and the audit log: what they answer."""
    count = _int(0)
    return {
        "Count": _obj({"count": count}, ("count",)),
        "JobType": _obj({
            "name": {"type": "string"}, "paused": {"type": "boolean"},
            "counts": _obj({st.value: count for st in Status},
                           tuple(st.value for st in Status)),
            "count_cap": _int(1), "oldest_pending_seconds": {"type": "number", "minimum": 0},
            "completed_last_hour": count, "failed_last_hour": count,
            # Flow control: the limits in force (null where none), running, why skipped.
            "concurrency": {"type": ["integer", "null"], "minimum": 1},
            "rate": {"type": ["string", "null"]},
            "burst": {"type": ["integer", "null"], "minimum": 1}, "running": count,
            "limited": {"type": ["string", "null"],
                        "enum": ["paused", "concurrency", "rate", None]},
        }, ("name", "paused", "counts", "count_cap", "oldest_pending_seconds",
            "completed_last_hour", "failed_last_hour", "concurrency", "rate", "burst",
            "running", "limited")),
        "JobTypeList": _obj({"types": {"type": "array", "items": _ref("JobType")}}, ("types",)),
        "AuditEvent": _obj({
            "id": _int(1), "at": _ts(), "actor": {"type": "string"},
            "action": queries(config)["AuditQuery"]["properties"]["action"],
            "target": {"type": ["string", "null"]}, "detail": {"type": "object"},
        }, ("id", "at", "actor", "action", "target", "detail")),
        "Schedule": _obj({
            "name": {"type": "string"}, "cron": {"type": "string"},
            "timezone": {"type": "string"}, "type": {"type": "string"},
            "paused": {"type": "boolean"}, "next_run_at": _ts(True), "last_run_at": _ts(True),
            "last_job": {"anyOf": [_obj({"id": _int(1, MAX_JOB_ID), "status": {
                "type": "string", "enum": [st.value for st in Status]}}, ("id", "status")),
                {"type": "null"}]},
        }, ("name", "cron", "timezone", "type", "paused", "next_run_at", "last_run_at",
            "last_job")),
        "ScheduleList": _obj({"schedules": {"type": "array", "items": _ref("Schedule")}},
                             ("schedules",)),
        "RunningJob": _obj({
            "id": _int(1, MAX_JOB_ID), "type": {"type": "string"}, "attempt": _int(1),
            "claimed_at": _ts(), "lease_expires_at": _ts(),
        }, ("id", "type", "attempt", "claimed_at", "lease_expires_at")),
        "Worker": _obj({
            "name": {"type": "string"}, "running": {"type": "array", "items": _ref("RunningJob")},
            "last_claim_at": _ts(True), "completed_last_hour": _int(0),
            "failed_last_hour": _int(0),
        }, ("name", "running", "last_claim_at", "completed_last_hour", "failed_last_hour")),
        "WorkerList": _obj({"workers": {"type": "array", "items": _ref("Worker")}},
                           ("workers",)),
        "AuditPage": _obj({"events": {"type": "array", "items": _ref("AuditEvent")},
                           "next_cursor": {"type": ["string", "null"]}},
                          ("events", "next_cursor")),
    }


def _json(schema: JSON, description: str, headers: Mapping[str, JSON] | None = None,
          links: JSON | None = None) -> JSON:
    """A response with a JSON body, and headers and links if any."""
    out: JSON = {"description": description, "content": {"application/json": {"schema": schema}}}
    if headers:
        out["headers"] = dict(headers)
    if links:
        out["links"] = links
    return out


def _header(description: str, schema: JSON | None = None) -> JSON:
    """A response header that is always sent."""
    return {"description": description, "required": True, "schema": schema or {"type": "string"}}


def _problems(*codes: int) -> JSON:
    """Problem+json responses for ``codes``; 401 with its challenge header."""
    out: JSON = {}
    for code in codes:
        out[str(code)] = {"description": ERRORS[code],
                          "content": {PROBLEM: {"schema": _ref("Problem")}}}
        if code == 401:
            out[str(code)]["headers"] = {"WWW-Authenticate": _header("Basic and Bearer.")}
        if code in (429, 503):
            out[str(code)]["headers"] = {"Retry-After": _header("Seconds.")}
    return out


def _body(name: str, required: bool = True) -> JSON:
    """A JSON request body of schema ``name``."""
    return {"required": required, "content": {"application/json": {"schema": _ref(name)}}}


def _op(op_id: str, summary: str, roles: str, responses: JSON, *codes: int,
        security: Any = ANY_AUTH, rules: str = "", **extra: Any) -> JSON:
    """One operation: its tag, success responses plus problem+json for each error code."""
    if any("basic" in scheme for scheme in security):
        codes = (*codes, 429)  # the sign-in throttle answers any Basic request
    return {"operationId": op_id, "tags": [TAG_OF[op_id]], "summary": summary,
            "description": f"Who: {roles}." + (f"\n\n{rules}" if rules else ""),
            "security": security, "responses": {**responses, **_problems(*codes, 503)}, **extra}


JOB_ID = {"name": "id", "in": "path", "required": True, "schema": _int(1, MAX_JOB_ID)}
WRITE = (400, 401, 403, 413, 415)
JOB_VERB = (*WRITE, 404, 409, 422)
WORKER = "the worker holding the job"
READERS = "producer (own jobs), worker (jobs it holds or held), viewer, admin"


def _query(declared: JSON) -> list[JSON]:
    """The query parameters of a declared query string (``bodies.QUERIES``), one per property."""
    out = []
    for name, schema in declared["properties"].items():
        param: JSON = {"name": name, "in": "query", "schema": dict(schema)}
        if "description" in schema:
            param["description"] = param["schema"].pop("description")
        out.append(param)
    return out


def _verb(op_id: str, summary: str, roles: str, body: str | None,
          security: Any = BEARER, rules: str = "", links: JSON | None = None,
          answer: tuple[JSON, str] | None = None) -> JSON:
    """POST /jobs/{id}/<verb>: a job transition answering the job (or ``answer``)."""
    schema, said = answer or (_ref("Job"), "The job.")
    return {"post": _op(op_id, summary, roles, {"200": _json(schema, said, links=links)},
                        *JOB_VERB, security=security, parameters=[JOB_ID], rules=rules,
                        requestBody=_body(body or "Empty", required=body is not None))}


def _paths(config: Mapping[str, Any]) -> JSON:
    """Every route of the JSON API (the dashboard's are not part of it)."""
    listed = _query(queries(config)["JobListQuery"])
    return {**_job_paths(listed, queries(config)["JobQuery"]), **_worker_paths(), **_operating_paths(config),
            **_schedule_paths(), **_service_paths()}


def _schedule_paths() -> JSON:
    """Recurring jobs (list, pause, resume, run now) and the workers at work."""
    name = {"name": "name", "in": "path", "required": True,
            "description": "A configured schedule (else 404).",
            "schema": {"type": "string", "minLength": 1, "maxLength": 91,
                       "pattern": "^[^/\\u0000]+$"}}
    one = {"200": _json(_ref("Schedule"), "The schedule, as GET /schedules shows it.")}

    def verb(op_id: str, summary: str, answers: JSON) -> JSON:
        return {"post": _op(op_id, summary, "admin", answers, *WRITE, 404, 422,
                            parameters=[name], requestBody=_body("Empty", False))}
    return {
        "/workers": {"get": _op("listWorkers", "Every worker key that claimed in the last 24 "
                                "hours or holds a job now", "viewer, admin, metrics",
                                {"200": _json(_ref("WorkerList"), "One entry each.")},
                                401, 403)},
        "/schedules": {"get": _op("listSchedules", "Every configured schedule",
                                  "viewer, admin, metrics",
                                  {"200": _json(_ref("ScheduleList"), "One entry each.")},
                                  401, 403)},
        "/schedules/{name}/pause": verb("pauseSchedule", "Pause a schedule: its ticks are "
                                        "skipped", one),
        "/schedules/{name}/resume": verb("resumeSchedule", "Resume a paused schedule", one),
        "/schedules/{name}/run": verb("runSchedule", "Enqueue one job of the schedule now", {
            "201": _json(_ref("Job"), "The job.", {"Location": _header("The job's URL.")})}),
    }


def _job_paths(list_params: list[JSON], waiting: JSON) -> JSON:
    """Enqueue (one or a batch), list, get, cancel, retry."""
    job = _ref("Job")
    location = _header("The job's URL.")
    key_header = {"name": "Idempotency-Key", "in": "header", "schema": {
        "type": "string", "pattern": KEY_HEADER}, "description":
        "The idempotency key, bare or as a structured-field string; must agree with the body's."}
    follow = _links("GetJob", "CancelJob", "ClaimJob")
    enqueued = {
        "201": _json(job, "Created.", {"Location": location}, follow),
        "200": _json(job, "An idempotent replay: the job created the first time.", {
            "Location": location,
            "Idempotent-Replayed": _header("Always `true`.", {"const": "true"})}, follow),
    }
    batch = {"201": _json(_ref("Enqueued"), "Created (some items may be replays)."),
             "200": _json(_ref("Enqueued"), "Every item was an idempotent replay.")}
    producers = "producer (its key's types, up to its max priority), admin"
    return {
        "/jobs": {
            "post": _op("enqueue", "Enqueue a job", producers, enqueued, *WRITE, 409, 422,
                        rules=IDEMPOTENT, parameters=[key_header],
                        requestBody=_body("NewJob")),
            "get": _op("listJobs", "List jobs, newest first", READERS,
                       {"200": _json(_ref("JobPage"), "One page.")}, 400, 401, 403, 422,
                       parameters=list_params),
        },
        "/jobs/{id}": {"get": _op("getJob", "One job with its attempt history", READERS,
                                  {"200": _json(_ref("JobWithHistory"), (
                                      "The job; with `wait`, once it has finished or the "
                                      "wait ran out (`Retry-After: 1` when no long-poll "
                                      "slot was free to wait in)."))},
                                  401, 403, 404, 422,
                                  parameters=[JOB_ID, *_query(waiting)])},
        "/jobs/batch": {"post": _op("enqueueBatch", "Enqueue many jobs, all or nothing",
                                    producers, batch, *WRITE, 409, 422, rules=BATCH,
                                    requestBody=_body("NewJobBatch"))},
        "/jobs/{id}/cancel": _verb("cancel", "Cancel a pending or running job",
                                   "its producer, admin",
                                   None, security=ANY_AUTH),
        "/jobs/{id}/retry": _verb("retry", "Retry a failed or cancelled job", "admin", None,
                                  security=ANY_AUTH),
        "/jobs/{id}/run": _verb("runNow", "Run a delayed or retrying job now", "admin", None,
                                security=ANY_AUTH, rules=RUN_NOW),
    }


def _worker_paths() -> JSON:
    """Claim, heartbeat, complete and fail: one job or a batch."""
    job = _ref("Job")
    claimed = {"200": _json({"anyOf": [job, _ref("JobList")]}, "The claimed job, now running; "
                            "with `max_jobs`, `{\"jobs\": [...]}` (maybe empty).",
                            links=_links("HeartbeatJob", "CompleteJob", "FailJob", "GetJob")),
               "204": {"description": "No job came due within `wait` (without `max_jobs`); with "
                              "`Retry-After: 1` when no long-poll slot was free (it did not "
                              "wait).",
                       "headers": {"Retry-After": {
                           "description": "`1` when no slot was free.", "required": False,
                           "schema": {"type": "string"}}}}}
    per_item = {"200": _json(_ref("ItemResults"), "One result per item, in request order.")}
    finished = ({"anyOf": [job, _ref("FinishedAndNext")]},
                "The job; with `next`, `{\"job\", \"next\"}`: the finished job and a job "
                "claimed after the finish committed (null when none came due).")
    return {
        "/jobs/claim": {"post": _op("claim", "Claim the best due job", "worker", claimed,
                                    *WRITE, 422, security=BEARER,
                                    requestBody=_body("ClaimRequest", required=False))},
        "/jobs/complete": {"post": _op("completeBatch", "Complete many held jobs", "worker",
                                       per_item, *WRITE, 422, security=BEARER,
                                       rules=PER_ITEM, requestBody=_body("CompleteBatch"))},
        "/jobs/fail": {"post": _op("failBatch", "Fail many held attempts", "worker", per_item,
                                   *WRITE, 422, security=BEARER, rules=PER_ITEM,
                                   requestBody=_body("FailBatch"))},
        "/jobs/{id}/heartbeat": _verb("heartbeat", "Extend the lease", WORKER,
                                      "HeartbeatRequest", rules=FENCED,
                                      links=_links("CompleteJob", "FailJob")),
        "/jobs/{id}/complete": _verb("complete", "Complete a held job", WORKER,
                                     "CompleteRequest", rules=FENCED,
                                     links=_links("GetJob"), answer=finished),
        "/jobs/{id}/fail": _verb("fail", "Fail a held attempt", WORKER, "FailRequest",
                                 rules=FENCED, links=_links("GetJob"), answer=finished),
    }


def _service_paths() -> JSON:
    """Health, metrics and this document."""
    metrics = {"200": {"description": "Prometheus text; metric names start with `queuelog_`.",
                       "content": {"text/plain": {"schema": {"type": "string"}}}}}
    return {
        "/healthz": {"get": _op("health", "Liveness and database reachability", "anyone",
                                {"200": _json(_ref("Health"), "Healthy.")}, security=[])},
        "/metrics": {"get": _op("metrics", "Prometheus metrics", "admin, metrics", metrics,
                                401, 403)},
        "/openapi.json": {"get": _op("openapi", "This document", "any authenticated caller", {
            "200": _json({"type": "object"}, "The OpenAPI 3.1 document.")}, 401)},
    }


def _operating_paths(config: Mapping[str, Any]) -> JSON:
    """Job types and pausing, bulk repair, the audit log."""
    type_param = {"name": "type", "in": "path", "required": True, "description":
                  "A configured job type (else 404).",
                  "schema": {"type": "string", "minLength": 1, "maxLength": 100,
                             "pattern": "^[^/\\u0000]+$"}}
    the_type = {"200": _json(_ref("JobType"), "The type, as GET /types shows it.")}
    count = {"200": _json(_ref("Count"), "How many jobs changed.")}

    def pause(op_id: str, summary: str) -> JSON:
        return {"post": _op(op_id, summary, "admin", the_type, *WRITE, 404, 422,
                            parameters=[type_param], requestBody=_body("Empty", False))}
    return {
        "/jobs/retry": {"post": _op(
            "bulkRetry", "Retry every failed or cancelled job named or matched", "admin",
            count, *WRITE, 422, requestBody=_body("BulkRetry"))},
        "/jobs/cancel": {"post": _op(
            "bulkCancel", "Cancel every pending job named or matched",
            "producer (its own jobs), admin", count, *WRITE, 422,
            requestBody=_body("BulkCancel"))},
        "/types": {"get": _op("listTypes", "Every configured job type", "viewer, admin, metrics",
                              {"200": _json(_ref("JobTypeList"), "One entry per type.")},
                              401, 403)},
        "/types/{type}/pause": pause("pauseType", "Pause a job type: no claim returns it"),
        "/types/{type}/resume": pause("resumeType", "Resume a paused job type"),
        "/types/{type}/limits": {
            "put": _op("setTypeLimits", "Change a type's concurrency, rate or burst (a field "
                       "left out keeps its value, null removes it)", "admin", the_type,
                       *WRITE, 404, 422, parameters=[type_param],
                       requestBody=_body("TypeLimits")),
            "delete": _op("resetTypeLimits", "A type's limits back to the configured ones",
                          "admin", the_type, *WRITE, 404, 422, parameters=[type_param],
                          requestBody=_body("Empty", False))},
        "/audit": {"get": _op("listAudit", "Audit events, newest first", "admin",
                              {"200": _json(_ref("AuditPage"), "One page.")}, 400, 401, 403,
                              422,
                              parameters=_query(queries(config)["AuditQuery"]))},
    }


def document(config: Mapping[str, Any]) -> dict[str, Any]:
    """The OpenAPI document for this app's configuration (its job types)."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "queuelog", "version": "0.1.0", "description": (
            "A persistent background job queue. Every error is application/problem+json "
            "(RFC 9457) whose `status` equals the HTTP status."),
            "contact": {"name": "queuelog maintainers"}},
        # Relative: the API is at the root of whichever server answered this document (one
        # document serves every host name and port the server is reached by).
        "servers": [{"url": "/", "description": "The server that serves this document."}],
        "tags": [{"name": tag, "description": text} for tag, (text, _) in TAGS.items()],
        "paths": _paths(config),
        "components": {
            "schemas": _schemas(config),
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "An API key: producer, worker, admin or metrics."},
                "basic": {"type": "http", "scheme": "basic",
                          "description": "A person: viewer or admin. Writes must send "
                                         "Content-Type: application/json."},
            },
        },
    }
