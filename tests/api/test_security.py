"""One test (or a small group) per security finding V-01..V-10, on SQLite and PostgreSQL.

Each of these was checked by hand to fail when its protection is removed.
"""
from __future__ import annotations

import ast
import base64
import io
import json
import pathlib
import sqlite3
import threading
from typing import Any

from sqlalchemy import event, func, select

from queuelog.server.store.tables import api_keys, job_attempts, jobs
from queuelog.server.store import NewJob
from helpers import basic, enqueue, problem, quick_hash

STORE_DIR = pathlib.Path(__file__).resolve().parents[2] / "queuelog" / "server" / "store"
INJECTION = "email' OR 1=1 --"


def count_jobs(store: Any) -> int:
    """Rows in the jobs table."""
    with store.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(jobs)).scalar_one()


# -- V-01: authentication and authorization on every endpoint ----------------------------------

def _concrete_urls(app: Any) -> list[tuple[str, str, str]]:
    out = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint in ("static", "read.healthz", "index"):
            continue
        path = rule.rule
        for arg in rule.arguments:
            path = path.replace(f"<{arg}>", "1")
            for conv in ("int", "job_id", "path", "string"):
                path = path.replace(f"<{conv}:{arg}>", "1")
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            out.append((rule.endpoint, method, path))
    return out


def test_v01_every_endpoint_but_healthz_needs_credentials(app, client, store):
    """V-01: no credentials -> 401 with WWW-Authenticate on every route but /healthz."""
    urls = _concrete_urls(app)
    assert {("producer.enqueue", "POST", "/jobs"), ("read.metrics", "GET", "/metrics"),
            ("worker.claim", "POST", "/jobs/claim")} <= set(urls)
    for endpoint, method, path in urls:
        resp = client.open(path, method=method, json={})
        assert resp.status_code == 401, (endpoint, method, path)
        assert "WWW-Authenticate" in resp.headers, (endpoint, method, path)
        if not endpoint.startswith("ui"):
            assert resp.mimetype == "application/problem+json"
    assert client.get("/healthz").status_code == 200
    assert count_jobs(store) == 0


def test_v01_401_comes_before_any_other_check(client, store):
    """V-01: without valid credentials, bad bodies/content types/CSRF signals still get 401."""
    big = b"{" + b" " * (2 * 1024 * 1024) + b"}"
    for kwargs in ({"data": "{not json", "content_type": "application/json"},
                   {"data": "type=email", "content_type": "application/x-www-form-urlencoded"},
                   {"data": "[]", "content_type": "application/json"},
                   {"json": {"type": "fax", "bogus": 1}},
                   {"data": big, "content_type": "application/json"},
                   {"json": {"type": "email"}, "headers": {"Sec-Fetch-Site": "cross-site"}},
                   {"json": {"type": "email"},
                    "headers": {"Authorization": "Bearer ql_not-a-real-token"}}):
        resp = client.post("/jobs", **kwargs)
        assert resp.status_code == 401, kwargs.get("data", kwargs.get("json"))
        assert "WWW-Authenticate" in resp.headers
    assert client.post("/jobs/1/cancel", data="x", content_type="text/plain").status_code == 401
    assert count_jobs(store) == 0


def test_v01_roles_are_enforced(client, make_key, store):
    """V-01: authenticated but the wrong role -> 403, and nothing changes."""
    worker = make_key("w", "worker")
    producer = make_key("p", "producer")
    scraper = make_key("prom", "metrics")
    problem(client.post("/jobs", json={"type": "email"}, headers=worker), 403)
    problem(client.post("/jobs", json={"type": "email"}, headers=scraper), 403)
    problem(client.get("/jobs", headers=scraper), 403)
    job = enqueue(client, producer)
    problem(client.post("/jobs/claim", headers=producer), 403)
    problem(client.post(f"/jobs/{job['id']}/retry", headers=producer), 403)
    problem(client.post(f"/jobs/{job['id']}/cancel", headers=worker), 403)
    assert count_jobs(store) == 1 and store.get(job["id"]).status.value == "pending"


def test_v01_basic_writes_need_json_content_type(client, store):
    """V-01: a state change signed with Basic must be application/json (a form cannot), else 415."""
    store.accounts.create_user("ada", quick_hash("admin-password"), "admin")
    ada = basic("ada", "admin-password")
    problem(client.post("/jobs", data="type=email", headers=ada,
                        content_type="application/x-www-form-urlencoded"), 415)
    problem(client.post("/jobs", data='{"type": "email"}', headers=ada,
                        content_type="text/plain"), 415)
    assert count_jobs(store) == 0
    job = client.post("/jobs", json={"type": "email"}, headers=ada).json
    problem(client.post(f"/jobs/{job['id']}/cancel", headers=ada), 415)  # no body, no type
    problem(client.post(f"/jobs/{job['id']}/cancel", data="", headers=ada,
                        content_type="application/x-www-form-urlencoded"), 415)
    assert store.get(job["id"]).status.value == "pending"
    assert client.post(f"/jobs/{job['id']}/cancel", json={}, headers=ada).status_code == 200
    assert client.get("/jobs", headers=ada).status_code == 200  # reads need no body


