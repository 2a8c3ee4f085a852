"""The document's operating routes: job types and their limits, bulk repair, the audit log,
schedules, workers, and the service's own (health, metrics, this document).
"""
from __future__ import annotations

from typing import Any, Mapping

from queuelog.server.requests.bodies import queries
from queuelog.server.requests.openapi.build import (JSON, WRITE, header, json_answer, op,
                                                    query_params, ref, request_body)


def schedule_paths() -> JSON:
    """Recurring jobs (list, pause, resume, run now) and the workers at work."""
    name = {"name": "name", "in": "path", "required": True,
            "description": "A configured schedule (else 404).",
            "schema": {"type": "string", "minLength": 1, "maxLength": 91,
                       "pattern": "^[^/\\u0000]+$"}}
    one = {"200": json_answer(ref("Schedule"), "The schedule, as GET /schedules shows it.")}

    def verb(op_id: str, summary: str, answers: JSON) -> JSON:
        return {"post": op(op_id, summary, "admin", answers, *WRITE, 404, 422,
                           parameters=[name], requestBody=request_body("Empty", False))}
    return {
        "/workers": {"get": op("listWorkers", "Every worker key that claimed in the last 24 "
                               "hours or holds a job now", "viewer, admin, metrics",
                               {"200": json_answer(ref("WorkerList"), "One entry each.")},
                               401, 403)},
        "/schedules": {"get": op("listSchedules", "Every configured schedule",
                                 "viewer, admin, metrics",
                                 {"200": json_answer(ref("ScheduleList"), "One entry each.")},
                                 401, 403)},
        "/schedules/{name}/pause": verb("pauseSchedule", "Pause a schedule: its ticks are "
                                        "skipped", one),
        "/schedules/{name}/resume": verb("resumeSchedule", "Resume a paused schedule", one),
        "/schedules/{name}/run": verb("runSchedule", "Enqueue one job of the schedule now", {
            "201": json_answer(ref("Job"), "The job.", {"Location": header("The job's URL.")})}),
    }


def service_paths() -> JSON:
    """Health, metrics and this document."""
    metrics = {"200": {"description": "Prometheus text; metric names start with `queuelog_`.",
                       "content": {"text/plain": {"schema": {"type": "string"}}}}}
    return {
        "/healthz": {"get": op("health", "Liveness and database reachability", "anyone",
                               {"200": json_answer(ref("Health"), "Healthy.")}, security=[])},
        "/metrics": {"get": op("metrics", "Prometheus metrics", "admin, metrics", metrics,
                               401, 403)},
        "/openapi.json": {"get": op("openapi", "This document", "any authenticated caller", {
            "200": json_answer({"type": "object"}, "The OpenAPI 3.1 document.")}, 401)},
    }


def operating_paths(config: Mapping[str, Any]) -> JSON:
    """Job types and pausing, bulk repair, the audit log."""
    type_param = {"name": "type", "in": "path", "required": True, "description":
                  "A configured job type (else 404).",
                  "schema": {"type": "string", "minLength": 1, "maxLength": 100,
                             "pattern": "^[^/\\u0000]+$"}}
    the_type = {"200": json_answer(ref("JobType"), "The type, as GET /types shows it.")}
    count = {"200": json_answer(ref("Count"), "How many jobs changed.")}

    def pause(op_id: str, summary: str) -> JSON:
        return {"post": op(op_id, summary, "admin", the_type, *WRITE, 404, 422,
                           parameters=[type_param], requestBody=request_body("Empty", False))}
    return {
        "/jobs/retry": {"post": op(
            "bulkRetry", "Retry every failed or cancelled job named or matched", "admin",
            count, *WRITE, 422, requestBody=request_body("BulkRetry"))},
        "/jobs/cancel": {"post": op(
            "bulkCancel", "Cancel every pending job named or matched",
            "producer (its own jobs), admin", count, *WRITE, 422,
            requestBody=request_body("BulkCancel"))},
        "/types": {"get": op("listTypes", "Every configured job type", "viewer, admin, metrics",
                             {"200": json_answer(ref("JobTypeList"), "One entry per type.")},
                             401, 403)},
        "/types/{type}/pause": pause("pauseType", "Pause a job type: no claim returns it"),
        "/types/{type}/resume": pause("resumeType", "Resume a paused job type"),
        "/types/{type}/limits": {
            "put": op("setTypeLimits", "Change a type's concurrency, rate or burst (a field "
                      "left out keeps its value, null removes it)", "admin", the_type,
                      *WRITE, 404, 422, parameters=[type_param],
                      requestBody=request_body("TypeLimits")),
            "delete": op("resetTypeLimits", "A type's limits back to the configured ones",
                         "admin", the_type, *WRITE, 404, 422, parameters=[type_param],
                         requestBody=request_body("Empty", False))},
        "/audit": {"get": op("listAudit", "Audit events, newest first", "admin",
                             {"200": json_answer(ref("AuditPage"), "One page.")}, 400, 401, 403,
                             422,
                             parameters=query_params(queries(config)["AuditQuery"]))},
    }
