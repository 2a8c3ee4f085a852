"""The words of the OpenAPI document (``openapi/``): tags, what each error status means, the
rules a JSON Schema cannot state, and the links from one call on a job to the next.

Kept apart from the document's structure so that adding a route means adding its tag and, if
it has one, its rule here; the document fails to build (KeyError) for an untagged operation.
"""
from __future__ import annotations

from typing import Any

JSON = dict[str, Any]

ERRORS = {
    400: "Malformed JSON, JSON that is not strict RFC 8259, nested too deep, or not an object; "
         "a query parameter the endpoint does not know, or one given twice (named in "
         "`errors`).",
    401: "No or bad credentials.",
    403: "Authenticated, but this role or key may not do this.",
    404: "No such job, or not visible to the caller.",
    409: "Wrong state, not held by this worker, a stale attempt, or (enqueue) an idempotency "
         "key whose race could not be settled: try again.",
    413: "Body over MAX_CONTENT_LENGTH.",
    415: "The body is not application/json (required with HTTP Basic).",
    422: "A field fails validation; see `errors`.",
    429: "HTTP Basic: 10 failed sign-ins within a minute for this username from this address "
         "(or too many password checks at once); no password is checked until Retry-After.",
    503: "The database does not answer or dropped the connection (the outcome of a write may "
         "be unknown): retry after `Retry-After` seconds, with the same idempotency key.",
}


# Each operation's tag (one group per kind of caller or resource: generators make one module
# per tag, Spectral's operation-tags asks for one). A new operation without a tag is a KeyError.
TAGS: dict[str, tuple[str, str]] = {
    "producer": ("Enqueue jobs, one or a batch (producer keys, admins).",
                 ("enqueue", "enqueueBatch", "cancel", "bulkCancel")),
    "worker": ("Claim jobs and answer for them (worker keys).",
               ("claim", "heartbeat", "complete", "fail", "completeBatch", "failBatch")),
    "jobs": ("Read jobs and their history (every role, each its own jobs).",
             ("listJobs", "getJob")),
    "admin": ("Repair: retry failed or cancelled jobs, run a delayed one now (admins).",
              ("retry", "bulkRetry", "runNow")),
    "types": ("Job types: counts, pause and resume, limits.",
              ("listTypes", "pauseType", "resumeType", "setTypeLimits", "resetTypeLimits")),
    "schedules": ("Recurring jobs: list, pause, resume, run now.",
                  ("listSchedules", "pauseSchedule", "resumeSchedule", "runSchedule")),
    "workers": ("The worker keys at work and the jobs they hold.", ("listWorkers",)),
    "audit": ("Who changed what (admins).", ("listAudit",)),
    "service": ("Health, metrics and this document.", ("health", "metrics", "openapi")),
}
TAG_OF = {op_id: tag for tag, (_, ops) in TAGS.items() for op_id in ops}


RUN_NOW = ("A `pending` job whose `run_at` is still ahead (delayed, or waiting out a retry's "
           "backoff) becomes due now (`run_at` = now) and waiting claims are woken; audited "
           "as `job.run`. A pending job already due is answered unchanged; any other status "
           "is 409.")
FENCED = ("Fenced: `attempt` must be the attempt this worker holds now; a stale attempt, or "
          "a job it does not hold, is a 409 that changes nothing.")
IDEMPOTENT = (
    "Idempotency: with `idempotency_key` (or the `Idempotency-Key` header; the two must agree, "
    "else 422), the same producer sending the same request again (`type`, `payload`, "
    "`priority`, `max_retries`, `run_at` or `delay_seconds`; an omitted field equals its "
    "default) gets 200, `Idempotent-Replayed: true` and the job made the first time. The "
    "same key with a different request is a 422 whose problem type ends in "
    "`idempotency-key-mismatch`. Keys are scoped to the producer.")
BATCH = (
    "All or nothing: every item is checked as `POST /jobs` checks it before anything is "
    "written; an item that alone would be refused fails the whole request (422 over 403), "
    "each error naming its item (`jobs[3].priority`). Jobs come back in request order. An "
    "item's `idempotency_key` works as on `POST /jobs` (replays are listed in `replayed`); "
    "one key twice in a batch, or an `Idempotency-Key` header, is a 422.")
PER_ITEM = (
    "The same job id twice in one request is a 422 (JSON Schema cannot state uniqueness by "
    "a property). Then each item is fenced on its own as the single route fences it; a "
    "refused item changes nothing and does not stop the others.")


def links(*names: str) -> JSON:
    """OpenAPI links from an answer that is a job (``id``, ``attempt``) to what comes next.

    They let a stateful tester (schemathesis) and a reader follow one job: enqueue, then
    claim, then heartbeat, complete or fail with the claimed job's id and attempt.
    """
    job_id = {"id": "$response.body#/id"}
    fenced = {"attempt": "$response.body#/attempt"}
    every = {
        "GetJob": {"operationId": "getJob", "parameters": job_id,
                   "description": "The job, with its history."},
        "CancelJob": {"operationId": "cancel", "parameters": job_id,
                      "description": "Cancel it while it is pending."},
        "ClaimJob": {"operationId": "claim", "description":
                     "A worker claims the best due job (this one, when it is the only one)."},
        "HeartbeatJob": {"operationId": "heartbeat", "parameters": job_id,
                         "requestBody": fenced, "description": "Extend the lease."},
        "CompleteJob": {"operationId": "complete", "parameters": job_id,
                        "requestBody": fenced, "description": "Complete this attempt."},
        "FailJob": {"operationId": "fail", "parameters": job_id,
                    "requestBody": {**fenced, "error": "failed by a link"},
                    "description": "Fail this attempt."},
    }
    return {name: every[name] for name in names}