def test_v01_cross_site_writes_are_403(client, store, producer):
    """V-01: Sec-Fetch-Site: cross-site on a state change -> 403, Bearer or Basic alike."""
    store.accounts.create_user("ada", quick_hash("admin-password"), "admin")
    ada = basic("ada", "admin-password")
    for headers in (producer, ada):
        for site in ("cross-site", "Cross-Site"):
            problem(client.post("/jobs", json={"type": "email"},
                                headers={**headers, "Sec-Fetch-Site": site}), 403)
    assert count_jobs(store) == 0
    job = enqueue(client, producer)
    problem(client.post(f"/jobs/{job['id']}/cancel", json={},
                        headers={**ada, "Sec-Fetch-Site": "cross-site"}), 403)
    assert store.get(job["id"]).status.value == "pending"
    same = {**producer, "Sec-Fetch-Site": "same-origin"}
    assert client.post("/jobs", json={"type": "email"}, headers=same).status_code == 201
    reads = {**ada, "Sec-Fetch-Site": "cross-site"}
    assert client.get("/jobs", headers=reads).status_code == 200


def test_v01_empty_credentials_are_refused(client, store):
    """V-01: an empty password or user name never signs in, even if such a row exists."""
    store.accounts.create_user("vera", quick_hash(""), "admin")
    store.accounts.create_user("", quick_hash(""), "admin")
    for headers in (basic("vera", ""), basic("", ""), {"Authorization": "Basic Og=="},
                    {"Authorization": "Bearer "}, {"Authorization": "Bearer"}):
        resp = client.get("/jobs", headers=headers)
        assert resp.status_code == 401, headers
        assert "WWW-Authenticate" in resp.headers


def test_v01_scheme_names_are_case_insensitive(client, store):
    """V-01: 'bearer' and 'basic' in any case are the same schemes (RFC 9110)."""
    _, token = store.accounts.create_key("p", "producer")
    store.accounts.create_user("vera", quick_hash("viewer-password"), "viewer")
    raw = base64.b64encode(b"vera:viewer-password").decode()
    for header in (f"bearer {token}", f"BEARER {token}", f"basic {raw}", f"BASIC {raw}"):
        assert client.get("/jobs", headers={"Authorization": header}).status_code == 200, header


# -- V-02: job types ---------------------------------------------------------------------------

def test_v02_type_allowlist_and_per_key_types(client, make_key, store):
    """V-02: unknown types -> 422; a type outside the key's list -> 403 (enqueue and claim)."""
    anyone = make_key("p", "producer")
    pdf_only = make_key("p-pdf", "producer", types=["pdf"])
    pdf_worker = make_key("w-pdf", "worker", types=["pdf"])
    for body in ({"type": "fax"}, {"type": "EMAIL"}, {"type": ""}, {"type": "email "}):
        out = problem(client.post("/jobs", json=body, headers=anyone), 422, "validation-error")
        assert [e["field"] for e in out["errors"]] == ["type"]
    problem(client.post("/jobs", json={"type": "email"}, headers=pdf_only), 403)
    assert count_jobs(store) == 0
    assert client.post("/jobs", json={"type": "pdf"}, headers=pdf_only).status_code == 201
    enqueue(client, anyone)
    problem(client.post("/jobs/claim", json={"types": ["fax"]}, headers=pdf_worker), 422)
    problem(client.post("/jobs/claim", json={"types": ["email"]}, headers=pdf_worker), 403)
    first = client.post("/jobs/claim", headers=pdf_worker)
    assert first.json["type"] == "pdf"
    assert client.post("/jobs/claim", headers=pdf_worker).status_code == 204  # email stays


