"""The OpenAPI document, proven against the app in process by schemathesis, on each backend.

Schemathesis sends data the document calls valid (it must be accepted) and data it calls
invalid (it must get a 4xx), and checks every answer against the document: no 5xx, only
documented status codes, content types, headers and bodies.

Who calls: roles differ per route, so each operation is sent with the key that can reach
it: the worker key for the worker verbs (claim, heartbeat, complete, fail), which admins
may not call, and an admin key for everything else (admins may do all the rest and see
the most fields, e.g. ``error``). The 401 path is covered by schemathesis itself, which
resends requests without credentials where the document declares security.
"""
from __future__ import annotations

from typing import Any, Callable

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import positive_data_acceptance

from helpers import hash_checks
from queuelog.model.jobs import Status
from queuelog.server.requests.openapi import document
from queuelog.server.store import NewJob, Store
from queuelog.server.throttle import SignInThrottle

# Random (fuzzing) requests per operation. On SQLite the coverage phase's boundary cases run
# too, and they reach every line and branch the fuzzing does: measured with coverage.py, 10
# examples per operation cover exactly the lines and arcs 25 do (3,702 lines, 5,348 arcs), in
# 13-17% less time. PostgreSQL has no coverage phase (see api_schema): at 10 its fuzzing misses
# 64 lines that 25 reach (long polls, bulk admin paths), which tests/api covers on PostgreSQL
# by name; the conformance of every operation's answers is what this run adds there, and 10
# examples per operation check it (CI's budget is minutes).
FUZZ_EXAMPLES = {"sqlite": 10, "postgresql": 6}
WORKER_OPS = {"/jobs/claim", "/jobs/{id}/heartbeat", "/jobs/{id}/complete", "/jobs/{id}/fail",
              "/jobs/complete", "/jobs/fail"}


def seed(store: Store) -> None:
    """Jobs 1..12 in every state, so small generated ids reach each route's success path."""
    for n in range(12):
        store.enqueue(NewJob(producer="billing", type=("email", "pdf", "sync")[n % 3],
                             payload_json='{"n": %d}' % n, priority=10, max_retries=1))
    for _ in range(5):                      # 1-5 running, held by mailer-1 at attempt 1
        store.claim("mailer-1", lease_seconds=300)
    store.fail(5, "mailer-1", 1, "boom", retry=False)                 # 5 failed
    store.complete(4, "mailer-1", 1, '{"ok": true}')                  # 4 completed
    store.cancel(6)                                                   # 6 cancelled
    assert store.get(1).status is Status.RUNNING                      # 7-12 pending


@pytest.fixture
def config() -> dict[str, Any]:
    """No fsyncs (durability is not under test here); one more job type and a schedule."""
    return {"SQLITE_SYNCHRONOUS": "OFF",
            "JOB_TYPES": {"email": {}, "pdf": {}, "sync": {}, "report": {"max_retries": 5}},
            "SCHEDULES": {"nightly": {"cron": "0 3 * * *", "type": "report",
                                      "timezone": "Europe/Berlin"}}}


@pytest.fixture
def keys(make_key: Callable[..., dict[str, str]]) -> dict[str, dict[str, str]]:
    """The two keys the fuzzer calls with."""
    return {"admin": make_key("root", "admin"), "worker": make_key("mailer-1", "worker")}


@pytest.fixture
def api_schema(app: Any, store: Store, keys: dict[str, dict[str, str]], backend: str,
               monkeypatch: pytest.MonkeyPatch) -> Any:
    """The document as the app serves it, loaded in process, over a seeded database."""
    seed(store)
    # The ignored_auth check's made-up Basic credentials name no user, so each is checked
    # against the timing-equalizing dummy hash: 164 of them on SQLite (20 s of scrypt).
    hash_checks(app)  # with the cheap dummy hash
    # schemathesis's ignored_auth check sends the same made-up Basic credentials again and
    # again; after 10 the sign-in throttle (contract) answers 429, which that check does not
    # expect. The throttle has its own tests (test_throttle.py); here it never trips.
    app.extensions["queuelog.sign_in_throttle"] = SignInThrottle(failures=10**9)
    loaded = schemathesis.openapi.from_wsgi("/openapi.json", app, headers=keys["admin"])
    # Made-up Basic credentials each cost a deliberately slow password hash (timing
    # equalization): 0.25 s apiece, most of the run. Bad credentials are tested elsewhere.
    loaded.config.generation.update(with_security_parameters=False)
    # A field over its maxLength can make the body over MAX_CONTENT_LENGTH: rejected as a
    # whole, with the documented 413, before its fields are read.
    rejection = loaded.config.checks.negative_data_rejection
    rejection.expected_statuses = [*rejection.expected_statuses, "413"]
    # An undocumented method on every path once per method is 8 requests x 26 paths;
    # two of them (one that exists on other paths, one that exists nowhere) prove the 405
    # handling as well and keep the suite inside CI's budget.
    loaded.config.phases.coverage.unexpected_methods = {"patch", "trace"}
    if backend == "postgresql":
        # The document is the same on both; what PostgreSQL adds is how the database takes
        # odd values (NUL, huge numbers), which random fuzzing reaches. The coverage phase's
        # boundary cases run on SQLite only (a third less time).
        loaded.config.phases.coverage.enabled = False
    loaded.config.generation.update(max_examples=FUZZ_EXAMPLES[backend])
    return loaded


