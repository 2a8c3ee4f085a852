"""queuelog.client: against the app in process (httpx's WSGI transport), on both backends."""
from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Iterator

import httpx
import pytest
from helpers import SQLITE_ONLY
from server_process import ROOT, free_port

from queuelog import client as client_module
from queuelog.client import KEEPALIVE_EXPIRY, Client, JobWaitTimeout, ProblemError, Unreachable


def token_of(headers: dict[str, str]) -> str:
    """The bearer token in an Authorization header."""
    return headers["Authorization"].split()[1]


@pytest.fixture
def real_time(clock: Any) -> Any:
    """The fake clock set to now: the client compares leases with the wall clock."""
    clock.now = int(time.time() * 1_000_000)
    return clock


@pytest.fixture
def connect(app: Any, real_time: Any,
            request: pytest.FixtureRequest) -> Iterator[Callable[..., Client]]:
    """A Client for a key header, talking to the test app through ``transport``; its
    retries a few milliseconds apart in a test that asks for ``quick_retries``."""
    made: list[Client] = []
    first = 0.005 if "quick_retries" in request.fixturenames else client_module.RETRY_FIRST_SECONDS

    def make(headers: dict[str, str], transport: httpx.BaseTransport | None = None) -> Client:
        c = Client("http://queue.test", token_of(headers),
                   transport=transport or httpx.WSGITransport(app=app), retry_first=first)
        made.append(c)
        return c
    yield make
    for c in made:
        c.close()


@pytest.fixture
def quick_retries() -> None:
    """Answer retries a few milliseconds apart (``connect`` reads that it is asked for)."""


