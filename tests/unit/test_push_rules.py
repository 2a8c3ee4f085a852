"""``queuelog work --post``: the answer rules (verdict.py), the request (push.py), the options."""
from __future__ import annotations

import json
import pathlib
import socket
import subprocess
import sys
import threading
import time
from email.utils import formatdate
from typing import Any

import pytest
from standardwebhooks import Webhook

from queuelog.model.claimed import ClaimedJob
from queuelog.worker.push import PushTarget
from queuelog.worker.verdict import of_answer, retry_after

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
ENV = {"QUEUELOG_TOKEN": "t", "PATH": "/usr/bin:/bin",
       "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[2])}
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize("status, retry", [
    (500, True), (502, True), (503, True), (599, True), (429, True), (408, True),
    (400, False), (401, False), (403, False), (404, False), (409, False), (422, False),
    (301, False), (302, False), (307, False), (308, False)])
def test_which_answers_are_retried(status, retry):
    v = of_answer(status, {}, b"", True)
    assert (v.completed, v.retry) == (False, retry)
    assert v.error.startswith(f"HTTP {status}")


@pytest.mark.parametrize("body, whole, result", [
    (b'{"a": [1, 2]}', True, {"a": [1, 2]}),
    (b"", True, None),
    (b"  \n", True, None),
    (b"[1, 2]", True, {"body": "[1, 2]"}),                # JSON, but not an object
    (b'{"x": 1e400}', True, {"body": '{"x": 1e400}'}),    # infinity cannot be sent on
    (b"\xff\xfe", True, {"body": ""}),                    # not UTF-8
    (b'{"a": 1}', False, {"body": '{"a": 1}'}),           # cut short: not a result
    (b"y" * 5000, True, {"body": "y" * 4096})])
def test_a_2xx_body_as_the_result(body, whole, result):
    for status in (200, 201, 204, 299):
        v = of_answer(status, {}, body, whole)
        assert (v.completed, v.result) == (True, result)


def test_the_error_names_the_status_and_the_first_kib():
    v = of_answer(503, {}, b"z" * 3000, True, "Service Unavailable")
    assert v.error == "HTTP 503 Service Unavailable\n" + "z" * 1024
    assert of_answer(418, {}, b"", True).error == "HTTP 418"


def test_a_redirect_names_its_location():
    v = of_answer(302, {"location": "https://elsewhere/x"}, b"", True, "Found")
    assert (v.retry, v.error) == (False, "HTTP 302 Found: redirect to https://elsewhere/x "
                                         "not followed")


def test_retry_after_seconds_or_a_date_becomes_retry_in():
    assert of_answer(429, {"retry-after": "7"}, b"", True).retry_in == 7
    assert of_answer(503, {}, b"", True).retry_in is None
    assert retry_after(formatdate(time.time() + 60, usegmt=True)) == pytest.approx(60, abs=2)
    assert retry_after(formatdate(time.time() - 60, usegmt=True)) == 0
    assert retry_after("999999999") == 86_400  # the server's limit on retry_in
    assert retry_after("soon") is None and retry_after("-3") is None


def job(**raw: object) -> ClaimedJob:
    return ClaimedJob.from_json({"id": 41, "type": "hook", "attempt": 2, "priority": "high",
                                 "payload": {"to": "ada"}, **raw})


def test_the_request_carries_the_job_headers_trace_context_and_a_signature():
    target = PushTarget("http://127.0.0.1:9/", signer=Webhook(SECRET))
    now = time.time()
    body, headers = target.request(job(traceparent=TRACE, tracestate="k=v"), now)
    assert json.loads(body) == {"to": "ada"}
    assert {k: headers[k] for k in ("Queuelog-Job-Id", "Queuelog-Job-Type",
                                    "Queuelog-Job-Attempt", "Queuelog-Job-Priority",
                                    "traceparent", "tracestate", "webhook-id",
                                    "webhook-timestamp")} == {
        "Queuelog-Job-Id": "41", "Queuelog-Job-Type": "hook", "Queuelog-Job-Attempt": "2",
        "Queuelog-Job-Priority": "high", "traceparent": TRACE, "tracestate": "k=v",
        "webhook-id": "41", "webhook-timestamp": str(int(now))}
    assert Webhook(SECRET).verify(body, headers) == {"to": "ada"}
    with pytest.raises(Exception):
        Webhook("whsec_" + "A" * 32).verify(body, headers)  # another secret: refused
    target.close()


def test_without_trace_context_or_secret_those_headers_are_absent():
    target = PushTarget("http://127.0.0.1:9/", with_job=True)
    body, headers = target.request(job(traceparent=None, tracestate=None), time.time())
    assert not {"traceparent", "tracestate", "webhook-id", "webhook-signature"} & set(headers)
    assert json.loads(body)["job"]["payload"] == {"to": "ada"}
    target.close()


@pytest.mark.parametrize("args, says", [
    ([], "give either --post URL or -- COMMAND"),
    (["--post", "http://127.0.0.1:9/", "--", "true"], "give either --post URL or -- COMMAND"),
    (["--with-job", "--", "true"], "go with --post"),
    (["--post", "ftp://x/"], "http:// or https://"),
    (["--post", "http://127.0.0.1:9/", "--secret-file", "/nonexistent"], "--secret-file"),
    (["--post", "http://127.0.0.1:9/", "--ca-file", "/nonexistent"], "--ca-file")])
def test_options_that_cannot_work_are_usage_errors(args, says, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "queuelog", "work", "--url",
                           "http://127.0.0.1:9", *args], capture_output=True, text=True,
                          env=ENV, cwd=tmp_path, timeout=30)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr


def test_a_secret_file_without_a_whsec_secret_is_refused(tmp_path):
    path = tmp_path / "s"
    path.write_text("hunter2\n")
    proc = subprocess.run([sys.executable, "-m", "queuelog", "work", "--url",
                           "http://127.0.0.1:9", "--post", "http://127.0.0.1:9/",
                           "--secret-file", str(path)], capture_output=True, text=True,
                          env=ENV, cwd=tmp_path, timeout=30)
    assert proc.returncode == 2 and "no Standard Webhooks secret" in proc.stderr, proc.stderr


def test_a_target_that_trickles_its_answer_is_cut_off_soon_after_the_timeout():
    # httpx's timeout is per read: an answer that sends a byte now and then never trips it.
    # The runner abandons such a request at --timeout, and it must end soon after: else it
    # holds a pooled connection for as long as the target trickles, and with two of them
    # every later job, to a target that answers at once, timed out waiting for the pool.
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
            while not stop.wait(0.05):
                try:
                    conn.sendall(b"x")
                except OSError:
                    return  # the runner hung up: what the test wants

    threading.Thread(target=trickle, daemon=True).start()
    target = PushTarget(f"http://127.0.0.1:{server.getsockname()[1]}/", timeout=0.5)
    got: list[Any] = []
    delivery = threading.Thread(target=lambda: got.append(target.deliver(job())), daemon=True)
    delivery.start()
    delivery.join(3)  # the timeout, httpx's one more second (ABANDON_SECONDS), and room
    stop.set()
    delivery.join(5)
    target.close()
    server.close()
    assert got, "the delivery was not over 3 s after a 0.5 s timeout"
    verdict = got[0]
    assert (verdict.completed, verdict.retry, verdict.error) == (False, True,
                                                                 "timed out after 0.5 s")