schema = schemathesis.pytest.from_fixture("api_schema")


def _short_wait(case: Any) -> None:
    # A valid long poll with nothing due (a claim, a complete's ``next``, a read waiting
    # for a job's finish) would sleep up to 30 s; how long it waits does not change what
    # it answers, so keep valid waits valid but short.
    body = case.body if isinstance(case.body, dict) else {}
    for holder in (body, body.get("next"), case.query):
        wait = holder.get("wait") if isinstance(holder, dict) else None
        if type(wait) in (int, float) and 0 < wait <= 30:
            holder["wait"] = min(wait, 0.01)
        elif isinstance(wait, str) and wait.replace(".", "", 1).isdigit():
            holder["wait"] = "0.01" if 0 < float(wait) <= 30 else wait


def _stateful_key(case: Any) -> bool:
    # Whether a valid request with an idempotency key is accepted depends on what was
    # sent before with that key (422 mismatch) and on the body's key agreeing with the
    # header's: rules across requests and parameters that a schema cannot state. So are
    # "one key (or one job id) once per batch": JSON Schema has no uniqueness by property.
    body = case.body if isinstance(case.body, dict) else {}
    path = case.operation.path
    # So is a parent in depends_on: whether that job exists and the caller may read it.
    items = body.get("jobs") if isinstance(body.get("jobs"), list) else [body]
    if any(isinstance(i, dict) and i.get("depends_on") for i in items):
        return True
    if path == "/jobs":
        return body.get("idempotency_key") is not None or "Idempotency-Key" in (
            case.headers or {})
    items = body.get("jobs") if isinstance(body.get("jobs"), list) else []
    if path == "/jobs/batch":
        return any(isinstance(i, dict) and i.get("idempotency_key") is not None
                   for i in items)
    if path in ("/jobs/complete", "/jobs/fail"):
        # As the server compares them: 1 and 1.0 are the same id.
        ids = [repr(float(i)) if type(i) in (int, float) else repr(i)
               for i in (item.get("id") for item in items if isinstance(item, dict))]
        return len(ids) != len(set(ids))
    return False


@settings(derandomize=True, deadline=None,
          suppress_health_check=list(HealthCheck))
@schema.parametrize()
def test_api_conforms_to_its_document(case: Any, keys: dict[str, dict[str, str]],
                                      app: Any) -> None:
    """No 5xx, and every answer as documented, for valid and invalid requests alike."""
    _short_wait(case)
    role = "worker" if case.operation.path in WORKER_OPS else "admin"
    skip = [positive_data_acceptance] if _stateful_key(case) else []
    case.call_and_validate(headers=keys[role], excluded_checks=skip)


def test_document_is_served_and_lists_every_route(client: Any, keys: Any, app: Any) -> None:
    """GET /openapi.json answers the document, with the configured job types."""
    got = client.get("/openapi.json", headers=keys["admin"])
    assert got.status_code == 200 and got.json == document(app.config)
    assert set(got.json["paths"]) == {
        "/jobs", "/jobs/{id}", "/jobs/claim", "/jobs/{id}/heartbeat", "/jobs/{id}/complete",
        "/jobs/{id}/fail", "/jobs/{id}/cancel", "/jobs/{id}/retry", "/jobs/{id}/run", "/healthz",
        "/metrics", "/openapi.json", "/jobs/retry", "/jobs/cancel", "/types", "/types/{type}/pause",
        "/types/{type}/resume", "/types/{type}/limits", "/audit", "/jobs/batch", "/jobs/complete",
        "/jobs/fail", "/schedules", "/schedules/{name}/pause", "/schedules/{name}/resume",
        "/schedules/{name}/run", "/workers"}
    new_job = got.json["components"]["schemas"]["NewJob"]
    assert new_job["properties"]["type"]["enum"] == ["email", "pdf", "sync", "report"]
    assert client.get("/openapi.json").status_code == 401


def test_document_is_valid_openapi_3_1(app: Any) -> None:
    """The document passes an independent OpenAPI 3.1 validator."""
    validator = pytest.importorskip("openapi_spec_validator")
    validator.validate(document(app.config))


def test_integral_float_is_an_integer(client: Any, keys: Any) -> None:
    """JSON Schema's ``integer`` (the document's) includes 2.0, so the server takes it as 2."""
    got = client.post("/jobs", json={"type": "email", "max_retries": 2.0}, headers=keys["admin"])
    assert got.status_code == 201 and got.json["max_retries"] == 2
    bad = client.post("/jobs", json={"type": "email", "max_retries": 2.5}, headers=keys["admin"])
    assert bad.status_code == 422