def test_importing_the_client_imports_no_flask_or_sqlalchemy():
    code = ("import sys, queuelog.client; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('flask', 'sqlalchemy', 'werkzeug', 'psycopg')); print(bad)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_a_job_round_trip(connect, producer, worker, admin):
    p, w = connect(producer), connect(worker)
    job = p.enqueue("email", {"to": "ada@example.com"}, priority="medium", max_retries=5)
    assert job["status"] == "pending" and job["payload"] == {"to": "ada@example.com"}
    assert job["max_retries"] == 5 and job["priority"] == "medium"
    claimed = w.claim(["email"], lease_seconds=60)
    assert claimed["id"] == job["id"] and claimed["attempt"] == 1
    beat = w.heartbeat(claimed)
    assert beat["lease_expires_at"] >= claimed["lease_expires_at"]
    done = w.complete(beat, {"sent": True})
    assert done["status"] == "completed" and done["result"] == {"sent": True}
    assert w.claim() is None
    seen = connect(admin).get(job["id"])
    assert [a["outcome"] for a in seen["attempts"]] == ["completed"]


def test_fail_retries_or_fails_for_good(connect, producer, worker, admin):
    p, w = connect(producer), connect(worker)
    first = p.enqueue("pdf")
    again = w.fail(w.claim(), "printer on fire", retry_in=0)
    assert again["status"] == "pending" and again["retry_count"] == 1
    final = w.fail(w.claim(), "still on fire", retry=False)
    assert final["status"] == "failed" and final["id"] == first["id"]
    assert connect(admin).get(first["id"])["error"] == "still on fire"


def test_idempotent_enqueue_replays(connect, producer):
    p = connect(producer)
    one = p.enqueue("email", {"n": 1}, idempotency_key="k-1")
    assert p.enqueue("email", {"n": 1}, idempotency_key="k-1")["id"] == one["id"]
    with pytest.raises(ProblemError) as info:
        p.enqueue("email", {"n": 2}, idempotency_key="k-1")
    assert info.value.status == 422 and info.value.type.endswith("idempotency-key-mismatch")


def test_list_walks_every_page(connect, producer, admin):
    p = connect(producer)
    ids = [p.enqueue("sync", {"n": n})["id"] for n in range(7)]
    p.enqueue("email")
    listed = [j["id"] for j in connect(admin).list(type="sync", limit=3)]
    assert listed == sorted(ids, reverse=True)  # newest first, across three pages
    assert len(list(p.list(limit=200))) == 8


def test_errors_are_problem_errors(connect, producer, worker):
    p = connect(producer)
    with pytest.raises(ProblemError) as refused:
        p.enqueue("email", priority="critical")
    assert refused.value.status == 403 and refused.value.type.endswith("forbidden")
    assert "critical" in refused.value.detail
    with pytest.raises(ProblemError) as invalid:
        p.enqueue("fax", {"a": 1})
    assert invalid.value.status == 422
    assert [e["field"] for e in invalid.value.errors] == ["type"]
    job = p.enqueue("email")
    w = connect(worker)
    claimed = w.claim()
    w.complete(claimed)
    with pytest.raises(ProblemError) as again:  # a plain 409: nothing was retried
        w.complete(claimed)
    assert again.value.status == 409 and again.value.type.endswith("wrong-state")
    with pytest.raises(ProblemError) as missing:
        w.get(job["id"] + 100)
    assert missing.value.status == 404
    with pytest.raises(ProblemError) as bad_token:
        connect({"Authorization": "Bearer ql_nope"}).claim()
    assert bad_token.value.status == 401


def test_an_answer_is_retried_and_a_lost_one_is_found_in_the_history(
        app, connect, producer, worker, quick_retries):
    """A complete committed but answered 503: the retry gets 409, and the history says done."""
    inner = httpx.WSGITransport(app=app)
    calls: list[str] = []
    dropped: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        resp = inner.handle_request(request)
        calls.append(f"{request.method} {request.url.path} {resp.status_code}")
        if request.url.path.endswith(("/complete", "/fail")) and resp.status_code == 200 \
                and not dropped:
            dropped.append(request.url.path)
            resp.read()  # committed, but the answer never reaches the worker
            return httpx.Response(503, json={"type": "urn:x:unavailable", "status": 503,
                                             "detail": "database unavailable"})
        return resp

    w = connect(worker, httpx.MockTransport(handler))
    connect(producer).enqueue("email")
    claimed = w.claim()
    done = w.complete(claimed, {"ok": 1})
    assert done["status"] == "completed" and done["result"] == {"ok": 1}
    # claim, complete (committed, answered 503), complete again (409), the history
    assert [c.split()[-1] for c in calls] == ["200", "200", "409", "200"]
    assert calls[-1].startswith(f"GET /jobs/{claimed['id']}")

    calls.clear()
    dropped.clear()
    connect(producer).enqueue("email")
    failed = w.fail(w.claim(), "boom", retry_in=0)
    assert failed["status"] == "pending" and failed["attempts"][-1]["outcome"] == "failed"
    assert [c.split()[-1] for c in calls] == ["200", "200", "409", "200"] and dropped


def test_a_409_whose_attempt_was_not_recorded_is_raised(app, connect, producer, worker, clock,
                                                        make_key, quick_retries):
    """The lost complete never landed; the lease ran out and someone else has the job."""
    inner = httpx.WSGITransport(app=app)
    dropped: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/complete") and not dropped:
            dropped.append(1)
            clock.advance(120)   # meanwhile the lease runs out, the job is taken back ...
            assert other.claim() is None
            clock.advance(10)    # ... and, after its backoff, claimed by another worker
            assert other.claim()["attempt"] == 2
            return httpx.Response(503, json={"type": "urn:x:unavailable", "status": 503,
                                             "detail": "database unavailable"})
        return inner.handle_request(request)

    other = connect(make_key("mailer-2", "worker"))
    w = connect(worker, httpx.MockTransport(handler))
    connect(producer).enqueue("email")
    claimed = w.claim(lease_seconds=60)
    claimed["lease_expires_at"] = _in_seconds(5)  # the client's retry budget: real time
    with pytest.raises(ProblemError) as info:
        w.complete(claimed)
    assert info.value.status == 409 and info.value.type.endswith("not-holder")
    assert dropped == [1]


def _in_seconds(seconds: float) -> str:
    from datetime import datetime, timedelta, timezone
    moment = datetime.now(timezone.utc) + timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_answers_are_retried_until_the_lease_a_heartbeat_extended_runs_out(
        app, connect, producer, worker, quick_retries):
    """The client's guide heartbeats with the job it claimed and then completes that same
    dict (``worker.heartbeat(job)``; ``worker.complete(job, ...)``). The lease is the one
    the last heartbeat got, not the claim's: a 503 to the complete after the claim's lease
    end (but within the extended lease) is retried, not raised."""
    inner = httpx.WSGITransport(app=app)
    refused: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(("/complete", "/fail")) \
                and request.url.path not in refused:
            refused.append(request.url.path)  # the first try: not applied, the database was away
            return httpx.Response(503, json={"type": "urn:x:unavailable", "status": 503,
                                             "detail": "database unavailable"})
        return inner.handle_request(request)

    w = connect(worker, httpx.MockTransport(handler))
    connect(producer).enqueue("email")
    connect(producer).enqueue("email")
    first, second = w.claim(lease_seconds=1), w.claim(lease_seconds=1)
    w.heartbeat(first, lease_seconds=120)   # the guide's way: the answer is not kept
    w.heartbeat(second, lease_seconds=120)
    time.sleep(1.2)  # the claims' leases are over on this host's clock; the heartbeats' not
    assert w.complete(first, {"ok": 1})["status"] == "completed"
    assert w.fail(second, "boom", retry=False)["status"] == "failed"
    assert len(refused) == 2


def test_retries_stop_when_the_lease_would_have_run_out(connect, worker, quick_retries):
    attempts: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        attempts.append(time.monotonic())
        raise httpx.ConnectError("connection refused")

    w = connect(worker, httpx.MockTransport(handler))
    job = {"id": 1, "attempt": 1, "lease_expires_at": _in_seconds(0.5)}
    began = time.monotonic()
    with pytest.raises(Unreachable):
        w.complete(job)
    assert 0.4 < time.monotonic() - began < 3 and len(attempts) > 2
    attempts.clear()
    with pytest.raises(Unreachable):
        w.claim()  # a claim is not repeated: a lost answer would hold a job
    assert len(attempts) == 1


def test_the_first_retry_waits_half_to_all_of_retry_first(worker, real_time):
    """``Client(retry_first=)`` sets the first pause: 0.6 s waits at least 0.3 s, past the
    default's 0.25 s at most (a lower bound: a busy machine cannot make it pass)."""
    attempts: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        attempts.append(time.monotonic())
        if len(attempts) == 1:
            raise httpx.ConnectError("connection refused")
        return httpx.Response(200, json={"id": 1, "attempt": 1, "status": "completed"})

    with Client("http://queue.test", token_of(worker), retry_first=0.6,
                transport=httpx.MockTransport(handler)) as c:
        c.complete({"id": 1, "attempt": 1, "lease_expires_at": _in_seconds(30)})
    assert len(attempts) == 2 and attempts[1] - attempts[0] >= 0.3


def test_a_non_problem_error_page_is_a_problem_error(connect, worker):
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, html="<html><body><h1>502 Bad Gateway</h1></body></html>")

    with pytest.raises(ProblemError) as info:
        connect(worker, httpx.MockTransport(handler)).claim()
    assert info.value.status == 502 and info.value.type == "about:blank"
    assert "Bad Gateway" in info.value.detail


