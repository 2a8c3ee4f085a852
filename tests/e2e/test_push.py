"""``queuelog work --post URL`` against a live server and a real HTTP receiver (issue 38).

The receiver is a threaded ``http.server`` on a loopback port that this module starts. What it
answers is up to each job: its payload's ``answers`` list holds one answer per attempt (status,
headers, body, seconds to wait first), so one runner serves every answer rule at once. It
records every request it got and verifies each signature with the standardwebhooks library.
The runner fixtures are test_runner.py's (SQLite: the runner only speaks HTTP).
"""
from __future__ import annotations

import http.server
import json
import signal
import socketserver
import ssl
import subprocess
import threading
import time
from typing import Any, Iterator

import httpx
import pytest
from standardwebhooks import Webhook
from test_runner import Live, finished, jtype, live, wait_for, work, workers  # noqa: F401

from server_process import free_port

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


class Receiver:
    """A push target on 127.0.0.1: answers as each job's payload says, records everything."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                receiver.handle(self)

            def log_message(self, *args: Any) -> None:
                pass

        socketserver.TCPServer.allow_reuse_address = True
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def handle(self, h: http.server.BaseHTTPRequestHandler) -> None:
        """Record the request, verify its signature, then answer as its payload asks."""
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        headers = {k.lower(): v for k, v in h.headers.items()}
        try:
            Webhook(SECRET).verify(body, headers)
            verified = True
        except Exception:
            verified = False
        data = json.loads(body)
        payload = data["job"]["payload"] if "job" in data and len(data) == 1 else data
        attempt = int(headers["queuelog-job-attempt"])
        answers = payload.get("answers") or [{}]
        answer = answers[min(attempt, len(answers)) - 1]
        with self.lock:
            self.requests.append({"path": h.path, "headers": headers, "body": body,
                                  "verified": verified, "at": time.monotonic()})
        time.sleep(answer.get("sleep", 0))
        out = answer.get("body", "").encode()
        try:
            h.send_response(answer.get("status", 200))
            for name, value in answer.get("headers", {}).items():
                h.send_header(name, value)
            h.send_header("Content-Length", str(len(out)))
            h.end_headers()
            h.wfile.write(out)
        except OSError:
            pass  # the runner gave up on this request (its timeout): nothing to answer

    def of(self, job_id: int) -> list[dict[str, Any]]:
        """The requests that delivered this job, in order."""
        with self.lock:
            return [r for r in self.requests if r["headers"]["queuelog-job-id"] == str(job_id)]

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A receiver of this test's own."""
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def secret_file(tmp_path: Any) -> str:
    """The Standard Webhooks secret, in a file only its owner reads."""
    path = tmp_path / "hook.secret"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)
    return str(path)


