"""OpenTelemetry: a real server (gunicorn) with the ``otel`` extra and the standard OTEL_*
variables exports its spans over OTLP/HTTP to a receiver the test runs, which decodes them
with ``opentelemetry-proto``: the enqueue's span in the producer's trace, the claim's and
the finishes' linked to it, with the messaging conventions' attributes."""
from __future__ import annotations

import gzip
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

from server_process import Server, make_keys, request

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed "
                    "(pip install 'queuelog[otel]'); CI installs it with the test extra")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http",
                    reason="the otel extra is not installed (opentelemetry-exporter-otlp-"
                           "proto-http)")
trace_service = pytest.importorskip(
    "opentelemetry.proto.collector.trace.v1.trace_service_pb2",
    reason="opentelemetry-proto is not installed: the test's receiver decodes with it")

TRACE, PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
TRACE2, PARENT2 = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
PRODUCER, CLIENT = 4, 3  # Span.SpanKind in the protobuf


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP endpoint: every span it is sent, with its resource's attributes."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[tuple[dict[str, Any], Any]] = []
        self.lock = threading.Lock()

    def named(self, name: str) -> list[Any]:
        with self.lock:
            return [span for _, span in self.spans if span.name == name]


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        export = trace_service.ExportTraceServiceRequest.FromString(body)
        with self.server.lock:
            for resource_spans in export.resource_spans:
                resource = _attrs(resource_spans.resource.attributes)
                for scope in resource_spans.scope_spans:
                    self.server.spans += [(resource, span) for span in scope.spans]
        answer = trace_service.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200 if self.path == "/v1/traces" else 404)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        """Quiet."""


def _attrs(pairs: Any) -> dict[str, Any]:
    """Protobuf KeyValues as a dict of their plain values."""
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in pairs}


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory,
           sqlite_template: Any) -> Iterator[tuple[Server, Receiver, dict[str, Any]]]:
    """A server exporting to a receiver (its batches sent every 50 ms)."""
    folder = tmp_path_factory.mktemp("otel")
    shutil.copyfile(sqlite_template, folder / "q.sqlite3")
    url = f"sqlite:///{folder / 'q.sqlite3'}"
    keys = make_keys(url, {"producer": "producer", "worker": "worker"})
    receiver = Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_port}",
           "OTEL_BSP_SCHEDULE_DELAY": "50"}
    server = Server(url, str(folder / "server.log"), workers=1, threads=4, env=env).start()
    try:
        yield server, receiver, keys
    finally:
        server.stop()
        receiver.shutdown()
        receiver.server_close()


def _spans(receiver: Receiver, name: str, n: int) -> list[Any]:
    """The ``n`` spans called ``name``, once the server has sent them."""
    deadline = time.monotonic() + 15
    while len(receiver.named(name)) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    found = receiver.named(name)
    assert len(found) == n, [s.name for _, s in receiver.spans]
    return found


def test_spans_follow_a_job_from_the_producers_trace_to_its_finish(traced):
    server, receiver, keys = traced
    p, w = keys["producer"], keys["worker"]
    status, one = request(server.port, "POST", "/jobs", {"type": "email"}, headers={
        **p, "traceparent": f"00-{TRACE}-{PARENT}-01", "tracestate": "congo=t61"})
    assert status == 201
    status, batch = request(server.port, "POST", "/jobs/batch", {"jobs": [{"type": "pdf"}]},
                            headers={**p, "traceparent": f"00-{TRACE2}-{PARENT2}-01"})
    assert status == 201
    two = batch["jobs"][0]
    _, got = request(server.port, "POST", "/jobs/claim", {"max_jobs": 2}, headers=w)
    assert sorted(j["id"] for j in got["jobs"]) == [one["id"], two["id"]]
    # The runner's way (a batch complete), and a single fail.
    request(server.port, "POST", "/jobs/complete",
            {"jobs": [{"id": one["id"], "attempt": 1}]}, headers=w)
    request(server.port, "POST", f"/jobs/{two['id']}/fail",
            {"attempt": 1, "error": "boom", "retry": False}, headers=w)

    by_id = {}
    for span in _spans(receiver, "enqueue email", 1) + _spans(receiver, "enqueue pdf", 1):
        by_id[_attrs(span.attributes)["messaging.message.id"]] = span
    enqueue_one, enqueue_two = by_id[str(one["id"])], by_id[str(two["id"])]
    # The enqueue's span is a child of the request's traceparent: in the producer's trace.
    assert (enqueue_one.trace_id.hex(), enqueue_one.parent_span_id.hex()) == (TRACE, PARENT)
    assert enqueue_one.trace_state == "congo=t61"
    assert (enqueue_two.trace_id.hex(), enqueue_two.parent_span_id.hex()) == (TRACE2, PARENT2)
    assert enqueue_one.kind == PRODUCER
    assert _attrs(enqueue_one.attributes) == {
        "messaging.system": "queuelog", "messaging.operation.type": "create",
        "messaging.operation.name": "enqueue", "messaging.destination.name": "email",
        "messaging.message.id": str(one["id"]), "messaging.client.id": "producer",
        "queuelog.job.status": "pending"}

    claims = {_attrs(s.attributes)["messaging.message.id"]: s
              for s in _spans(receiver, "claim email", 1) + _spans(receiver, "claim pdf", 1)}
    (complete,) = _spans(receiver, "complete email", 1)
    (fail,) = _spans(receiver, "fail pdf", 1)
    # Claim, complete and fail: in traces of their own, each linked to the job's trace.
    for span, (trace_id, span_id), operation, job in (
            (claims[str(one["id"])], (TRACE, PARENT), "receive", one),
            (claims[str(two["id"])], (TRACE2, PARENT2), "receive", two),
            (complete, (TRACE, PARENT), "settle", one),
            (fail, (TRACE2, PARENT2), "settle", two)):
        assert [(link.trace_id.hex(), link.span_id.hex()) for link in span.links] == [
            (trace_id, span_id)]
        assert span.trace_id.hex() != trace_id and span.kind == CLIENT
        attrs = _attrs(span.attributes)
        assert (attrs["messaging.system"], attrs["messaging.operation.type"],
                attrs["messaging.destination.name"], attrs["messaging.message.id"],
                attrs["messaging.client.id"]) == (
            "queuelog", operation, job["type"], str(job["id"]), "worker")
    assert _attrs(fail.attributes)["queuelog.job.status"] == "failed"
    assert receiver.spans[0][0]["service.name"] == "queuelog"
