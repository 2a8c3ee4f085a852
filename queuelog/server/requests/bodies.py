"""Every JSON request body of the API, declared once, as a JSON Schema.

One declaration drives three things: the checks (``validation.body("NewJob")`` answers 422
with every error, each at its contract-style path, e.g. ``jobs[3].priority``), the names of
those paths, and the ``requestBody`` of ``/openapi.json`` (``openapi.py`` publishes
``bodies(config)`` as its components). So the document cannot drift from what is enforced.

To add a body:

1. Write ``def _my_body(config) -> JSON`` below with the keywords ``schema_compiler``
   supports (``type``, ``properties``, ``required``, ``additionalProperties``, ``items``,
   ``minItems``/``maxItems``, ``minimum``/``maximum``, ``minLength``/``maxLength``, ``enum``,
   ``pattern``, ``format: date-time``, ``not: {required: [a, b]}`` with optional
   ``properties`` of a ``type`` each); anything else is refused
   at start-up. Optional fields take ``null`` for "left out" (``_optional``), except where
   the contract says otherwise (``payload``). Close objects (``_obj`` does) so an unknown
   field is a 422.
2. Add it to ``BODIES`` under the name the document will use.
3. In the view: ``data = body("MyBody")``; then read fields with ``given(data, name, default)``.
   Rules a schema cannot state (a size per job type, a key's limits) stay in the view,
   reported with ``ValidationFailed`` / ``field_error`` under the same paths.
4. In ``openapi.py``: ``requestBody=_body("MyBody")``.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from queuelog.model.jobs import Priority

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
PRIORITIES = [p.label for p in Priority]
PRINTABLE_ASCII = "^[ -~]*$"
# RFC 3339 as the parser takes it (upper-case T and Z, no leap second), written in the years
# 1970 to 9998 (validation.YEARS). The parser, not this pattern, checks requests (it says
# which part is wrong); the document publishes the pattern; tests/test_schemas.py checks
# that the two agree.
RUN_AT = (r"^(?:19[7-9]\d|[2-8]\d{3}|9[0-8]\d{2}|99[0-8]\d|999[0-8])"
          r"-\d{2}-\d{2}T\d{2}:\d{2}:[0-5]\d(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})$")
PATTERN_DETAILS = {PRINTABLE_ASCII: "Must be printable ASCII."}
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
    return {"type": "integer", "minimum": lo, "maximum": hi}


def _num(lo: float, hi: float) -> JSON:
    return {"type": "number", "minimum": lo, "maximum": hi}


def _types(config: Mapping[str, Any]) -> JSON:
    return {"type": "string", "enum": list(config["JOB_TYPES"])}


def new_job(config: Mapping[str, Any]) -> JSON:
    """``POST /jobs``, and each item of ``POST /jobs/batch``."""
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
        "idempotency_key": _optional({"type": "string", "minLength": 1, "maxLength": 255,
                                      "pattern": PRINTABLE_ASCII}),
    }, ("type",), **{"not": {"required": ["run_at", "delay_seconds"], "properties": {
        # Both given (not null, which is "left out") is refused.
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


def _claim(config: Mapping[str, Any]) -> JSON:
    return _obj({
        "types": _optional({"type": "array", "items": _types(config), "minItems": 1,
                            "maxItems": MAX_CLAIM_TYPES}),
        "wait": _optional(_num(0, MAX_WAIT) | {"description": "Long poll, seconds."}),
        "lease_seconds": _lease(),
        "max_jobs": _optional(_int(1, MAX_CLAIM_JOBS) | {"description":
                              "Claim up to this many; the answer is then {\"jobs\": [...]}."}),
        "worker_id": IGNORED,
    })


def _batch(item: JSON, config: Mapping[str, Any]) -> JSON:
    return _obj({"jobs": {"type": "array", "items": item, "minItems": 1,
                          "maxItems": int(config["MAX_BATCH"])}}, ("jobs",))


def _job_ref() -> JSON:
    return {"id": _int(1, MAX_JOB_ID), "attempt": _attempt()}


BODIES: dict[str, Callable[[Mapping[str, Any]], JSON]] = {
    "NewJob": new_job,
    "ClaimRequest": _claim,
    "HeartbeatRequest": lambda c: _obj({"attempt": _attempt(), "lease_seconds": _lease(),
                                        "worker_id": IGNORED}, ("attempt",)),
    "CompleteRequest": lambda c: _obj({"attempt": _attempt(), "result": _result(),
                                       "worker_id": IGNORED}, ("attempt",)),
    "FailRequest": lambda c: _obj({"attempt": _attempt(), **_fail_fields(),
                                   "worker_id": IGNORED}, ("attempt",)),
    "NewJobBatch": lambda c: _batch(new_job(c), c),
    "CompleteBatch": lambda c: _batch(_obj({**_job_ref(), "result": _result(),
                                            "worker_id": IGNORED}, ("id", "attempt")), c),
    "FailBatch": lambda c: _batch(_obj({**_job_ref(), **_fail_fields(),
                                        "worker_id": IGNORED}, ("id", "attempt")), c),
    "Empty": lambda c: _obj({}),
}


def bodies(config: Mapping[str, Any]) -> dict[str, JSON]:
    """Every request body's schema for this configuration (job types, MAX_BATCH)."""
    return {name: build(config) for name, build in BODIES.items()}
