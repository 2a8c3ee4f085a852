"""Every request body and query string of the API and the dashboard, declared once, as JSON
Schema.

One declaration drives three things: the checks (``check.body("NewJob")`` answers 422 with
every error, each at its contract-style path, e.g. ``jobs[3].priority``; ``check.query``
likewise for a query string), the dashboard's filters (``ui/filters.py``), and
``/openapi.json`` (``openapi/`` publishes ``bodies(config)`` as its components and
``queries(config)`` as each GET's parameters). So the document cannot drift from what is
enforced.

To add a body:

1. Write ``def _my_body(config) -> JSON`` below in plain JSON Schema 2020-12 (checked by
   fastjsonschema, explained by jsonschema: ``check.py``). Optional fields take ``null`` for
   "left out" (``_optional``), except where the contract says otherwise (``payload``). Close
   objects (``_obj`` does) so an unknown field is a 422. A ``pattern`` gets its wording in
   ``PATTERN_DETAILS``; ``format: date-time`` is the RFC 3339 parser of ``parse.py``.
2. Add it to ``BODIES`` under the name the document will use (a query string: ``QUERIES``,
   flat, one property per parameter; an ``integer`` there is written in ASCII digits).
3. In the view: ``data = body("MyBody")``; then read fields with ``given(data, name, default)``.
   Rules a schema cannot state (a size per job type, a key's limits) stay in the view,
   reported under the same paths.
4. In ``openapi/paths.py`` (or ``operating.py``): ``requestBody=request_body("MyBody")``
   (a query: ``parameters=query_params(...)``).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from queuelog.model import limits
from queuelog.model.jobs import Priority, Status

JSON = dict[str, Any]

# The limits of the request fields, in one place (the views and the document import them).
MAX_JOB_ID = 2**63 - 1             # BIGINT
MAX_ATTEMPT = 2**31 - 1
MAX_RETRIES = 25
MAX_DELAY_SECONDS = 366 * 86_400
MAX_WAIT = 30.0
MAX_LEASE = 43_200
MAX_RETRY_IN = 86_400
MAX_ERROR_CHARS = 1_000_000        # before sanitizing and cutting to MAX_ERROR_BYTES
MAX_CLAIM_JOBS = 100
MAX_CLAIM_TYPES = 100
MAX_BULK_IDS = 1000                # ids in one bulk request; a filter has no limit
MAX_PAGE = 200                     # a page of GET /jobs or GET /audit
MAX_PROGRESS_BYTES = 1024          # a heartbeat's progress, as compact JSON
MAX_PARENTS = 100                  # a job's depends_on
MAX_BATCH_ITEMS = 100_000          # an item index's bound (MAX_BATCH is the real one)
PARENT_FAILURE = ("cancel", "run")
PRIORITIES = [p.label for p in Priority]
STATUSES = [s.value for s in Status]
RETRY_STATUSES = (Status.FAILED.value, Status.CANCELLED.value)
# What the audit log records (store/audit.py writes only these; GET /audit filters by them).
AUDIT_ACTIONS = ("key.create", "key.revoke", "user.create", "user.delete", "user.password",
                 "job.retry", "job.cancel", "job.run", "jobs.retry", "jobs.cancel", "type.pause",
                 "type.resume", "type.limits", "type.limits.reset", "jobs.purge", "audit.purge",
                 "schedule.pause", "schedule.resume", "schedule.run")
SCHEDULED = "scheduled"            # a dashboard-only status: pending with a future run_at
DASHBOARD_STATUSES = ["blocked", "pending", SCHEDULED, "running", "completed", "failed",
                      "cancelled"]
PRINTABLE_ASCII = "^[ -~]*$"
# NUL: no name holds one, and PostgreSQL refuses it in a query (a 500, not a 422).
NO_NUL = "^[^\\u0000]*$"
# RFC 3339 as the parser takes it (upper-case T and Z, no leap second), written in the years
# 1970 to 9998 (validation.YEARS). The parser, not this pattern, checks requests (it says
# which part is wrong); the document publishes the pattern; tests/test_schemas.py checks
# that the two agree.
# An idempotency key, declared once: the body's field, the Idempotency-Key header once
# unquoted (api/producer.py checks it against this) and the header's published pattern
# (openapi/paths.py KEY_HEADER, built from maxLength) all follow it.
IDEMPOTENCY_KEY = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": PRINTABLE_ASCII}
IDEMPOTENCY_KEY_RULE = (f"Must be {IDEMPOTENCY_KEY['minLength']} to "
                        f"{IDEMPOTENCY_KEY['maxLength']} printable ASCII characters.")
RUN_AT = (r"^(?:19[7-9]\d|[2-8]\d{3}|9[0-8]\d{2}|99[0-8]\d|999[0-8])"
          r"-\d{2}-\d{2}T\d{2}:\d{2}:[0-5]\d(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})$")


def cursor_pattern() -> str:
    """Base64url (unpadded) of ``v1:<1 to 18 digits>``: exactly what ``parse.decode_cursor`` takes.

    "v1:" encodes to "djE6"; then every 3 ASCII digits become 4 characters (G), and a
    tail of 1 or 2 digits becomes 2 or 3 characters (T1, T2).
    """
    first = "(?:[MN][DTjz]|O[DT])"
    group = f"{first}[AEIMQUYcgk][w-z0-5]"
    tail1, tail2 = "(?:[MN][AQgw]|O[AQ])", f"{first}[AEIMQUYcgk]"
    return f"^djE6(?:(?:{group}){{1,6}}|(?:{group}){{0,5}}(?:{tail1}|{tail2}))$"


CURSOR = cursor_pattern()
PATTERN_DETAILS = {PRINTABLE_ASCII: "Must be printable ASCII.", NO_NUL: "Must not hold NUL.",
                   CURSOR: "Not a cursor from a previous page.",
                   limits.RATE_PATTERN: "Must be N/s, N/min or N/h with N from 1 to 999999999."}
IGNORED = {"description": "Ignored: the worker is always the key's name (V-04)."}


def _obj(properties: JSON, required: tuple[str, ...] = (), **extra: Any) -> JSON:
    """A closed object: a field not declared is a 422."""
    out: JSON = {"type": "object", "properties": properties, "additionalProperties": False,
                 **extra}
    if required:
        out["required"] = list(required)
    return out


def _optional(schema: JSON) -> JSON:
    """``schema`` or ``null``, which means "left out" (the contract's rule for optional fields)."""
    out = dict(schema)
    kinds = out["type"] if isinstance(out["type"], list) else [out["type"]]
    out["type"] = [*kinds, "null"]
    if "enum" in out:
        out["enum"] = [*out["enum"], None]
    return out


def _int(lo: int, hi: int) -> JSON:
    """An integer in [lo, hi]."""
    return {"type": "integer", "minimum": lo, "maximum": hi}


def _num(lo: float, hi: float) -> JSON:
    """A number in [lo, hi]."""
    return {"type": "number", "minimum": lo, "maximum": hi}


def _enum(options: Any) -> JSON:
    """One of ``options`` (strings)."""
    return {"type": "string", "enum": list(options)}


def _text(max_len: int = 100) -> JSON:
    """1 to ``max_len`` characters, without NUL."""
    return {"type": "string", "minLength": 1, "maxLength": max_len, "pattern": NO_NUL}


def _types(config: Mapping[str, Any]) -> JSON:
    return {"type": "string", "enum": list(config["JOB_TYPES"])}


def _parents(in_batch: bool) -> JSON:
    """``depends_on``: job ids; in a batch also ``{"item": N}``, an earlier item."""
    job_id = _int(1, MAX_JOB_ID)
    item = _obj({"item": _int(0, MAX_BATCH_ITEMS) | {
        "description": "An earlier item of this batch (its index)."}}, ("item",))
    return _optional({"type": "array", "minItems": 1, "maxItems": MAX_PARENTS,
                      "items": {"anyOf": [job_id, item]} if in_batch else job_id,
                      "description": "The jobs this one waits for (see Workflows)."})


def new_job(config: Mapping[str, Any], in_batch: bool = False) -> JSON:
    """``POST /jobs``, and each item of ``POST /jobs/batch`` (``in_batch``)."""
    return _obj({
        "type": _types(config),
        # Not nullable: an explicit null payload is a producer bug (contract, 422).
        "payload": {"type": "object", "description":
                    "At most MAX_PAYLOAD_BYTES (or the type's) as compact JSON; default {}."},
        "priority": _optional({"type": "string", "enum": PRIORITIES, "default": "low"}),
        "max_retries": _optional(_int(0, MAX_RETRIES)),
        "run_at": _optional({"type": "string", "format": "date-time", "maxLength": 64,
                             "pattern": RUN_AT, "description":
                             "With a time zone. A time in the past means now."}),
        "delay_seconds": _optional(_num(0, MAX_DELAY_SECONDS)),
        "idempotency_key": _optional(dict(IDEMPOTENCY_KEY)),
        "depends_on": _parents(in_batch),
        "on_parent_failure": _optional({"type": "string", "enum": list(PARENT_FAILURE),
                                        "default": "cancel"}),
    }, ("type",), **{"not": {
        # Both given (not null, which is "left out") is refused. "type": without it, a value
        # that is no object (a batch item 1) matched this, and its 422 added a "not both".
        "type": "object", "required": ["run_at", "delay_seconds"], "properties": {
            "run_at": {"type": "string"}, "delay_seconds": {"type": "number"}}}})


def _lease() -> JSON:
    return _optional(_num(1, MAX_LEASE))


def _attempt() -> JSON:
    return _int(1, MAX_ATTEMPT) | {"description": "The attempt (fencing token) it is for."}


def _result() -> JSON:
    return {"type": ["object", "null"], "description": "At most MAX_PAYLOAD_BYTES as JSON."}


def _fail_fields() -> JSON:
    return {
        "error": _optional({"type": "string", "maxLength": MAX_ERROR_CHARS, "description":
                            "Sanitized and cut to MAX_ERROR_BYTES before it is stored."}),
        "retry": _optional({"type": "boolean", "default": True}),
        "retry_in": _optional(_num(0, MAX_RETRY_IN)),
    }


def _claim_fields(config: Mapping[str, Any]) -> JSON:
    """What a claim asks for: a claim's body, and the ``next`` of a complete or fail."""
    return {
        "types": _optional({"type": "array", "items": _types(config), "minItems": 1,
                            "maxItems": MAX_CLAIM_TYPES}),
        "wait": _optional(_num(0, MAX_WAIT) | {"description": "Long poll, seconds."}),
        "lease_seconds": _lease(),
        "worker_id": IGNORED,
    }


def _claim(config: Mapping[str, Any]) -> JSON:
    return _obj({
        **_claim_fields(config),
        "max_jobs": _optional(_int(1, MAX_CLAIM_JOBS) | {"description":
                              "Claim up to this many; the answer is then {\"jobs\": [...]}."}),
    })


def _next(config: Mapping[str, Any]) -> JSON:
    """A complete's or fail's ``next``: claim a job in the same request, after the finish."""
    return _optional(_obj(_claim_fields(config), description=(
        "Claim the next job in the same request, once the finish has committed (as a "
        "claim's body; {} for the defaults); the answer is then {\"job\", \"next\"}.")))


def _progress() -> JSON:
    return _optional({"type": "object", "description": (
        f"How far the job is, e.g. {{\"percent\": 40}}: at most {MAX_PROGRESS_BYTES} bytes "
        "as compact JSON.")})


def _batch(item: JSON, config: Mapping[str, Any]) -> JSON:
    return _obj({"jobs": {"type": "array", "items": item, "minItems": 1,
                          "maxItems": int(config["MAX_BATCH"])}}, ("jobs",))


def _job_ref() -> JSON:
    return {"id": _int(1, MAX_JOB_ID), "attempt": _attempt()}


def _bulk(filters: JSON) -> JSON:
    """``{"ids": [...]}`` or ``{"filter": {...}}``: exactly one (neither, ``{}``, is refused)."""
    return _obj({"ids": {"type": "array", "items": _int(1, MAX_JOB_ID), "minItems": 1,
                         "maxItems": MAX_BULK_IDS},
                 "filter": _obj({name: _optional(schema) for name, schema in filters.items()},
                                description="Every field optional; null means any.")},
                # The error of "both" is reported at the last name: ids.
                minProperties=1, **{"not": {"required": ["filter", "ids"]}})


BODIES: dict[str, Callable[[Mapping[str, Any]], JSON]] = {
    "NewJob": new_job,
    "ClaimRequest": _claim,
    "HeartbeatRequest": lambda c: _obj({"attempt": _attempt(), "lease_seconds": _lease(),
                                        "progress": _progress(), "worker_id": IGNORED},
                                       ("attempt",)),
    "CompleteRequest": lambda c: _obj({"attempt": _attempt(), "result": _result(),
                                       "next": _next(c), "worker_id": IGNORED}, ("attempt",)),
    "FailRequest": lambda c: _obj({"attempt": _attempt(), **_fail_fields(), "next": _next(c),
                                   "worker_id": IGNORED}, ("attempt",)),
    "NewJobBatch": lambda c: _batch(new_job(c, in_batch=True), c),
    "CompleteBatch": lambda c: _batch(_obj({**_job_ref(), "result": _result(),
                                            "worker_id": IGNORED}, ("id", "attempt")), c),
    "FailBatch": lambda c: _batch(_obj({**_job_ref(), **_fail_fields(),
                                        "worker_id": IGNORED}, ("id", "attempt")), c),
    "BulkRetry": lambda c: _bulk({"status": _enum(RETRY_STATUSES), "type": _types(c),
                                  "priority": _enum(PRIORITIES)}),
    "BulkCancel": lambda c: _bulk({"type": _types(c), "priority": _enum(PRIORITIES)}),
    "Empty": lambda c: _obj({}),
    "TypeLimits": lambda c: _type_limits(),
}


def _type_limits() -> JSON:
    """PUT /types/{type}/limits: a field left out keeps its value, ``null`` removes it."""
    return _obj({
        "concurrency": _optional(_int(1, limits.MAX_CONCURRENCY)),
        "rate": _optional({"type": "string", "pattern": limits.RATE_PATTERN,
                           "description": "N/s, N/min or N/h, N >= 1: a token bucket"}),
        "burst": _optional(_int(1, limits.MAX_BURST))})


def _page(**filters: JSON) -> JSON:
    """A query string of filters and a page: ``limit`` and the ``cursor`` of the last page."""
    return _obj({**filters, "limit": _int(1, MAX_PAGE) | {"default": 50},
                 "cursor": {"type": "string", "pattern": CURSOR,
                            "description": "`next_cursor` of the previous page."}})


def _job_id() -> JSON:
    return _int(1, MAX_JOB_ID) | {"description": "A job id; the dashboard takes `#12` too."}


# Query strings: every value arrives as a string (``check.query`` reads an ``integer`` from
# ASCII digits); the dashboard's filters are here too, though not in the document.
def _job_filters(statuses: list[str]) -> JSON:
    """The job filters GET /jobs and the dashboard's queue share (the dashboard's statuses
    add ``scheduled``)."""
    return {"status": _enum(statuses), "type": _text(), "priority": _enum(PRIORITIES),
            "producer": _text(), "worker": _text()}


QUERIES: dict[str, Callable[[Mapping[str, Any]], JSON]] = {
    "JobListQuery": lambda c: _page(**_job_filters(STATUSES), schedule=_text()),
    "JobQuery": lambda c: _obj({"wait": _num(0, MAX_WAIT) | {"description": (
        "Seconds to wait for the job to finish (see Outcomes).")}}),
    "AuditQuery": lambda c: _page(action=_enum(AUDIT_ACTIONS), actor=_text()),
    "QueueFilters": lambda c: _obj({**_job_filters(DASHBOARD_STATUSES),
                                    "q": _text(255),  # id or idem. key
                                    "before": _job_id(), "after": _job_id()}),
    "AuditFilters": lambda c: _obj({"before": _job_id()}),
    "Jump": lambda c: _obj({"id": _job_id()}),
}



def bodies(config: Mapping[str, Any]) -> dict[str, JSON]:
    """Every request body's schema for this configuration (job types, MAX_BATCH)."""
    return {name: build(config) for name, build in BODIES.items()}


def queries(config: Mapping[str, Any]) -> dict[str, JSON]:
    """Every query string's schema (an object, one property per parameter)."""
    return {name: build(config) for name, build in QUERIES.items()}