class _Counting(http.server.ThreadingHTTPServer):
    daemon_threads = True
    connections = 0

    def get_request(self) -> Any:
        type(self).connections += 1
        return super().get_request()


class _NoJobs(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if b"slow" in body:
            time.sleep(3)
        self.send_response(204)
        self.end_headers()


def test_one_connection_is_kept_open_and_timeouts_hold():
    _Counting.connections = 0
    server = _Counting(("127.0.0.1", 0), _NoJobs)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        c = Client(f"http://127.0.0.1:{server.server_address[1]}", "ql_x",
                   timeout=httpx.Timeout(1.0))
        for _ in range(5):
            assert c.claim() is None
        assert _Counting.connections == 1
        began = time.monotonic()
        with pytest.raises(Unreachable):
            c.claim(["slow"])
        assert time.monotonic() - began < 2.5
        c.close()
    finally:
        server.shutdown()
        server.server_close()


def test_a_connection_idle_past_the_expiry_is_not_used_again():
    """gunicorn closes a keep-alive connection idle for 2 s; a request sent on one as it
    closes is lost. The client opens a new one after 1.5 s idle (httpx alone: 5 s)."""
    _Counting.connections = 0
    server = _Counting(("127.0.0.1", 0), _NoJobs)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        c = Client(f"http://127.0.0.1:{server.server_address[1]}", "ql_x")
        c.claim()
        time.sleep(0.2)
        c.claim()
        assert _Counting.connections == 1  # kept while busy
        time.sleep(KEEPALIVE_EXPIRY + 0.2)
        c.claim()
        assert _Counting.connections == 2
        c.close()
    finally:
        server.shutdown()
        server.server_close()


def test_an_unreachable_server_is_unreachable():
    with Client(f"http://127.0.0.1:{free_port()}", "ql_x") as c, pytest.raises(Unreachable):
        c.claim()


def test_batches_enqueue_claim_complete_and_fail(connect, producer, worker):
    p, w = connect(producer), connect(worker)
    jobs = p.enqueue_many([{"type": "email", "payload": {"n": n}} for n in range(5)])
    assert [j["payload"]["n"] for j in jobs] == list(range(5))
    assert [j["id"] for j in jobs] == sorted(j["id"] for j in jobs)
    got = w.claim(["email"], max_jobs=3)
    assert isinstance(got, list) and [j["id"] for j in got] == [j["id"] for j in jobs[:3]]
    rest = w.claim(max_jobs=10)
    assert [j["id"] for j in rest] == [j["id"] for j in jobs[3:]]
    assert w.claim(max_jobs=2) == []
    done = w.complete_many([{"id": j["id"], "attempt": j["attempt"], "result": {"ok": 1}}
                            for j in got])
    assert [(r["id"], r["status"], r["job_status"]) for r in done] == [
        (j["id"], 200, "completed") for j in got]
    failed = w.fail_many([{"id": j["id"], "attempt": j["attempt"], "error": "x"} for j in rest]
                         + [{"id": got[0]["id"], "attempt": 1, "error": "late"}])
    assert [r["status"] for r in failed] == [200, 200, 409]
    assert failed[-1]["type"].endswith("wrong-state")


def test_a_workflow_through_the_client(connect, producer, worker):
    """``enqueue`` and ``enqueue_many`` items take ``depends_on`` (a batch's also
    ``{"item": N}``) and ``on_parent_failure``; a claimed job carries its ``parents``."""
    p, w = connect(producer), connect(worker)
    ok, bad, fan_in = p.enqueue_many([
        {"type": "email", "payload": {"size": 1}}, {"type": "email", "payload": {"size": 2}},
        {"type": "pdf", "depends_on": [{"item": 0}, {"item": 1}], "on_parent_failure": "run"}])
    after_bad = p.enqueue("pdf", {}, depends_on=[bad["id"]], on_parent_failure="run")
    assert fan_in["depends_on"] == [ok["id"], bad["id"]]
    assert fan_in["status"] == after_bad["status"] == "blocked"
    w.complete(w.claim(["email"]), {"url": "1.png"})
    w.fail(w.claim(["email"]), "no space", retry=False)
    claimed = {j["id"]: j for j in w.claim(["pdf"], max_jobs=3)}  # both run: "run" was sent
    assert sorted(claimed) == [fan_in["id"], after_bad["id"]]
    assert claimed[fan_in["id"]]["parents"] == [
        {"id": ok["id"], "type": "email", "status": "completed", "result": {"url": "1.png"}},
        {"id": bad["id"], "type": "email", "status": "failed", "result": None}]


# -- one method per API call: repair, operating, service -------------------------------------

def test_cancel_and_retry_one_job(connect, producer, admin):
    p, a = connect(producer), connect(admin)
    job = p.enqueue("email")
    cancelled = p.cancel(job)
    assert cancelled["status"] == "cancelled" and cancelled["id"] == job["id"]
    with pytest.raises(ProblemError) as again:
        p.cancel(job["id"])
    assert again.value.status == 409
    retried = a.retry(job["id"])
    assert retried["status"] == "pending" and retried["retry_count"] == 0
    with pytest.raises(ProblemError) as refused:  # retry is an admin's
        p.retry(job)
    assert refused.value.status == 403


def test_run_a_delayed_job_now(connect, producer, worker, admin):
    p, a, w = connect(producer), connect(admin), connect(worker)
    job = p.enqueue("email", delay_seconds=3600)
    assert w.claim() is None
    due = a.run(job["id"])
    assert due["status"] == "pending" and due["run_at"] < job["run_at"]
    assert w.claim()["id"] == job["id"]
    with pytest.raises(ProblemError) as running:
        a.run(job)
    assert running.value.status == 409
    with pytest.raises(ProblemError) as refused:  # run now is an admin's
        p.run(job)
    assert refused.value.status == 403


def test_cancel_many_and_retry_many_by_ids_and_by_filter(connect, producer, admin):
    p, a = connect(producer), connect(admin)
    mails = [p.enqueue("email")["id"] for _ in range(3)]
    pdf = p.enqueue("pdf")["id"]
    assert p.cancel_many(mails[:2]) == 2
    assert a.cancel_many(filter={"type": "email"}) == 1      # the third mail, not the pdf
    assert a.get(pdf)["status"] == "pending"
    assert a.retry_many(filter={"status": "cancelled", "type": "email"}) == 3
    assert a.cancel_many(filter={}) == 4                       # {}: every pending job
    assert a.retry_many([pdf]) == 1
    with pytest.raises(TypeError):
        a.cancel_many()                                        # neither: not "all" by mistake
    with pytest.raises(TypeError):
        a.retry_many([pdf], filter={})


def test_types_pause_and_resume(connect, producer, worker, admin):
    a, w = connect(admin), connect(worker)
    assert [t["name"] for t in a.types()] == ["email", "pdf", "sync"]
    connect(producer).enqueue("email")
    paused = a.pause("email")
    assert paused["name"] == "email" and paused["paused"] is True
    assert w.claim() is None                                   # a paused type is not claimed
    assert a.resume("email")["paused"] is False
    assert w.claim()["type"] == "email"
    assert {t["name"]: t["counts"]["running"] for t in a.types()}["email"] == 1
    with pytest.raises(ProblemError) as missing:
        a.pause("fax/../pdf")                                  # one path segment, quoted
    assert missing.value.status == 404


def test_audit_walks_every_page_with_filters(connect, producer, admin):
    a = connect(admin)
    for name in ("email", "pdf", "sync"):
        a.pause(name)
        a.resume(name)
    events = list(a.audit(limit=2))
    assert [e["action"] for e in events] == ["type.resume", "type.pause"] * 3  # newest first
    assert [e["target"] for e in a.audit(action="type.pause")] == ["sync", "pdf", "email"]
    assert list(a.audit(actor="nobody")) == []
    with pytest.raises(ProblemError) as refused:
        list(connect(producer).audit())
    assert refused.value.status == 403


def test_healthz_metrics_and_the_document(connect, admin, make_key):
    a = connect(admin)
    assert a.healthz() == {"status": "ok"}
    assert "queuelog_jobs{" in connect(make_key("prom", "metrics")).metrics()
    assert a.openapi()["openapi"].startswith("3.1")


def test_every_public_method_has_a_one_line_docstring():
    # dir, not vars: the repair and operating calls are inherited (client/operating.py)
    public = [name for name in dir(Client) if not name.startswith("_")]
    assert {"cancel", "retry", "cancel_many", "retry_many", "types", "pause", "resume",
            "set_limits", "clear_limits", "schedules", "pause_schedule", "resume_schedule",
            "run_schedule", "workers", "audit", "healthz", "metrics", "openapi"} <= set(public)
    assert [n for n in public if not (getattr(Client, n).__doc__ or "").strip()] == []


# -- outcomes: waiting, next, progress, cancel (issue 36) -------------------------------------

def later(seconds: float, action: Callable[[], Any]) -> threading.Thread:
    """Run ``action`` in a thread after ``seconds`` (a worker finishing while a test waits)."""
    thread = threading.Thread(target=lambda: (time.sleep(seconds), action()), daemon=True)
    thread.start()
    return thread


def test_wait_returns_the_job_as_soon_as_it_finishes(connect, producer, worker):
    p, w = connect(producer), connect(worker)
    job = p.enqueue("email", {"to": "ada@example.com"})
    later(0.5, lambda: w.complete(w.claim(), {"sent": True}))
    begun = time.monotonic()
    done = p.wait(job["id"], timeout=10)
    assert 0.4 < time.monotonic() - begun < 5  # woken by the finish, not by a timeout
    assert done["status"] == "completed" and done["result"] == {"sent": True}
    assert [a["outcome"] for a in done["attempts"]] == ["completed"]
    assert p.wait(job["id"], timeout=0) == done  # finished already: answered at once


def test_wait_raises_a_timeout_error_that_keeps_the_job(connect, producer):
    p = connect(producer)
    job = p.enqueue("email")
    begun = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        p.wait(job["id"], timeout=0.5)
    assert 0.5 <= time.monotonic() - begun < 3
    assert isinstance(info.value, JobWaitTimeout) and info.value.id == job["id"]
    assert info.value.job["status"] == "pending"
    with pytest.raises(ProblemError) as missing:  # an error answer is raised, not waited on
        p.wait(job["id"] + 100, timeout=5)
    assert missing.value.status == 404


def test_enqueue_with_wait_returns_the_finished_job_or_the_id_in_the_timeout(
        connect, producer, worker):
    p, w = connect(producer), connect(worker)
    later(0.3, lambda: w.fail(w.claim(), "no such address", retry=False))
    failed = p.enqueue("email", {"to": "nobody"}, wait=10)
    assert failed["status"] == "failed" and failed["payload"] == {"to": "nobody"}
    with pytest.raises(JobWaitTimeout) as info:
        p.enqueue("email", {"n": 2}, wait=0.3)
    pending = p.get(info.value.id)  # not lost: the caller can wait again, or cancel it
    assert pending["payload"] == {"n": 2} and pending["status"] == "pending"


@SQLITE_ONLY  # the client's side of the busy answer: the same from either backend
@pytest.mark.parametrize("config", [{"LONG_POLL_SLOTS": 1}])
def test_wait_honours_retry_after_when_the_servers_long_polls_are_taken(
        app, connect, producer, worker):
    inner = httpx.WSGITransport(app=app)
    waits: list[tuple[float, str | None]] = []

    def record(request: httpx.Request) -> httpx.Response:
        resp = inner.handle_request(request)
        if request.method == "GET":
            waits.append((time.monotonic(), resp.headers.get("Retry-After")))
        return resp
    p = connect(producer, httpx.MockTransport(record))
    job = p.enqueue("email")
    w = connect(worker)
    poll = later(0, lambda: w.claim(["pdf"], wait=3))  # takes the one long-poll slot
    time.sleep(0.3)
    with pytest.raises(JobWaitTimeout):
        p.wait(job["id"], timeout=2.2)
    poll.join(5)
    # One look a second, as the server asked (no busy loop), and a last one at the end.
    assert 3 <= len(waits) <= 4 and [after for _, after in waits[:3]] == ["1"] * 3
    assert all(b - a >= 0.9 for (a, _), (b, _) in zip(waits[:3], waits[1:3]))


def test_complete_and_fail_with_next_claim_in_the_same_request(app, connect, producer, worker):
    inner = httpx.WSGITransport(app=app)
    paths: list[str] = []

    def record(request: httpx.Request) -> httpx.Response:
        paths.append(f"{request.method} {request.url.path}")
        return inner.handle_request(request)
    p, w = connect(producer), connect(worker, httpx.MockTransport(record))
    first, second, third = (p.enqueue("email", {"n": n})["id"] for n in range(3))
    answer = w.complete(w.claim(), {"ok": 1}, next={})
    assert set(answer) == {"job", "next"}
    assert answer["job"]["id"] == first and answer["job"]["status"] == "completed"
    assert answer["next"]["id"] == second and answer["next"]["status"] == "running"
    answer = w.fail(answer["next"], "boom", retry_in=60, next={"types": ["email"], "wait": 1})
    assert answer["job"]["status"] == "pending" and answer["next"]["id"] == third
    last = w.complete(answer["next"], next={"wait": 0})
    assert last["job"]["id"] == third and last["job"]["status"] == "completed"
    assert last["next"] is None  # nothing is due: the worker's next request is a claim
    assert paths == ["POST /jobs/claim", f"POST /jobs/{first}/complete",
                     f"POST /jobs/{second}/fail", f"POST /jobs/{third}/complete"]


def test_a_retried_answer_with_next_claims_nothing_again(app, connect, producer, worker,
                                                        quick_retries):
    """The first try landed (and claimed) but its answer was lost: the retry, sent without
    ``next``, gets 409 and the history; the job the first try claimed waits out its lease."""
    inner = httpx.WSGITransport(app=app)
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        resp = inner.handle_request(request)
        if request.url.path.endswith("/complete"):
            bodies.append(json.loads(request.content))
            if len(bodies) == 1:
                resp.read()  # committed, claimed the next job, and then lost
                return httpx.Response(503, json={"type": "urn:x:unavailable", "status": 503,
                                                 "detail": "database unavailable"})
        return resp
    p, w = connect(producer), connect(worker, httpx.MockTransport(handler))
    first, second, third = (p.enqueue("email", {"n": n})["id"] for n in range(3))
    answer = w.complete(w.claim(), {"ok": 1}, next={})
    assert answer["job"]["id"] == first and answer["job"]["status"] == "completed"
    assert answer["next"] is None
    assert ["next" in b for b in bodies] == [True, False]
    assert p.get(second)["status"] == "running" and p.get(third)["status"] == "pending"


def test_heartbeat_reports_progress_and_a_cancel_fences_the_holder(connect, producer, worker):
    p, w = connect(producer), connect(worker)
    job = p.enqueue("pdf")
    held = w.claim()
    beat = w.heartbeat(held, progress={"percent": 40, "step": "resizing"})
    assert beat["progress"] == {"percent": 40, "step": "resizing"}
    assert p.get(job["id"])["progress"] == {"percent": 40, "step": "resizing"}
    with pytest.raises(ProblemError) as too_big:
        w.heartbeat(held, progress={"blob": "x" * 1100})
    assert too_big.value.status == 422
    assert p.cancel(job)["status"] == "cancelled"
    for call in (lambda: w.heartbeat(held), lambda: w.complete(held, {"late": 1})):
        with pytest.raises(ProblemError) as info:
            call()
        assert info.value.status == 409 and info.value.cancelled
    done = p.get(job["id"])
    assert done["status"] == "cancelled" and done["result"] is None
    assert done["progress"] == {"percent": 40, "step": "resizing"}  # kept after the end


# -- limits, schedules, workers ------------------------------------------------------------
class TestLimitsSchedulesWorkers:
    """set_limits / clear_limits, the schedules' calls and workers against the app."""

    @pytest.fixture
    def config(self) -> dict[str, Any]:
        """A type with a configured limit, and one schedule."""
        return {"JOB_TYPES": {"email": {"concurrency": 2}, "pdf": {}, "sync": {}},
                "SCHEDULES": {"nightly": {"cron": "0 3 * * *", "type": "pdf"}}}

    def test_set_limits_and_clear_limits(self, connect, admin):
        a = connect(admin)
        changed = a.set_limits("email", concurrency=3, rate="10/s", burst=20)
        assert (changed["concurrency"], changed["rate"], changed["burst"]) == (3, "10/s", 20)
        assert a.set_limits("email", rate=None)["rate"] is None     # None removes that limit
        assert a.clear_limits("email")["concurrency"] == 2          # back to JOB_TYPES

    def test_schedules_pause_resume_and_run(self, connect, admin):
        a = connect(admin)
        assert [s["name"] for s in a.schedules()] == ["nightly"]
        assert a.pause_schedule("nightly")["paused"] is True
        assert a.resume_schedule("nightly")["paused"] is False
        job = a.run_schedule("nightly")
        assert job["schedule"] == "nightly" and job["type"] == "pdf"

    def test_workers(self, connect, producer, worker, admin):
        connect(producer).enqueue("email")
        held = connect(worker).claim()
        (entry,) = connect(admin).workers()
        assert entry["name"] == "mailer-1"
        assert [r["id"] for r in entry["running"]] == [held["id"]]
