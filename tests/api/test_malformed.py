"""Bad input never 500s: every malformed request gets its 4xx problem+json and changes nothing.

One app per backend serves the whole table (a request that changes nothing leaves it as it
was for the next). Its jobs are set up so that a *valid* request to each route would change
something: job 1 is running (held by mailer-1, attempt 1), job 2 failed, job 3 pending.
"""
from __future__ import annotations

import base64
import json
from typing import Any, Iterator, NamedTuple

import pytest
from werkzeug.security import generate_password_hash

from conftest import BACKENDS, FakeClock, _empty_pg
from queuelog import create_app
from queuelog.server.store import NewJob, Store

PROBLEM = "application/problem+json"
RUNNING, FAILED, PENDING = 1, 2, 3
MAX_CONTENT_LENGTH = 1_048_576

# route: (method, path, caller, a valid body: the table's cases break it in one way each)
ROUTES: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "enqueue": ("POST", "/jobs", "producer", {"type": "email", "payload": {"to": "a@b.c"}}),
    "claim": ("POST", "/jobs/claim", "worker", {"types": ["email"], "wait": 0}),
    "heartbeat": ("POST", f"/jobs/{RUNNING}/heartbeat", "worker", {"attempt": 1}),
    "complete": ("POST", f"/jobs/{RUNNING}/complete", "worker", {"attempt": 1, "result": {}}),
    "fail": ("POST", f"/jobs/{RUNNING}/fail", "worker", {"attempt": 1, "error": "boom"}),
    "cancel": ("POST", f"/jobs/{PENDING}/cancel", "producer", {}),
    "retry": ("POST", f"/jobs/{FAILED}/retry", "admin", {}),
}


class Bad(NamedTuple):
    """One malformed request and the status it must get."""

    route: str
    status: int
    body: bytes | None = None
    content_type: str | None = "application/json"
    headers: dict[str, str] = {}
    path: str | None = None          # overrides the route's path
    query: str = ""
    who: str | None = None           # overrides the route's caller


def _raw(route: str, extra: str) -> bytes:
    """The route's valid body with ``extra`` (raw JSON text) as one more member."""
    valid = json.dumps(ROUTES[route][3])
    return (valid[:-1] + (", " if len(valid) > 2 else "") + extra + "}").encode()


def _with(route: str, **fields: Any) -> bytes:
    """The route's valid body with ``fields`` set."""
    return json.dumps({**ROUTES[route][3], **fields}).encode()


def _without(route: str, name: str) -> bytes:
    """The route's valid body without field ``name``."""
    return json.dumps({k: v for k, v in ROUTES[route][3].items() if k != name}).encode()


BIG = {"x": "y" * 65_536}
DEEP = "[" * 64 + "]" * 64               # in an object: 65 levels
VERY_DEEP = "[" * 100_000 + "]" * 100_000


def _every_write_route() -> Iterator[Any]:
    for r in ROUTES:
        yield from (pytest.param(b, id=f"{r}-{name}") for name, b in [
            ("not-json", Bad(r, 400, b'{"type": ')),
            ("trailing-garbage", Bad(r, 400, b"{} x")),
            ("text-plain", Bad(r, 415, _with(r), "text/plain")),
            ("form-encoded", Bad(r, 415, b"type=email", "application/x-www-form-urlencoded")),
            ("no-content-type", Bad(r, 415, _with(r), None)),
            ("json-array", Bad(r, 400, b"[]")),
            ("json-string", Bad(r, 400, b'"email"')),
            ("json-number", Bad(r, 400, b"42")),
            ("json-null", Bad(r, 400, b"null")),
            ("nan", Bad(r, 400, _raw(r, '"x": NaN'))),
            ("infinity", Bad(r, 400, _raw(r, '"x": Infinity'))),
            ("minus-infinity", Bad(r, 400, _raw(r, '"x": -Infinity'))),
            # well-formed JSON, a number out of any range: 422, like any number out of range
            ("1e400", Bad(r, 422, _raw(r, '"x": 1e400'))),
            ("5000-digits", Bad(r, 422, _raw(r, '"x": 1' + "0" * 5000))),
            ("nested-65", Bad(r, 400, _raw(r, f'"x": {DEEP}'))),
            ("nested-100000", Bad(r, 400, _raw(r, f'"x": {VERY_DEEP}'))),
            ("lone-surrogate", Bad(r, 400, _raw(r, r'"x": "\ud800"'))),
            ("raw-nul-in-string", Bad(r, 400, _raw(r, '"x": "a\x00b"'))),
            ("invalid-utf8", Bad(r, 400, _raw(r, '"x": "?"').replace(b"?", b"\xff\xfe"))),
            ("utf8-surrogate", Bad(r, 400, _raw(r, '"x": "?"').replace(b"?", b"\xed\xa0\x80"))),
            ("unknown-field", Bad(r, 422, _with(r, bogus=1))),
            ("too-large", Bad(r, 413, b" " * (MAX_CONTENT_LENGTH + 1))),
            ("cross-site", Bad(r, 403, _with(r), headers={"Sec-Fetch-Site": "cross-site"})),
        ])


