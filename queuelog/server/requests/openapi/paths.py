"""The document's paths: every route of the JSON API (the dashboard's are not part of it).
Here the life of a job: enqueue, list, get, cancel, retry, run now, and the worker's claim
and answers; the operating routes are ``operating.py``'s.
"""
from __future__ import annotations

from typing import Any, Mapping

from queuelog.server.requests.bodies import IDEMPOTENCY_KEY, queries
from queuelog.server.requests.openapi import text
from queuelog.server.requests.openapi.build import (ANY_AUTH, BEARER, JOB_ID, JSON, READERS,
                                                    WORKER, WRITE, header, json_answer, op,
                                                    query_params, ref, request_body, verb)
from queuelog.server.requests.openapi.operating import (operating_paths, schedule_paths,
                                                        service_paths)

# The Idempotency-Key header: a bare key, or a structured-field string ("k-1", with \" and
# \\ escapes; the parser takes a bare " inside too); once unquoted, a key as
# bodies.IDEMPOTENCY_KEY declares it (printable ASCII, at least one character, at most
# maxLength; a bare key's first and last characters are not blanks the header would lose).
_KEY_MAX = IDEMPOTENCY_KEY["maxLength"]
KEY_HEADER = (rf'^[ \t]*(?:[!#-~](?:[ -~]{{0,{_KEY_MAX - 2}}}[!-~])?'
              rf'|"(?:[ -~]{{0,{_KEY_MAX - 2}}}[!#-~])?'
              rf'|"(?:[ -\[\]-~]|\\["\\]){{1,{_KEY_MAX}}}")[ \t]*$')


def paths(config: Mapping[str, Any]) -> JSON:
    """Every route of the JSON API (the dashboard's are not part of it)."""
    listed = query_params(queries(config)["JobListQuery"])
    return {**_job_paths(listed, queries(config)["JobQuery"]), **_worker_paths(),
            **operating_paths(config), **schedule_paths(), **service_paths()}


def _job_paths(list_params: list[JSON], waiting: JSON) -> JSON:
    """Enqueue (one or a batch), list, get, cancel, retry."""
    job = ref("Job")
    location = header("The job's URL.")
    key_header = {"name": "Idempotency-Key", "in": "header", "schema": {
        "type": "string", "pattern": KEY_HEADER}, "description":
        "The idempotency key, bare or as a structured-field string; must agree with the body's."}
    # No pattern: an invalid trace context is ignored (the W3C spec), never a 422.
    trace = [{"name": "traceparent", "in": "header", "schema": {"type": "string"},
              "description": "W3C Trace Context; kept on every job created when valid "
                             "(version 00 format), else ignored."},
             {"name": "tracestate", "in": "header", "schema": {"type": "string"},
              "description": "W3C Trace Context; kept only with a valid `traceparent`, "
                             "at most 512 characters."}]
    follow = text.links("GetJob", "CancelJob", "ClaimJob")
    enqueued = {
        "201": json_answer(job, "Created.", {"Location": location}, follow),
        "200": json_answer(job, "An idempotent replay: the job created the first time.", {
            "Location": location,
            "Idempotent-Replayed": header("Always `true`.", {"const": "true"})}, follow),
    }
    batch = {"201": json_answer(ref("Enqueued"), "Created (some items may be replays)."),
             "200": json_answer(ref("Enqueued"), "Every item was an idempotent replay.")}
    producers = "producer (its key's types, up to its max priority), admin"
    return {
        "/jobs": {
            "post": op("enqueue", "Enqueue a job", producers, enqueued, *WRITE, 409, 422,
                       rules=text.IDEMPOTENT, parameters=[key_header, *trace],
                       requestBody=request_body("NewJob")),
            "get": op("listJobs", "List jobs, newest first", READERS,
                      {"200": json_answer(ref("JobPage"), "One page.")}, 400, 401, 403, 422,
                      parameters=list_params),
        },
        "/jobs/{id}": {"get": op("getJob", "One job with its attempt history", READERS,
                                 {"200": json_answer(ref("JobWithHistory"), (
                                      "The job; with `wait`, once it has finished or the "
                                      "wait ran out (`Retry-After: 1` when no long-poll "
                                      "slot was free to wait in)."))},
                                 400, 401, 403, 404, 422,
                                 parameters=[JOB_ID, *query_params(waiting)])},
        "/jobs/batch": {"post": op("enqueueBatch", "Enqueue many jobs, all or nothing",
                                   producers, batch, *WRITE, 409, 422, rules=text.BATCH,
                                   parameters=trace, requestBody=request_body("NewJobBatch"))},
        "/jobs/{id}/cancel": verb("cancel", "Cancel a pending or running job",
                                  "its producer, admin",
                                  None, security=ANY_AUTH),
        "/jobs/{id}/retry": verb("retry", "Retry a failed or cancelled job", "admin", None,
                                 security=ANY_AUTH),
        "/jobs/{id}/run": verb("runNow", "Run a delayed or retrying job now", "admin", None,
                               security=ANY_AUTH, rules=text.RUN_NOW),
    }


def _worker_paths() -> JSON:
    """Claim, heartbeat, complete and fail: one job or a batch."""
    job = ref("Job")
    follow = text.links("HeartbeatJob", "CompleteJob", "FailJob", "GetJob")
    claimed = {"200": json_answer({"anyOf": [job, ref("JobList")]}, "The claimed job, now running; "
                                  "with `max_jobs`, `{\"jobs\": [...]}` (maybe empty).",
                                  links=follow),
               "204": {"description": "No job came due within `wait` (without `max_jobs`); with "
                              "`Retry-After: 1` when no long-poll slot was free (it did not "
                              "wait).",
                       "headers": {"Retry-After": {
                           "description": "`1` when no slot was free.", "required": False,
                           "schema": {"type": "string"}}}}}
    per_item = {"200": json_answer(ref("ItemResults"), "One result per item, in request order.")}
    finished = ({"anyOf": [job, ref("FinishedAndNext")]},
                "The job; with `next`, `{\"job\", \"next\"}`: the finished job and a job "
                "claimed after the finish committed (null when none came due).")
    return {
        "/jobs/claim": {"post": op("claim", "Claim the best due job", "worker", claimed,
                                   *WRITE, 422, security=BEARER,
                                   requestBody=request_body("ClaimRequest", required=False))},
        "/jobs/complete": {"post": op("completeBatch", "Complete many held jobs", "worker",
                                      per_item, *WRITE, 422, security=BEARER,
                                      rules=text.PER_ITEM,
                                      requestBody=request_body("CompleteBatch"))},
        "/jobs/fail": {"post": op("failBatch", "Fail many held attempts", "worker", per_item,
                                  *WRITE, 422, security=BEARER, rules=text.PER_ITEM,
                                  requestBody=request_body("FailBatch"))},
        "/jobs/{id}/heartbeat": verb("heartbeat", "Extend the lease", WORKER,
                                     "HeartbeatRequest", rules=text.FENCED,
                                     links=text.links("CompleteJob", "FailJob")),
        "/jobs/{id}/complete": verb("complete", "Complete a held job", WORKER,
                                    "CompleteRequest", rules=text.FENCED,
                                    links=text.links("GetJob"), answer=finished),
        "/jobs/{id}/fail": verb("fail", "Fail a held attempt", WORKER, "FailRequest",
                                rules=text.FENCED, links=text.links("GetJob"), answer=finished),
    }
