"""The OpenAPI document's building blocks: schema shorthands, answers, errors, operations.

Every part of the document (``schemas.py``, ``paths.py``, ``operating.py``) is written with
these, so a response, a problem or an operation has one shape throughout.
"""
from __future__ import annotations

from typing import Any, Mapping

from queuelog.server.requests.bodies import MAX_JOB_ID
from queuelog.server.requests.openapi.text import ERRORS, TAG_OF

TIMESTAMP = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$"
PROBLEM = "application/problem+json"
BEARER: list[dict[str, list[str]]] = [{"bearer": []}]
ANY_AUTH: list[dict[str, list[str]]] = [{"bearer": []}, {"basic": []}]

JSON = dict[str, Any]


def ref(name: str) -> JSON:
    """A reference to a schema in components."""
    return {"$ref": f"#/components/schemas/{name}"}


def obj(properties: JSON, required: tuple[str, ...] = (), closed: bool = True,
        **extra: Any) -> JSON:
    """An object schema; ``closed`` mirrors the views' 422 on unknown fields."""
    out: JSON = {"type": "object", "properties": properties, **extra}
    if required:
        out["required"] = list(required)
    if closed:
        out["additionalProperties"] = False
    return out


def integer(lo: int, hi: int | None = None) -> JSON:
    """An integer in [lo, hi]."""
    return {"type": "integer", "minimum": lo, **({} if hi is None else {"maximum": hi})}


def stamp(nullable: bool = False) -> JSON:
    """A timestamp as the API writes it: ISO 8601 UTC, microseconds, ``Z``."""
    return {"type": ["string", "null"] if nullable else "string", "format": "date-time",
            "pattern": TIMESTAMP}


def json_answer(schema: JSON, description: str, headers: Mapping[str, JSON] | None = None,
                links: JSON | None = None) -> JSON:
    """A response with a JSON body, and headers and links if any."""
    out: JSON = {"description": description, "content": {"application/json": {"schema": schema}}}
    if headers:
        out["headers"] = dict(headers)
    if links:
        out["links"] = links
    return out


def header(description: str, schema: JSON | None = None) -> JSON:
    """A response header that is always sent."""
    return {"description": description, "required": True, "schema": schema or {"type": "string"}}


def problems(*codes: int) -> JSON:
    """Problem+json responses for ``codes``; 401 with its challenge header."""
    out: JSON = {}
    for code in codes:
        out[str(code)] = {"description": ERRORS[code],
                          "content": {PROBLEM: {"schema": ref("Problem")}}}
        if code == 401:
            out[str(code)]["headers"] = {"WWW-Authenticate": header("Basic and Bearer.")}
        if code in (429, 503):
            out[str(code)]["headers"] = {"Retry-After": header("Seconds.")}
    return out


def request_body(name: str, required: bool = True) -> JSON:
    """A JSON request body of schema ``name``."""
    return {"required": required, "content": {"application/json": {"schema": ref(name)}}}


def op(op_id: str, summary: str, roles: str, responses: JSON, *codes: int,
       security: Any = ANY_AUTH, rules: str = "", **extra: Any) -> JSON:
    """One operation: its tag, success responses plus problem+json for each error code."""
    if any("basic" in scheme for scheme in security):
        codes = (*codes, 429)  # the sign-in throttle answers any Basic request
    return {"operationId": op_id, "tags": [TAG_OF[op_id]], "summary": summary,
            "description": f"Who: {roles}." + (f"\n\n{rules}" if rules else ""),
            "security": security, "responses": {**responses, **problems(*codes, 503)}, **extra}


JOB_ID = {"name": "id", "in": "path", "required": True, "schema": integer(1, MAX_JOB_ID)}
WRITE = (400, 401, 403, 413, 415)
JOB_VERB = (*WRITE, 404, 409, 422)
WORKER = "the worker holding the job"
READERS = "producer (own jobs), worker (jobs it holds or held), viewer, admin"


def query_params(declared: JSON) -> list[JSON]:
    """The query parameters of a declared query string (``bodies.QUERIES``), one per property."""
    out = []
    for name, schema in declared["properties"].items():
        param: JSON = {"name": name, "in": "query", "schema": dict(schema)}
        if "description" in schema:
            param["description"] = param["schema"].pop("description")
        out.append(param)
    return out


def verb(op_id: str, summary: str, roles: str, body: str | None,
         security: Any = BEARER, rules: str = "", links: JSON | None = None,
         answer: tuple[JSON, str] | None = None) -> JSON:
    """POST /jobs/{id}/<verb>: a job transition answering the job (or ``answer``)."""
    schema, said = answer or (ref("Job"), "The job.")
    return {"post": op(op_id, summary, roles, {"200": json_answer(schema, said, links=links)},
                       *JOB_VERB, security=security, parameters=[JOB_ID], rules=rules,
                       requestBody=request_body(body or "Empty", required=body is not None))}