FIELDS: list[tuple[str, str, Any]] = [
    # (route, field, bad value): each a 422
    *[("enqueue", "type", v) for v in (42, None, "", "nope", "email\x00", ["email"], "x" * 101)],
    *[("enqueue", "payload", v) for v in ([], "x", 1, True, BIG)],
    *[("enqueue", "priority", v) for v in ("urgent", "HIGH", 10, "")],
    *[("enqueue", "max_retries", v) for v in (-1, 26, "3", True, 2.5, 10**30)],
    *[("enqueue", "run_at", v) for v in ("2026-01-02T03:04:05", "tomorrow", "", 1780000000,
                                          "0001-01-01T00:00:00Z", "2026-13-01T00:00:00Z")],
    *[("enqueue", "delay_seconds", v) for v in (-1, "5", 366 * 86_400 + 1, [])],
    *[("enqueue", "idempotency_key", v) for v in ("", "k" * 256, "ключ", "a\tb", "a\x00b",
                                                  "a\x7fb", 5)],
    *[("claim", "types", v) for v in ("email", [], [1], ["nope"], ["email"] * 101)],
    *[("claim", "wait", v) for v in (-1, 31, "1", True)],
    *[("claim", "lease_seconds", v) for v in (0, 43_201, "60", -5)],
    *[("heartbeat", "attempt", v) for v in (0, -1, "1", True, None, 1.5, 2**31)],
    *[("heartbeat", "lease_seconds", v) for v in (0, 43_201, "60")],
    *[("complete", "attempt", v) for v in (0, "1", None)],
    *[("complete", "result", v) for v in ("done", [], 1, BIG)],
    *[("fail", "attempt", v) for v in (0, "1", None)],
    *[("fail", "error", v) for v in (5, ["boom"], {})],
    *[("fail", "retry", v) for v in ("yes", 1)],  # null is "left out" (contract)
    *[("fail", "retry_in", v) for v in (-1, 86_401, "10")],
]


def _field_cases() -> Iterator[Any]:
    for route, field, value in FIELDS:
        yield pytest.param(Bad(route, 422, _with(route, **{field: value})),
                           id=f"{route}-{field}={json.dumps(value)[:16]}")
    for route in ("heartbeat", "complete", "fail"):
        yield pytest.param(Bad(route, 422, _without(route, "attempt")),
                           id=f"{route}-attempt-missing")
    yield pytest.param(Bad("enqueue", 422, _without("enqueue", "type")), id="enqueue-type-missing")
    yield pytest.param(Bad("enqueue", 422, _with("enqueue", run_at="2030-01-01T00:00:00Z",
                                                 delay_seconds=5)), id="enqueue-run_at-and-delay")
    for name, key in [("empty", ""), ("256-chars", "k" * 256), ("latin-1", "\u00e9t\u00e9"),
                      ("control", "a\x01b"), ("bad-escape", '"a\\q"'), ("empty-quoted", '""')]:
        yield pytest.param(Bad("enqueue", 422, _with("enqueue"),
                               headers={"Idempotency-Key": key}), id=f"enqueue-key-header-{name}")
    yield pytest.param(Bad("enqueue", 422, _with("enqueue", idempotency_key="a"),
                           headers={"Idempotency-Key": "b"}), id="enqueue-key-header-differs")
    for route in ("enqueue", "cancel", "retry"):  # Basic (a browser) must send JSON
        yield pytest.param(Bad(route, 415, _with(route), None, who="user"),
                           id=f"{route}-basic-no-content-type")
        yield pytest.param(Bad(route, 415, None, None, who="user"),
                           id=f"{route}-basic-no-body")


def _path_and_query_cases() -> Iterator[Any]:
    for route in ("list", "enqueue"):  # PostgreSQL refuses NUL in a query parameter
        yield pytest.param(Bad(route, 401, _with(route) if route in ROUTES else None,
                               who="nul-user"), id=f"{route}-basic-username-with-nul")
    for bad_id in ("-1", "0", "9223372036854775808", "9" * 30, "abc", "1.5", "%00"):
        for route in ("heartbeat", "complete", "fail", "cancel", "retry"):
            yield pytest.param(Bad(route, 404, _with(route), path=f"/jobs/{bad_id}/{route}"),
                               id=f"{route}-id={bad_id[:12]}")
        yield pytest.param(Bad("get", 404, path=f"/jobs/{bad_id}"), id=f"get-id={bad_id[:12]}")
    for query in ("limit=0", "limit=201", "limit=-1", "limit=abc", "limit=%C2%B2", "limit=1.5",
                  "limit=", "limit=1000000000", "cursor=!!!", "cursor=djE6", "cursor=djI6MQ",
                  "cursor=djE6LTE", "status=bogus", "status=", "priority=urgent", "type=",
                  "type=" + "x" * 101, "type=a%00b"):
        yield pytest.param(Bad("list", 422, query=query), id=f"list-{query[:20]}")