def test_v02_next_outside_the_keys_types_is_403_before_the_finish(client, make_key, store):
    """V-02: a complete or fail whose ``next`` names a type outside the key's list is a 403
    that finishes nothing (actions.work: "a 403 before the finish, never after it"), so
    the worker is not told "refused" for a finish that was made."""
    anyone = make_key("p", "producer")
    pdf_worker = make_key("w-pdf", "worker", types=["pdf"])
    job = enqueue(client, anyone, "pdf")
    enqueue(client, anyone, "email")
    assert client.post("/jobs/claim", headers=pdf_worker).json["id"] == job["id"]
    for verb, extra in (("complete", {"result": {"ok": True}}), ("fail", {"error": "x"})):
        problem(client.post(f"/jobs/{job['id']}/{verb}",
                            json={"attempt": 1, "next": {"types": ["email"]}, **extra},
                            headers=pdf_worker), 403, "forbidden")
        now = store.get(job["id"])
        assert (now.status.value, now.attempt, now.result, now.error) == (
            "running", 1, None, None), verb
    assert [j.status.value for j in store.list_jobs(limit=10).jobs] == ["pending", "running"]


# -- V-03: priority ceiling --------------------------------------------------------------------

def test_v03_priority_above_the_keys_max_is_403(client, make_key, store, admin):
    """V-03: a producer may not enqueue above its key's max_priority (default medium)."""
    _, token = store.accounts.create_key("default-key", "producer")  # no max_priority given
    default = {"Authorization": f"Bearer {token}"}
    low_only = make_key("low-only", "producer", max_priority="low")
    for label in ("high", "critical"):
        problem(client.post("/jobs", json={"type": "email", "priority": label},
                            headers=default), 403, "forbidden")
    problem(client.post("/jobs", json={"type": "email", "priority": "medium"},
                        headers=low_only), 403)
    assert count_jobs(store) == 0
    assert enqueue(client, default, priority="medium")["priority"] == "medium"
    assert enqueue(client, low_only, priority="low")["priority"] == "low"
    assert enqueue(client, admin, priority="critical")["priority"] == "critical"


# -- V-04: worker identity ---------------------------------------------------------------------

def test_v04_worker_id_comes_from_the_key(client, producer, worker, admin):
    """V-04: the job's worker_id is the key's name; a worker_id in a body is ignored."""
    job = enqueue(client, producer)
    claimed = client.post("/jobs/claim", json={"worker_id": "someone-else"}, headers=worker)
    assert claimed.status_code == 200 and claimed.json["worker_id"] == "mailer-1"
    beat = client.post(f"/jobs/{job['id']}/heartbeat",
                       json={"attempt": 1, "worker_id": "someone-else"}, headers=worker)
    assert beat.status_code == 200 and beat.json["worker_id"] == "mailer-1"
    done = client.post(f"/jobs/{job['id']}/complete",
                       json={"attempt": 1, "worker_id": "someone-else"}, headers=worker)
    assert done.status_code == 200 and done.json["worker_id"] == "mailer-1"
    got = client.get(f"/jobs/{job['id']}", headers=admin).json
    assert [a["worker_id"] for a in got["attempts"]] == ["mailer-1"]


def test_v04_worker_id_cannot_act_for_another_worker(client, producer, worker, make_key):
    """V-04: naming the holder in the body does not let another key act on its job."""
    job = enqueue(client, producer)
    client.post("/jobs/claim", headers=worker)
    other = make_key("mailer-2", "worker")
    problem(client.post(f"/jobs/{job['id']}/fail",
                        json={"attempt": 1, "error": "x", "worker_id": "mailer-1"},
                        headers=other), 409, "not-holder")


# -- V-05: holder and attempt fencing ----------------------------------------------------------

def take_over(client: Any, headers: dict[str, str], clock: Any) -> Any:
    """Let the lease run out, then claim the job back (after its retry backoff)."""
    clock.advance(11)
    for _ in range(5):
        resp = client.post("/jobs/claim", json={"lease_seconds": 10}, headers=headers)
        if resp.status_code == 200:
            return resp.json
        clock.advance(2)  # the first retry's backoff is at most RETRY_BACKOFF_SECONDS
    raise AssertionError("the job did not come back")


def test_v05_stale_holder_and_stale_attempt_get_409_and_change_nothing(
        client, producer, worker, make_key, admin, clock):
    """V-05: after a lease is lost, the old holder's (or old attempt's) calls get 409."""
    other = make_key("mailer-2", "worker")
    job = enqueue(client, producer)
    client.post("/jobs/claim", json={"lease_seconds": 10}, headers=worker)
    taken = take_over(client, other, clock)
    assert (taken["id"], taken["attempt"]) == (job["id"], 2)
    before = client.get(f"/jobs/{job['id']}", headers=admin).json
    for verb, extra in (("heartbeat", {}), ("complete", {"result": {"stale": True}}),
                        ("fail", {"error": "late"})):
        problem(client.post(f"/jobs/{job['id']}/{verb}", json={"attempt": 1, **extra},
                            headers=worker), 409, "not-holder")
        problem(client.post(f"/jobs/{job['id']}/{verb}", json={"attempt": 2, **extra},
                            headers=worker), 409, "not-holder")
    assert client.get(f"/jobs/{job['id']}", headers=admin).json == before
    # The same identity twice (a restarted worker): the attempt number fences the old run.
    again = take_over(client, other, clock)
    assert again["attempt"] == 3
    before = client.get(f"/jobs/{job['id']}", headers=admin).json
    for verb, extra in (("heartbeat", {}), ("complete", {"result": {"stale": True}}),
                        ("fail", {"error": "late"})):
        problem(client.post(f"/jobs/{job['id']}/{verb}", json={"attempt": 2, **extra},
                            headers=other), 409, "stale-attempt")
    assert client.get(f"/jobs/{job['id']}", headers=admin).json == before
    done = client.post(f"/jobs/{job['id']}/complete", json={"attempt": 3}, headers=other)
    assert done.status_code == 200 and done.json["status"] == "completed"


