"""The document's reusable schemas: what the API answers, beside what it accepts (the
declarations of ``bodies.py``, published as they are). Every schema is named once: code
generators (openapi-python-client) drop models whose names collide.
"""
from __future__ import annotations

from typing import Any, Mapping

from queuelog.model.jobs import Outcome, Status
from queuelog.server.requests.bodies import MAX_JOB_ID, PRIORITIES, bodies, queries
from queuelog.server.requests.openapi.build import JSON, integer, obj, ref, stamp


def schemas(config: Mapping[str, Any]) -> JSON:
    """Every reusable schema: what the API answers, and what it accepts (``bodies.py``)."""
    return {**_job_schemas(), **_answer_schemas(), **bodies(config),
            **_operating_schemas(config)}


def _job_schemas() -> JSON:
    """A job, an attempt, and a job with its history."""
    admin_only = {"type": ["string", "null"], "description": "Admins only; absent otherwise."}
    attempt_props = {
        "attempt": integer(1), "worker_id": {"type": "string"}, "started_at": stamp(),
        "finished_at": stamp(nullable=True),
        "outcome": ref("Outcome"),
        "error": admin_only,
    }
    job_props = {
        "id": integer(1, MAX_JOB_ID), "type": {"type": "string"},
        "payload": ref("JobPayload"),
        "priority": ref("Priority"), "status": ref("Status"),
        "attempt": integer(0), "retry_count": integer(0), "max_retries": integer(0),
        "idempotency_key": {"type": ["string", "null"], "description":
                            "Shown only to the producer that set it and to admins."},
        "producer": {"type": "string"}, "worker_id": {"type": ["string", "null"]},
        "run_at": stamp(), "claimed_at": stamp(True), "lease_expires_at": stamp(True),
        "result": {"anyOf": [ref("JobResult"), {"type": "null"}]}, "error": admin_only,
        "created_at": stamp(), "updated_at": stamp(), "finished_at": stamp(True),
        "schedule": {"type": ["string", "null"],
                     "description": "The schedule that made the job, else null."},
        "scheduled_for": stamp(True) | {"description": "That schedule's tick, else null."},
        "progress": {"type": ["object", "null"], "description":
                     "The last progress a heartbeat reported, else null."},
        "depends_on": {"type": "array", "items": integer(1, MAX_JOB_ID),
                       "description": "The jobs this one waits for, [] when none."},
        "on_parent_failure": {"type": "string", "enum": ["cancel", "run"]},
        "cancelled_by_parent": {"type": ["integer", "null"], "description":
                                "The parent whose failure cancelled it, else null."},
        "traceparent": {"type": ["string", "null"], "description":
                        "The enqueue's W3C `traceparent` header, if valid, else null."},
        "tracestate": {"type": ["string", "null"], "description":
                       "The enqueue's `tracestate` (with a valid `traceparent`), else null."},
        "parents": {"type": "array", "items": ref("Parent"), "description":
                    "On a claimed job with parents: each, in depends_on order."},
        "dependents": {"type": "array", "items": integer(1, MAX_JOB_ID), "description":
                       "On GET /jobs/{id}: the jobs that depend on it (at most 100)."},
        "dependents_truncated": {"type": "boolean", "description":
                                 "Present (true) when more than 100 depend on it."},
        "attempts": {"type": "array", "items": ref("Attempt"),
                     "description": "The attempt history; on GET /jobs/{id} only."},
    }
    sometimes = ("error", "attempts", "parents", "dependents", "dependents_truncated")
    required = tuple(k for k in job_props if k not in sometimes)
    # Every schema is named once, and JobWithHistory repeats Job's properties instead of an
    # ``allOf`` of it: generators (openapi-python-client) name the inline models of an allOf
    # after the parent, so Job's payload became a second "JobPayload" and the tool dropped
    # Job and everything that refers to it.
    return {
        "Job": obj(job_props, required),
        "JobWithHistory": obj(job_props, (*required, "attempts", "dependents")),
        "Parent": obj({"id": integer(1, MAX_JOB_ID), "type": {"type": ["string", "null"]},
                       "status": {"anyOf": [ref("Status"), {"type": "null"}]},
                       "result": {"anyOf": [ref("JobResult"), {"type": "null"}],
                                  "description": "Absent for a parent purged since."}},
                      ("id", "type", "status")),
        "Attempt": obj(attempt_props, tuple(k for k in attempt_props if k != "error")),
        "JobPayload": {"type": "object", "description": "The job's input, as enqueued."},
        "JobResult": {"type": "object", "description": "What the worker reported on complete."},
        "Priority": {"type": "string", "enum": PRIORITIES},
        "Status": {"type": "string", "enum": [s.value for s in Status]},
        "Outcome": {"type": "string", "enum": [o.value for o in Outcome]},
    }