def build(url: str) -> dict[str, Any]:
    """An app on ``url`` with jobs in three states and a caller for each role."""
    app = create_app({"TESTING": True, "DATABASE_URL": url, "SECRET_KEY": "test-secret",
                      "BOOTSTRAP_ADMIN": False, "SQLITE_SYNCHRONOUS": "OFF"})
    store: Store = app.extensions["queuelog.store"]
    store.clock = FakeClock()
    callers = {role: {"Authorization": "Bearer " + store.accounts.create_key(name, role)[1]}
               for name, role in (("billing", "producer"), ("mailer-1", "worker"),
                                  ("root", "admin"))}
    # A cheap hash: password hashing speed is not under test here.
    store.accounts.create_user("alice", generate_password_hash("pw", "pbkdf2:sha256:1"), "admin")
    callers["user"] = {"Authorization": "Basic " + base64.b64encode(b"alice:pw").decode()}
    callers["nul-user"] = {"Authorization": "Basic " + base64.b64encode(b"al\x00ce:pw").decode()}
    for _ in range(2):  # 1 running, 2 failed, 3 pending
        store.enqueue(NewJob(producer="billing", type="email", payload_json="{}", priority=0,
                             max_retries=0))
        store.claim("mailer-1", lease_seconds=300)
    store.fail(FAILED, "mailer-1", 1, "boom", retry=False)
    store.enqueue(NewJob(producer="billing", type="email", payload_json="{}", priority=0,
                         max_retries=0))
    return {"client": app.test_client(), "store": store, "callers": callers}


@pytest.fixture(scope="module", params=BACKENDS)
def env(request: pytest.FixtureRequest, tmp_path_factory: Any) -> Iterator[dict[str, Any]]:
    """One app per backend for the whole table."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('malformed')}/queuelog.sqlite3"
    else:
        url = request.getfixturevalue("pg_ready")
        _empty_pg(url)
    built = build(url)
    yield built
    built["store"].close()


def snapshot(store: Store) -> Any:
    """Everything a request could change: every job, its history, the counts."""
    jobs = store.list_jobs(limit=200).jobs
    return ([store.get(j.id).to_dict(show_error=True, show_key=True) for j in jobs],
            store.gauges([]).counts)


def send(env: dict[str, Any], bad: Bad) -> Any:
    """Send one request as the route's caller."""
    method, path, who = {"get": ("GET", "/jobs", "admin"),
                         "list": ("GET", "/jobs", "admin")}.get(bad.route) or ROUTES[bad.route][:3]
    headers = {**env["callers"][bad.who or who], **bad.headers}
    if bad.content_type:
        headers["Content-Type"] = bad.content_type
    url = (bad.path or path) + ("?" + bad.query if bad.query else "")
    return env["client"].open(url, method=method, data=bad.body, headers=headers)


@pytest.mark.parametrize("bad", [*_every_write_route(), *_field_cases(),
                                 *_path_and_query_cases()])
def test_malformed_request_is_a_clean_4xx(env: dict[str, Any], bad: Bad) -> None:
    """The expected 4xx, as problem+json whose ``status`` is the HTTP status; nothing changed."""
    env["store"].clock.now += 1  # a microsecond on: any write would now show in updated_at
    before = snapshot(env["store"])
    resp = send(env, bad)
    assert resp.status_code == bad.status, resp.get_data(as_text=True)[:300]
    assert resp.mimetype == PROBLEM
    assert resp.get_json()["status"] == bad.status
    assert snapshot(env["store"]) == before


@pytest.mark.parametrize("route", list(ROUTES))
def test_the_valid_request_would_change_something(route: str, tmp_path: Any) -> None:
    """The table's baseline bodies are valid: sent as is, each changes the store."""
    fresh = build(f"sqlite:///{tmp_path}/queuelog.sqlite3")
    method, path, who, body = ROUTES[route]
    fresh["store"].clock.now += 1
    before = snapshot(fresh["store"])
    resp = fresh["client"].open(path, method=method, json=body, headers=fresh["callers"][who])
    created = route == "enqueue"
    assert resp.status_code == (201 if created else 200), resp.get_data(as_text=True)[:300]
    assert snapshot(fresh["store"]) != before
    fresh["store"].close()