# -- V-06: atomic claim ------------------------------------------------------------------------

def test_v06_concurrent_claims_hand_out_each_job_once(store):
    """V-06: 8 threads racing on one queue: every job is claimed exactly once."""
    with store.engine.begin() as conn:
        conn.execute(jobs.insert(), [
            {"type": "email", "payload": "{}", "priority": i % 4 * 10, "status": "pending",
             "attempt": 0, "retry_count": 0, "max_retries": 3, "producer": "p",
             "run_at": store.clock(), "created_at": store.clock(),
             "updated_at": store.clock()} for i in range(100)])
    got: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    errors: list[BaseException] = []

    def run(name: str) -> None:
        start.wait()
        try:
            while True:
                job = store.claim(name, lease_seconds=300)
                if job is None:
                    return
                with lock:
                    got.append(job.id)
        except Exception as exc:  # a claim must not fail because others claim too
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f"w{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(got) == len(set(got)) == 100
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(job_attempts)).scalar_one() == 100
        assert set(conn.execute(select(jobs.c.attempt)).scalars()) == {1}


# -- V-07: size limits -------------------------------------------------------------------------

def test_v07_payload_over_max_payload_bytes_is_422(client, producer, store):
    """V-07: the payload's compact UTF-8 JSON may be MAX_PAYLOAD_BYTES (65536), not one more."""
    at_limit = {"d": "x" * (65536 - 8)}  # {"d":"..."} is 8 bytes of JSON around the text
    assert client.post("/jobs", json={"type": "email", "payload": at_limit},
                       headers=producer).status_code == 201
    over = {"d": "x" * (65536 - 8 - 1) + "\u00e9"}  # one two-byte character: 65537 bytes
    out = problem(client.post("/jobs", json={"type": "email", "payload": over},
                              headers=producer), 422)
    assert [e["field"] for e in out["errors"]] == ["payload"]
    spaced = '{"type": "email", "payload": {"d"  :  "' + "x" * (65536 - 8) + '"}}'
    assert client.post("/jobs", data=spaced, content_type="application/json",
                       headers=producer).status_code == 201  # whitespace is not counted
    assert count_jobs(store) == 2


def test_v07_body_over_max_content_length_is_413(client, producer, worker, store):
    """V-07: a body over MAX_CONTENT_LENGTH (1 MiB) -> 413 problem, nothing stored."""
    big = json.dumps({"type": "email", "payload": {"d": "x" * (1024 * 1024)}})
    problem(client.post("/jobs", data=big, content_type="application/json",
                        headers=producer), 413)
    problem(client.post("/jobs/claim", data=big, content_type="application/json",
                        headers=worker), 413)
    assert count_jobs(store) == 0


def test_v07_a_chunked_body_over_max_content_length_is_413_not_cut(client, producer, store):
    """V-07: without Content-Length (chunked), the limit holds too: 413, not a cut-off body."""
    limit = client.application.config["MAX_CONTENT_LENGTH"]
    chunked = {"Transfer-Encoding": "chunked", "Content-Type": "application/json", **producer}

    def post(body: bytes) -> Any:
        # What a WSGI server that decodes chunked bodies hands the app (gunicorn, werkzeug).
        return client.post("/jobs", input_stream=io.BytesIO(body), headers=chunked,
                           environ_overrides={"wsgi.input_terminated": True})

    head = b'{"type": "email", "payload": {"k": 1}}'
    problem(post(head + b" " * limit), 413)   # the first MAX_CONTENT_LENGTH bytes parse
    problem(post(b'{"type": "email", "payload": {"a": "' + b"x" * limit + b'"}}'), 413)
    assert count_jobs(store) == 0
    exactly = post(head + b" " * (limit - len(head)))  # at the limit, not over it
    assert exactly.status_code == 201, exactly.json
    assert post(head).status_code == 201