def enqueue(live: Live, jtype: str, *answers: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A job whose payload tells the receiver how to answer each attempt."""
    return live.producer.enqueue(jtype, {"answers": list(answers)}, **fields)


def test_every_answer_rule_signed_with_the_job_headers(live, work, jtype, receiver,
                                                       secret_file):
    big = "x" * 5000
    jobs = {
        "json": enqueue(live, jtype, {"body": '{"sent": true}'}),
        "text": enqueue(live, jtype, {"body": big}),
        "empty": enqueue(live, jtype, {"status": 204}),
        "503": enqueue(live, jtype, {"status": 503, "body": "busy " + big,
                                     "headers": {"Retry-After": "1"}}, {}),
        "429": enqueue(live, jtype, {"status": 429}, {"body": '{"second": 1}'}),
        "408": enqueue(live, jtype, {"status": 408}, {}),
        "slow": enqueue(live, jtype, {"sleep": 3}, {}),
        "404": enqueue(live, jtype, {"status": 404, "body": "no such hook"}),
        "302": enqueue(live, jtype, {"status": 302, "headers": {"Location": "/elsewhere"}}),
    }
    w = work("--types", jtype, "--concurrency", "8", "--timeout", "1.5", "--post",
             receiver.url, "--secret-file", secret_file)
    done = {k: wait_for(lambda j=j: finished(live, j["id"]), what=f"job {k}")
            for k, j in jobs.items()}
    assert {k: (d["status"], d["attempt"]) for k, d in done.items()} == {
        "json": ("completed", 1), "text": ("completed", 1), "empty": ("completed", 1),
        "503": ("completed", 2), "429": ("completed", 2), "408": ("completed", 2),
        "slow": ("completed", 2), "404": ("failed", 1), "302": ("failed", 1)}
    assert done["json"]["result"] == {"sent": True}
    assert done["text"]["result"] == {"body": "x" * 4096}
    assert done["empty"]["result"] is None
    assert done["429"]["result"] == {"second": 1}
    first, second = receiver.of(jobs["503"]["id"])
    assert second["at"] - first["at"] >= 0.9  # Retry-After: 1 became retry_in
    errors = {k: [a.get("error") for a in live.admin.get(j["id"])["attempts"]]
              for k, j in jobs.items()}
    assert errors["503"][0] == "HTTP 503 Service Unavailable\n" + ("busy " + big)[:1024]
    assert errors["429"][0].startswith("HTTP 429") and errors["408"][0].startswith("HTTP 408")
    assert errors["slow"][0] == "timed out after 1.5 s"
    assert errors["404"] == ["HTTP 404 Not Found\nno such hook"]
    assert errors["302"] == ["HTTP 302 Found: redirect to /elsewhere not followed"]
    assert all(r["path"] == "/hook" for r in receiver.requests)  # the redirect: not followed
    for key, job in jobs.items():
        for n, req in enumerate(receiver.of(job["id"]), start=1):
            h = req["headers"]
            assert req["verified"], key
            assert (h["webhook-id"], h["queuelog-job-type"], h["queuelog-job-attempt"],
                    h["queuelog-job-priority"]) == (str(job["id"]), jtype, str(n), "low")
            assert json.loads(req["body"]) == job["payload"]  # the payload alone
            assert "authorization" not in h and "traceparent" not in h
            assert live.tokens["worker"].encode() not in req["body"] + repr(h).encode()
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    log = w.log()
    assert (log.count("outcome=completed"), log.count("outcome=failed"),
            log.count("outcome=timed-out")) == (7, 5, 1), log


def test_heartbeats_keep_the_lease_of_a_long_request(live, work, jtype, receiver):
    job = enqueue(live, jtype, {"sleep": 2.5, "body": '{"long": true}'})
    w = work("--types", jtype, "--lease", "1", "--post", receiver.url)
    wait_for(lambda: receiver.of(job["id"]), what="the request")
    time.sleep(1.5)  # past the first lease: only heartbeats keep another claim off it
    assert live.client("other").claim([jtype]) is None
    done = wait_for(lambda: finished(live, job["id"]), what="completion")
    assert (done["status"], done["attempt"], done["result"]) == ("completed", 1, {"long": True})
    assert len(receiver.of(job["id"])) == 1  # the lease never ran out: no second delivery
    w.signal(signal.SIGTERM)
    assert w.wait() == 0


def test_a_receiver_that_is_down_fails_with_retry(live, work, jtype):
    job = live.producer.enqueue(jtype, {}, max_retries=1)
    down = f"http://127.0.0.1:{free_port()}/hook"
    w = work("--types", jtype, "--post", down)
    done = wait_for(lambda: finished(live, job["id"]), what="failure")
    assert (done["status"], done["attempt"]) == ("failed", 2)  # retried once, as allowed
    error = live.admin.get(job["id"])["attempts"][0]["error"]
    assert error.startswith(f"POST {down} failed: ConnectError"), error
    w.signal(signal.SIGTERM)
    assert w.wait() == 0


def test_with_job_sends_the_claimed_job_and_its_parents(live, work, jtype, receiver):
    parent = enqueue(live, jtype, {"body": '{"rows": 3}'})
    child = enqueue(live, jtype, {}, depends_on=[parent["id"]], on_parent_failure="run")
    w = work("--types", jtype, "--post", receiver.url, "--with-job")
    wait_for(lambda: finished(live, child["id"]), what="the child")
    (req,) = receiver.of(child["id"])
    sent = json.loads(req["body"])["job"]
    assert (sent["id"], sent["attempt"], sent["payload"]) == (child["id"], 1, child["payload"])
    assert sent["parents"] == [{"id": parent["id"], "type": jtype, "status": "completed",
                                "result": {"rows": 3}}]
    assert "webhook-id" not in req["headers"]  # no --secret-file: unsigned
    w.signal(signal.SIGTERM)
    assert w.wait() == 0


def test_the_jobs_trace_context_goes_to_the_target(live, work, jtype, receiver):
    """A producer's traceparent and tracestate, kept on the job, reach the push target as
    its headers (and a job without them sends none)."""
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    got = httpx.post(f"{live.url}/jobs", json={"type": jtype, "payload": {"answers": [{}]}},
                     headers={"Authorization": f"Bearer {live.tokens['producer']}",
                              "traceparent": parent, "tracestate": "vendor=abc"})
    assert got.status_code == 201 and got.json()["traceparent"] == parent
    plain = enqueue(live, jtype, {})
    w = work("--types", jtype, "--post", receiver.url)
    for job in (got.json(), plain):
        wait_for(lambda j=job: finished(live, j["id"]), what="the delivery")
    (traced,) = receiver.of(got.json()["id"])
    assert (traced["headers"]["traceparent"], traced["headers"]["tracestate"]) == (
        parent, "vendor=abc")
    (untraced,) = receiver.of(plain["id"])
    assert "traceparent" not in untraced["headers"]
    w.signal(signal.SIGTERM)
    assert w.wait() == 0


def test_sigterm_lets_requests_in_flight_finish_within_grace(live, work, jtype, receiver):
    jobs = [enqueue(live, jtype, {"sleep": 1.0}) for _ in range(3)]
    w = work("--types", jtype, "--concurrency", "3", "--grace", "10", "--post", receiver.url)
    wait_for(lambda: len(receiver.requests) == 3, what="three requests in flight")
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    assert [live.admin.get(j["id"])["status"] for j in jobs] == ["completed"] * 3
    assert sorted(int(r["headers"]["queuelog-job-id"]) for r in receiver.requests) == \
        sorted(j["id"] for j in jobs)  # each delivered once


def test_after_the_grace_a_request_in_flight_is_delivered_again_with_the_same_id(
        live, work, jtype, receiver, secret_file):
    job = enqueue(live, jtype, {"sleep": 3}, {})
    w = work("--types", jtype, "--grace", "0.3", "--post", receiver.url,
             "--secret-file", secret_file)
    wait_for(lambda: receiver.of(job["id"]), what="the request in flight")
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    assert "outcome=stopped" in w.log()
    again = work("--types", jtype, "--post", receiver.url, "--secret-file", secret_file)
    done = wait_for(lambda: finished(live, job["id"]), what="the redelivery")
    assert (done["status"], done["attempt"]) == ("completed", 2)
    ids = [r["headers"]["webhook-id"] for r in receiver.of(job["id"])]
    assert ids == [str(job["id"])] * 2  # at least once, and a receiver can tell the repeat
    again.signal(signal.SIGTERM)
    assert again.wait() == 0


def private_ca(folder: Any) -> tuple[str, ssl.SSLContext]:
    """A CA of the test's own (openssl) and a server context with its cert for 127.0.0.1."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=queuelog test CA")
    openssl("req", *ec, "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=127.0.0.1")
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "srv.pem", "-days", "2", "-extfile", "san.ext")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "srv.pem", folder / "srv.key")
    return str(folder / "ca.pem"), context


def test_tls_is_verified_and_ca_file_trusts_a_private_ca(live, work, jtype, tmp_path):
    ca_file, context = private_ca(tmp_path)
    target = Receiver(context)
    try:
        refused = enqueue(live, jtype, {}, max_retries=0)
        w = work("--types", jtype, "--post", target.url)
        wait_for(lambda: finished(live, refused["id"]), what="the refusal")
        w.signal(signal.SIGTERM)
        assert w.wait() == 0
        error = live.admin.get(refused["id"])["error"]
        assert "ConnectError" in error and "CERTIFICATE_VERIFY_FAILED" in error, error
        trusted = enqueue(live, jtype, {"body": '{"over": "tls"}'})
        w = work("--types", jtype, "--post", target.url, "--ca-file", ca_file)
        done = wait_for(lambda: finished(live, trusted["id"]), what="the delivery")
        assert (done["status"], done["result"]) == ("completed", {"over": "tls"})
        w.signal(signal.SIGTERM)
        assert w.wait() == 0
    finally:
        target.close()
