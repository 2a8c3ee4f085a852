"""OpenTelemetry spans for enqueue, claim, complete and fail, exported over OTLP/HTTP.

Only with the ``otel`` extra installed AND configured through the standard ``OTEL_*``
variables (``configured``); otherwise nothing of OpenTelemetry is imported and the actions
pay one check of ``ENABLED``. The spans follow OpenTelemetry's messaging conventions: the
enqueue's span (``create``) is a child of the request's ``traceparent``, so it sits in the
producer's trace; the claim's (``receive``) and the finishes' (``settle``) link to the job's
stored ``traceparent``, as a consumer's spans do in a trace of their own.

They are made in the actions, not the API views: the actions are the one gate every way in
passes (the API, and the command line or the ticker too), they alone know which enqueues
were replays and which finishes were refused, and they already count the same events for
the metrics, at the same places.
"""
from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

if TYPE_CHECKING:
    from flask import Flask

    from queuelog.model.jobs import Done, Job

ENABLED = False  # set by init_app when spans are exported; the hot path's only check
SYSTEM = "queuelog"
# The OTLP/HTTP exporter is the extra's; gRPC would need another package, and the server
# refuses to guess, rather than send spans nowhere.
_HTTP_PROTOCOLS = ("", "http/protobuf")
_tracer: Any = None
_otel: Any = None  # the few OpenTelemetry names the spans use, imported once


def configured(env: Mapping[str, str]) -> bool:
    """Whether ``env`` asks for traces: an OTLP endpoint, or ``OTEL_TRACES_EXPORTER=otlp``
    (the exporter's default endpoint, localhost:4318); ``OTEL_SDK_DISABLED=true`` or
    ``OTEL_TRACES_EXPORTER=none`` turn them off."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:  # a list, by the spec ("otlp,console"): the server sends only OTLP
        return "otlp" in (e.strip() for e in exporter.split(","))
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def init_app(app: Flask, env: Mapping[str, str] | None = None) -> None:
    """Start exporting spans if ``env`` (default: the process's) asks for them and the
    ``otel`` extra is installed; say in one line why not when it asks and cannot."""
    global ENABLED, _tracer, _otel
    env = os.environ if env is None else env
    if ENABLED or not configured(env):
        return
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")).strip().lower()
    if protocol not in _HTTP_PROTOCOLS:
        _say(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported (only "
             "http/protobuf): no spans are exported")
        return
    try:
        _tracer, _otel = _start(env)
    except ImportError:
        _say("OTEL_* asks for traces but the otel extra is not installed "
             "(pip install 'queuelog[otel]'): no spans are exported")
        return
    ENABLED = True


def _start(env: Mapping[str, str]) -> tuple[Any, Any]:
    """A tracer exporting in batches (a background thread) over OTLP/HTTP; the global
    provider if the process has one already (``opentelemetry-instrument``)."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from queuelog import __version__
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        named = "OTEL_SERVICE_NAME" in env or "service.name=" in env.get(
            "OTEL_RESOURCE_ATTRIBUTES", "")
        provider = TracerProvider(resource=Resource.create(
            {} if named else {"service.name": SYSTEM}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
    names = _Otel(trace, TraceContextTextMapPropagator())
    return provider.get_tracer("queuelog", __version__), names


class _Otel:
    """The OpenTelemetry names the spans use."""

    def __init__(self, trace: Any, propagator: Any) -> None:
        self.trace, self.propagator = trace, propagator
        self.kind = trace.SpanKind


def _say(line: str) -> None:
    print(f"queuelog: {line}", file=sys.stderr, flush=True)


# -- the spans ------------------------------------------------------------------------------
def enqueued(jobs: Iterable[Job], who: str) -> None:
    """One ``create`` span per new job, a child of the trace context it was sent with."""
    started = _request_start()
    for job in jobs:
        parent = _extract(job.traceparent, job.tracestate) if job.traceparent else None
        _span("enqueue", "create", _otel.kind.PRODUCER, job, who, started, parent=parent)


def claimed(jobs: Iterable[Job], who: str) -> None:
    """One ``receive`` span per claimed job, linked to its trace context."""
    started = _request_start()
    for job in jobs:
        _span("claim", "receive", _otel.kind.CLIENT, job, who, started,
              links=_link(job.traceparent))


def settled(jobs: Sequence[Job | Done], verb: str, who: str) -> None:
    """One ``settle`` span per finished attempt (``verb``: complete or fail), linked to
    its job's trace context."""
    started = _request_start()
    for job in jobs:
        _span(verb, "settle", _otel.kind.CLIENT, job, who, started,
              links=_link(job.traceparent))


def _span(verb: str, operation: str, kind: Any, job: Job | Done, who: str, started: int,
          *, parent: Any = None, links: Sequence[Any] = ()) -> None:
    """One span, named as the conventions say (``{operation name} {destination}``)."""
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM, "messaging.operation.type": operation,
        "messaging.operation.name": verb, "messaging.destination.name": job.type,
        "messaging.message.id": str(job.id), "messaging.client.id": who,
        "queuelog.job.status": job.status.value}
    attempt = getattr(job, "attempt", None)  # a batch complete's Done has none
    if attempt:
        attributes["queuelog.job.attempt"] = attempt
    span = _tracer.start_span(f"{verb} {job.type}", context=parent, kind=kind,
                              attributes=attributes, links=links, start_time=started)
    span.end()


def _extract(traceparent: str, tracestate: str | None) -> Any:
    """A context whose parent is the stored trace context."""
    carrier = {"traceparent": traceparent}
    if tracestate:
        carrier["tracestate"] = tracestate
    return _otel.propagator.extract(carrier)


def _link(traceparent: str | None) -> list[Any]:
    """A link to the stored trace context, if any."""
    if not traceparent:
        return []
    context = _otel.trace.get_current_span(_extract(traceparent, None)).get_span_context()
    return [_otel.trace.Link(context)] if context.is_valid else []


def _request_start() -> int:
    """When this request began, in epoch nanoseconds (the metrics' timer); now outside
    one (the command line, the ticker). A span covers its request, waits included."""
    from flask import g, has_request_context
    now = time.time_ns()
    began = g.get("queuelog_started") if has_request_context() else None
    return now if began is None else now - int((time.perf_counter() - began) * 1e9)