# -- V-08: SQL injection -----------------------------------------------------------------------

def test_v08_sql_looking_input_is_data(client, producer, admin, store):
    """V-08: quotes and SQL in filters, payloads and keys are stored and matched verbatim."""
    evil = "x'); DROP TABLE jobs; --"
    job = enqueue(client, producer, payload={"to": evil, "n": "1 OR 1=1"},
                  idempotency_key="k' OR '1'='1")
    enqueue(client, producer)
    resp = client.get("/jobs", query_string={"type": INJECTION}, headers=admin)
    assert resp.status_code == 200 and resp.json["jobs"] == []
    resp = client.get("/jobs", query_string={"type": "email' --"}, headers=admin)
    assert resp.json["jobs"] == []
    got = client.get(f"/jobs/{job['id']}", headers=producer).json
    assert got["payload"] == {"to": evil, "n": "1 OR 1=1"}
    assert got["idempotency_key"] == "k' OR '1'='1"
    replay = client.post("/jobs", json={"type": "email", "payload": {"to": evil, "n": "1 OR 1=1"},
                                        "idempotency_key": "k' OR '1'='1"}, headers=producer)
    assert replay.status_code == 200 and replay.json["id"] == job["id"]
    other = client.post("/jobs", json={"type": "email", "idempotency_key": "' OR ''='"},
                        headers=producer)
    assert other.status_code == 201
    store.accounts.create_key("n'; DELETE FROM api_keys; --", "worker")
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(api_keys)).scalar_one() == 3
    assert count_jobs(store) == 3


# Interpolations of trusted, non-request values only: Enum members' ``.value`` (statuses
# written as literals so SQLite can match partial indexes) and the checked PRAGMA word.
# Names whose values the store computes itself: a checked setting, whole numbers (PRAGMAs).
_TRUSTED = {"synchronous", "busy_ms", "WAL_SIZE_LIMIT", "FINISH_WAIT_MS"}
# Reviewed one by one: formats that splice only static SQL fragments chosen in the code.
# The SQLite claim text: ``index``, ``typed`` and ``policy`` are SQL of the store's own, never
# a value, and so is the per-type walk it is wrapped in.
# The many-row INSERTs: table and column names and types from tables.py, each value a
# bound parameter (one JSON text on PostgreSQL, one placeholder each on SQLite).
# The complete statements: only their RETURNING column lists, written in the code.
_REVIEWED = {("sqlite.py", "text(sql.EACH_TYPE.format(walk=walk) if kind == 'many' else walk)"),
             ("sqlite.py", "text(sql.INSERT_ROWS.format(table=table.name, "
                           "columns=', '.join(columns), "
                           "returning=f' RETURNING {picks}' if picks else ''))"),
             ("postgres.py", "text(sql.INSERT_ROWS.format(table=table.name, "
                             "columns=', '.join(columns), picks=picks, "
                             "returning=' RETURNING ' + ', '.join(back) if back else ''))"),
             ("sqlite.py", "text(sql.COMPLETE.format(returning='*'))"),
             ("sqlite.py", "text(sql.COMPLETE.format(returning=DONE_COLUMNS))"),
             ("postgres.py", "text(sql.COMPLETE.format(returning='done.*' if full else "
                             "DONE_COLUMNS, guard=sql.PLAIN if plain else ''))"),
             ("sqlite.py", "text(sql.END.format(own=sql.OWN if own else ''))"),
             ("postgres.py", "text(sql.END.format(own=sql.OWN if own else ''))")}


def _trusted(arg: ast.expr) -> bool:
    if not isinstance(arg, ast.JoinedStr):
        return False
    for part in arg.values:
        if isinstance(part, ast.FormattedValue):
            expr = part.value
            if not ((isinstance(expr, ast.Attribute) and expr.attr == "value")
                    or (isinstance(expr, ast.Name) and expr.id in _TRUSTED)):
                return False
    return True


def test_v08_the_store_never_builds_sql_text_from_values():
    """V-08: no f-string, %-format or .format() of a value reaches text()/execute() & co."""
    sinks = {"text", "literal_column", "execute", "exec_driver_sql", "literal", "column"}
    found = []
    files = sorted(STORE_DIR.rglob("*.py"))
    assert {"jobs.py", "finish.py", "sqlite.py", "postgres.py", "accounts.py", "engine.py"} <= {
        p.name for p in files}
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            arg = node.args[0]
            dynamic = isinstance(arg, ast.JoinedStr) or (
                isinstance(arg, ast.BinOp) and isinstance(arg.op, (ast.Mod, ast.Add))) or (
                isinstance(arg, ast.Call) and getattr(arg.func, "attr", "") == "format")
            if (name in sinks and dynamic and not _trusted(arg)
                    and (path.name, ast.unparse(node)) not in _REVIEWED):
                found.append((path.name, node.lineno, ast.unparse(node)))
    assert found == []