def _answer_schemas() -> JSON:
    """Pages, problems, and the answers of the batch routes."""
    return {
        "JobPage": obj({"jobs": {"type": "array", "items": ref("Job")},
                        "next_cursor": {"type": ["string", "null"]}},
                       ("jobs", "next_cursor")),
        "FinishedAndNext": obj({"job": ref("Job"),
                                "next": {"anyOf": [ref("Job"), {"type": "null"}]}},
                               ("job", "next")),
        "Health": obj({"status": {"const": "ok"},
                       "writes": {"const": "unavailable", "description":
                                  "Present when a write cannot be made now (SQLite's write "
                                  "lock held elsewhere, a full disk, a read-only server)."},
                       "writes_detail": {"type": "string"}}, ("status",)),
        "Problem": obj({
            "type": {"type": "string", "format": "uri-reference"},
            "title": {"type": "string"}, "status": integer(400, 599), "detail": {"type": "string"},
            "errors": {"type": "array", "items": obj(
                {"field": {"type": "string"}, "detail": {"type": "string"}},
                ("field", "detail"))},
        }, ("type", "title", "status", "detail"), closed=False),
        "JobList": obj({"jobs": {"type": "array", "items": ref("Job")}}, ("jobs",)),
        "Enqueued": obj({"jobs": {"type": "array", "items": ref("Job")},
                         "replayed": {"type": "array", "items": integer(0), "description":
                                      "Indexes of the items that were idempotent replays."}},
                        ("jobs", "replayed")),
        "ItemResults": obj({"results": {"type": "array", "items": obj({
            "id": integer(1, MAX_JOB_ID), "status": integer(200, 599),
            "job_status": {"type": "string", "enum": [s.value for s in Status]},
            "type": {"type": "string"}, "detail": {"type": "string"}}, ("id", "status"))}},
            ("results",)),
    }


def _operating_schemas(config: Mapping[str, Any]) -> JSON:
    """Job types, bulk repair and the audit log: what they answer."""
    count = integer(0)
    return {
        "Count": obj({"count": count}, ("count",)),
        "JobType": obj({
            "name": {"type": "string"}, "paused": {"type": "boolean"},
            "counts": obj({st.value: count for st in Status},
                          tuple(st.value for st in Status)),
            "count_cap": integer(1), "oldest_pending_seconds": {"type": "number", "minimum": 0},
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
        "JobTypeList": obj({"types": {"type": "array", "items": ref("JobType")}}, ("types",)),
        "AuditEvent": obj({
            "id": integer(1), "at": stamp(), "actor": {"type": "string"},
            "action": queries(config)["AuditQuery"]["properties"]["action"],
            "target": {"type": ["string", "null"]}, "detail": {"type": "object"},
        }, ("id", "at", "actor", "action", "target", "detail")),
        "Schedule": obj({
            "name": {"type": "string"}, "cron": {"type": "string"},
            "timezone": {"type": "string"}, "type": {"type": "string"},
            "paused": {"type": "boolean"}, "next_run_at": stamp(True), "last_run_at": stamp(True),
            "last_job": {"anyOf": [obj({"id": integer(1, MAX_JOB_ID), "status": {
                "type": "string", "enum": [st.value for st in Status]}}, ("id", "status")),
                {"type": "null"}]},
        }, ("name", "cron", "timezone", "type", "paused", "next_run_at", "last_run_at",
            "last_job")),
        "ScheduleList": obj({"schedules": {"type": "array", "items": ref("Schedule")}},
                            ("schedules",)),
        "RunningJob": obj({
            "id": integer(1, MAX_JOB_ID), "type": {"type": "string"}, "attempt": integer(1),
            "claimed_at": stamp(), "lease_expires_at": stamp(),
        }, ("id", "type", "attempt", "claimed_at", "lease_expires_at")),
        "Worker": obj({
            "name": {"type": "string"}, "running": {"type": "array", "items": ref("RunningJob")},
            "last_claim_at": stamp(True), "completed_last_hour": integer(0),
            "failed_last_hour": integer(0),
        }, ("name", "running", "last_claim_at", "completed_last_hour", "failed_last_hour")),
        "WorkerList": obj({"workers": {"type": "array", "items": ref("Worker")}},
                          ("workers",)),
        "AuditPage": obj({"events": {"type": "array", "items": ref("AuditEvent")},
                          "next_cursor": {"type": ["string", "null"]}},
                         ("events", "next_cursor")),
    }