# -- V-09: idempotency -------------------------------------------------------------------------

def test_v09_keys_are_scoped_per_producer(client, producer, make_key):
    """V-09: two producers using the same key get two jobs and never see each other's."""
    shop = make_key("shop", "producer")
    mine = client.post("/jobs", json={"type": "email", "idempotency_key": "k-1"},
                       headers=producer)
    theirs = client.post("/jobs", json={"type": "email", "payload": {"x": 1},
                                        "idempotency_key": "k-1"}, headers=shop)
    assert mine.status_code == theirs.status_code == 201
    assert mine.json["id"] != theirs.json["id"] and theirs.json["producer"] == "shop"
    problem(client.get(f"/jobs/{mine.json['id']}", headers=shop), 404)


def test_v09_batch_keys_are_scoped_per_producer(client, producer, make_key, store):
    """V-09 on POST /jobs/batch: another producer's key is no replay and no mismatch.

    The batch looks its items' keys up in one read of its own (not the single route's), so
    it is pinned here too: the same request under another producer's key is a new job of
    its own (not the first producer's job handed back), a different one no 422 (which
    would tell that the key is taken)."""
    shop = make_key("shop", "producer")
    same = {"type": "email", "payload": {"n": 1}, "idempotency_key": "k-1"}
    other = {"type": "pdf", "payload": {"n": 2}, "idempotency_key": "k-2"}
    mine = client.post("/jobs/batch", json={"jobs": [same, other]}, headers=producer)
    assert mine.status_code == 201 and mine.json["replayed"] == []
    theirs = client.post("/jobs/batch", json={"jobs": [same, {**other, "type": "sync"}]},
                         headers=shop)
    assert theirs.status_code == 201, theirs.get_data(as_text=True)
    assert theirs.json["replayed"] == []
    assert [j["producer"] for j in theirs.json["jobs"]] == ["shop", "shop"]
    assert {j["id"] for j in theirs.json["jobs"]}.isdisjoint(j["id"] for j in mine.json["jobs"])
    # A key set through the single route is the producer's own for a batch too.
    single = client.post("/jobs", json={"type": "email", "idempotency_key": "k-3"},
                         headers=producer)
    batched = client.post("/jobs/batch", json={"jobs": [{"type": "email",
                                                         "idempotency_key": "k-3"}]},
                          headers=shop)
    assert batched.status_code == 201 and batched.json["replayed"] == []
    assert batched.json["jobs"][0]["id"] != single.json["id"]
    assert count_jobs(store) == 6
    # Each producer's replay still finds its own job.
    again = client.post("/jobs/batch", json={"jobs": [same]}, headers=shop)
    assert again.status_code == 200 and again.json["replayed"] == [0]
    assert again.json["jobs"][0]["id"] == theirs.json["jobs"][0]["id"]


def test_v09_replay_and_mismatch(client, producer, store):
    """V-09: same key + same request -> 200 replay; same key + other request -> 422."""
    body = {"type": "email", "payload": {"n": 1}, "priority": "medium",
            "idempotency_key": "k-1"}
    first = client.post("/jobs", json=body, headers=producer)
    assert first.status_code == 201
    again = client.post("/jobs", json=body, headers=producer)
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json["id"] == first.json["id"]
    for change in ({"payload": {"n": 2}}, {"type": "pdf"}, {"priority": "low"},
                   {"max_retries": 5}, {"delay_seconds": 60}):
        problem(client.post("/jobs", json={**body, **change}, headers=producer), 422,
                "idempotency-key-mismatch")
    assert count_jobs(store) == 1


def test_v09_header_key_quoted_or_bare_and_disagreeing_body(client, producer, store):
    """V-09: Idempotency-Key "k" and k are one key; a body key that differs -> 422."""
    body = {"type": "email"}
    first = client.post("/jobs", json=body, headers={**producer, "Idempotency-Key": '"k-2"'})
    bare = client.post("/jobs", json=body, headers={**producer, "Idempotency-Key": "k-2"})
    in_body = client.post("/jobs", json={**body, "idempotency_key": "k-2"}, headers=producer)
    both = client.post("/jobs", json={**body, "idempotency_key": "k-2"},
                       headers={**producer, "Idempotency-Key": '"k-2"'})
    assert first.status_code == 201
    assert bare.status_code == in_body.status_code == both.status_code == 200
    assert {r.json["id"] for r in (first, bare, in_body, both)} == {first.json["id"]}
    problem(client.post("/jobs", json={**body, "idempotency_key": "k-3"},
                        headers={**producer, "Idempotency-Key": "k-4"}), 422)
    assert count_jobs(store) == 1


def test_v09_racing_duplicates_make_exactly_one_job(app, producer, store):
    """V-09: eight identical requests at once -> one job, one 201 and seven 200s."""
    start = threading.Barrier(8)
    codes: list[int] = []
    ids: list[int] = []
    lock = threading.Lock()

    def post() -> None:
        client = app.test_client()
        start.wait()
        resp = client.post("/jobs", json={"type": "email", "idempotency_key": "race"},
                           headers=producer)
        with lock:
            codes.append(resp.status_code)
            ids.append(resp.json["id"])

    threads = [threading.Thread(target=post) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [200] * 7 + [201]
    assert len(set(ids)) == 1 and count_jobs(store) == 1


def test_v09_an_insert_that_loses_the_race_returns_the_winner(store, db_url):
    """V-09: another request commits the same key between our check and our insert.

    Deterministic version of the race above: on PostgreSQL the unique (producer, key)
    makes our insert fail and the store answers with the winner's job; on SQLite the
    check runs under the write lock, so the other writer cannot even get in.
    """
    new = NewJob(producer="p", type="email", payload_json="{}", priority=0, max_retries=3,
                 idempotency_key="k", request_hash="h")
    now = store.clock()
    winner = {"type": "email", "payload": "{}", "priority": 0, "status": "pending",
              "attempt": 0, "retry_count": 0, "max_retries": 3, "producer": "p",
              "idempotency_key": "k", "request_hash": "h", "run_at": now,
              "created_at": now, "updated_at": now}
    seen: list[str] = []

    def sneak_in(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if seen or "idempotency_key" not in statement or not statement.lstrip().startswith(
                "SELECT"):
            return
        if store.engine.dialect.name == "sqlite":
            other = sqlite3.connect(db_url.removeprefix("sqlite:///"), timeout=0)
            try:
                other.execute("INSERT INTO jobs (type, payload, priority, status, attempt, "
                              "retry_count, max_retries, producer, idempotency_key, "
                              "request_hash, run_at, created_at, updated_at) VALUES "
                              "('email', '{}', 0, 'pending', 0, 0, 3, 'p', 'k', 'h', ?, ?, ?)",
                              (now, now, now))
                other.commit()
                seen.append("inserted")
            except sqlite3.OperationalError:
                seen.append("locked")
            finally:
                other.close()
        else:
            with store.engine.begin() as other:
                other.execute(jobs.insert(), winner)
            seen.append("inserted")

    event.listen(store.engine, "after_cursor_execute", sneak_in)
    try:
        job, created = store.enqueue(new)
    finally:
        event.remove(store.engine, "after_cursor_execute", sneak_in)
    assert count_jobs(store) == 1
    if store.engine.dialect.name == "sqlite":
        assert seen == ["locked"] and created
    else:
        assert seen == ["inserted"] and not created and job.idempotency_key == "k"


# -- V-10: error text --------------------------------------------------------------------------

SECRET_ERROR = ("connect to postgres://app:hunter2@db.internal:5432/x failed; "
                "password=hunter2 token=abc123 secret: s3cr3t api_key=AKIA1234 "
                "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig\n"
                "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----")


def test_v10_error_is_sanitized_before_it_is_stored(client, producer, worker, store):
    """V-10: credentials in a worker's error never reach the database."""
    job = enqueue(client, producer)
    client.post("/jobs/claim", headers=worker)
    client.post(f"/jobs/{job['id']}/fail", json={"attempt": 1, "error": SECRET_ERROR},
                headers=worker)
    with store.engine.connect() as conn:
        stored = conn.execute(select(jobs.c.error)).scalar_one()
        history = conn.execute(select(job_attempts.c.error)).scalar_one()
    for text in (stored, history):
        assert "[REDACTED]" in text and "failed" in text
        for secret in ("hunter2", "abc123", "s3cr3t", "AKIA1234", "eyJhbGciOiJIUzI1NiJ9",
                       "MIIEow"):
            assert secret not in text, (secret, text)


def test_v10_error_is_cut_to_max_error_bytes(client, producer, worker, store):
    """V-10: a long error is stored cut to MAX_ERROR_BYTES (8192) bytes of UTF-8."""
    job = enqueue(client, producer)
    client.post("/jobs/claim", headers=worker)
    resp = client.post(f"/jobs/{job['id']}/fail",
                       json={"attempt": 1, "error": "\u00e9" * 10_000}, headers=worker)
    assert resp.status_code == 200
    stored = store.get(job["id"]).error
    assert len(stored.encode("utf-8")) == 8192 and set(stored) == {"\u00e9"}


def test_v10_error_text_is_shown_to_admins_only(client, producer, worker, admin, store):
    """V-10: the error field is absent for non-admins on GET /jobs, /jobs/{id} and attempts."""
    store.accounts.create_user("vera", quick_hash("viewer-password"), "viewer")
    viewer = basic("vera", "viewer-password")
    job = enqueue(client, producer)
    client.post("/jobs/claim", headers=worker)
    client.post(f"/jobs/{job['id']}/fail", json={"attempt": 1, "error": "disk full"},
                headers=worker)
    for headers in (producer, worker, viewer):
        listed = client.get("/jobs", headers=headers)
        got = client.get(f"/jobs/{job['id']}", headers=headers)
        assert "disk full" not in listed.get_data(as_text=True) + got.get_data(as_text=True)
        assert "error" not in listed.json["jobs"][0] and "error" not in got.json
        assert all("error" not in a for a in got.json["attempts"])
    got = client.get(f"/jobs/{job['id']}", headers=admin).json
    assert got["error"] == "disk full" and got["attempts"][0]["error"] == "disk full"
    assert client.get("/jobs", headers=admin).json["jobs"][0]["error"] == "disk full"


def test_v01_unknown_paths_methods_and_options_need_credentials_first(client, admin, worker,
                                                                      make_user):
    """V-01: 404, 405 and OPTIONS's Allow list come only after valid credentials."""
    wrong = {"Authorization": worker["Authorization"] + "x"}
    for method, path in (("DELETE", "/jobs"), ("GET", "/nowhere"), ("PUT", "/jobs/1/complete"),
                         ("GET", "/ui"), ("POST", "/openapi.json"), ("OPTIONS", "/jobs"),
                         ("OPTIONS", "/ui/"), ("OPTIONS", "/nowhere")):
        for headers in ({}, wrong, {"Authorization": "Basic Og=="}):  # none, bad, empty
            resp = client.open(path, method=method, headers=headers)
            assert resp.status_code == 401, (method, path, headers)
            assert resp.mimetype == "application/problem+json" and "Allow" not in resp.headers
            assert "WWW-Authenticate" in resp.headers
    assert client.open("/jobs", method="DELETE", headers=admin).status_code == 405
    assert client.get("/nowhere", headers=admin).status_code == 404
    viewer = make_user("vera", "viewer")
    for headers in (admin, worker, viewer):  # Bearer and Basic
        assert "POST" in client.options("/jobs", headers=headers).headers["Allow"]
    wrong_password = {"Authorization": viewer["Authorization"][:-2] + "AA"}
    assert client.options("/jobs", headers=wrong_password).status_code == 401
    assert client.options("/healthz").status_code == 200
    assert client.post("/healthz").status_code == 405  # public, like GET /healthz
    assert client.get("/static/nothing.css").status_code == 404  # static files need none


def test_v01_a_job_id_of_any_length_or_script_is_401_then_404(client, admin, make_user):
    """Job ids in paths are 1 to 19 ASCII digits; anything else is 401, then 404, never 500."""
    viewer = make_user("vera", "admin")
    huge = "9" * 4301  # past int()'s 4,300-digit limit
    ids = (huge, str(2**63), "３１４", "٣١٤", "1e3", "-1")
    routes = [("GET", "/jobs/{}"), ("POST", "/jobs/{}/cancel"), ("POST", "/jobs/{}/retry"),
              ("POST", "/jobs/{}/heartbeat"), ("POST", "/jobs/{}/complete"),
              ("POST", "/jobs/{}/fail"), ("GET", "/ui/jobs/{}"), ("POST", "/ui/jobs/{}/retry"),
              ("POST", "/ui/jobs/{}/cancel")]
    for method, route in routes:
        for job_id in ids:
            path = route.format(job_id)
            assert client.open(path, method=method).status_code == 401, (method, path[:40])
            headers = viewer if "/ui/" in route else admin
            got = client.open(path, method=method, headers=headers)
            assert got.status_code == 404, (method, path[:40], got.status_code)
        # The largest id there can be is a well-formed id: no such job, unless the call is
        # refused first: a form post without its CSRF token (400), a worker call by an admin,
        # who does not claim (403).
        largest = client.open(route.format(2**63 - 1), method=method,
                              headers=viewer if "/ui/" in route else admin)
        expected = (400 if route.startswith("/ui/jobs/{}/")
                    else 403 if route.endswith(("heartbeat", "complete", "fail")) else 404)
        assert largest.status_code == expected, (method, route)
