"""Prometheus metrics (``GET /metrics``), made with ``prometheus_client``.

Two kinds, as the contract's table says:

- **Gauges** (jobs per status and type, oldest due pending job, expired leases, paused
  types) are read from the database at scrape time, so every process and every app server
  reports the same truth and nothing is kept in step by hand.
- **Counters and the histograms** (requests; jobs' run and wait times) count events in
  the process that saw them. Under
  gunicorn each worker is a process: with ``PROMETHEUS_MULTIPROC_DIR`` set (before start),
  prometheus_client keeps them in memory-mapped files there, and a scrape of any worker
  sums every worker's files. The project's ``gunicorn.conf.py`` (which gunicorn reads from
  the working directory) sets it up when the operator has not. Without it (one process,
  ``queuelog run``, the tests), they live in memory.
- A claim's time in the histogram is its work: the time its long poll slept is left out.

The event functions (``jobs_enqueued``, ``attempt_finished``, ``observe_run``,
``attempts_ran``, ``jobs_claimed``) are one-liners for the code where the event happens to
call.
"""
from __future__ import annotations

import os
import time
from typing import Any, Iterable, Iterator, Mapping, Sequence

from flask import Flask, Response, g, request
from prometheus_client import CollectorRegistry, Counter, Histogram, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder

from queuelog.model.problems import ConfigError
from queuelog.model.jobs import Status

# Our own registry, not prometheus_client's global one: an app embedding queuelog keeps
# its metrics apart, and a scrape shows exactly the contract's metrics.
_PROCESS = CollectorRegistry(auto_describe=True)

ENQUEUED = Counter("queuelog_jobs_enqueued", "Jobs enqueued (idempotent replays excluded).",
                   ["type"], registry=_PROCESS)
ATTEMPTS = Counter("queuelog_attempts_finished", "Attempts that ended, by outcome.",
                   ["type", "outcome"], registry=_PROCESS)
# A long poll's sleep is left out (long_poll_waited), but a slow request may still take
# seconds: the buckets reach past a minute.
REQUESTS = Histogram("queuelog_http_request_duration_seconds",
                     "Time to answer an HTTP request, by method, URL rule and status.",
                     ["method", "route", "status"], registry=_PROCESS,
                     buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
# Jobs run and wait from milliseconds (a woken claim, a quick email) to hours (a report, a
# backlog): buckets about 2.5x apart from 5 ms to a day, so each decade has a bucket or
# two and histogram_quantile stays within a step of the truth at either end. The top is
# past the longest lease (12 h); 22 buckets per series keep a scrape small.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
                    300, 600, 1800, 3600, 7200, 14400, 43200, 86400)
RUN = Histogram("queuelog_job_run_seconds",
                "Time from a job's claim to its attempt's end, by type and outcome.",
                ["type", "outcome"], registry=_PROCESS, buckets=DURATION_BUCKETS)
WAIT = Histogram("queuelog_job_wait_seconds",
                 "Time from the moment a job became due (its run_at) to its claim, by type.",
                 ["type"], registry=_PROCESS, buckets=DURATION_BUCKETS)
# Anything else a client sends becomes "other": a label value per made-up method would
# let any client grow the series without bound.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


# Each metric's labelled children, by label values: ``labels()`` converts and checks its
# values and takes a lock on every call, and every request makes such calls. The same
# child objects prometheus_client keeps itself.
_CHILDREN: dict[tuple[Any, ...], Any] = {}


def _child(metric: Any, *values: str) -> Any:
    """``metric.labels(*values)``, looked up once per process."""
    key = (metric, *values)
    child = _CHILDREN.get(key)
    if child is None:
        child = _CHILDREN[key] = metric.labels(*values)
    return child


def jobs_enqueued(job_type: str, n: int = 1) -> None:
    """Count ``n`` new jobs of ``job_type``."""
    _child(ENQUEUED, job_type).inc(n)


def attempt_finished(job_type: str, outcome: str, n: int = 1) -> None:
    """Count an attempt that ended: ``completed``, ``failed`` or ``lease_expired``."""
    _child(ATTEMPTS, job_type, outcome).inc(n)


def observe_run(job_type: str, outcome: str, seconds: float) -> None:
    """Observe an attempt's run time, claim to end: ``completed``, ``failed``,
    ``lease_expired`` or ``cancelled``."""
    _child(RUN, job_type, outcome).observe(max(0.0, seconds))


def attempts_ran(done: Iterable[Any], outcome: str) -> None:
    """Observe the run time of each job whose attempt just ended with ``outcome`` (a Job
    or a batch's Done: its ``claimed_at``, and its ``finished_at``, else ``updated_at``,
    the end of an attempt retried later)."""
    for job in done:
        end = getattr(job, "finished_at", None) or getattr(job, "updated_at", None)
        if job.claimed_at is not None and end is not None:
            observe_run(job.type, outcome, (end - job.claimed_at) / 1_000_000)


def jobs_claimed(jobs: Iterable[Any]) -> None:
    """Observe each claimed job's wait: from its ``run_at`` (when it became due) to its
    ``claimed_at``."""
    for job in jobs:
        _child(WAIT, job.type).observe(max(0, job.claimed_at - job.run_at) / 1_000_000)


def lease_expired(job_type: str, seconds: float | None = None) -> None:
    """Count a lease taken back, and its run time (claim to take-back) when given."""
    attempt_finished(job_type, "lease_expired")
    if seconds is not None:
        observe_run(job_type, "lease_expired", seconds)


def long_poll_waited(seconds: float) -> None:
    """Leave ``seconds`` of sleep in a long poll out of this request's observed time."""
    if seconds > 0:
        g.queuelog_waited = g.get("queuelog_waited", 0.0) + seconds


def multiprocess_dir(environ: Mapping[str, str] = os.environ) -> str | None:
    """The multiprocess directory, when prometheus_client runs in that mode (``environ``:
    the process's environment unless given)."""
    return environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def per_worker_warning(environ: Mapping[str, str]) -> str | None:
    """The line a gunicorn worker prints when its counters would be its own, else None
    (``environ``: the process's, as ``os.environ``).

    gunicorn's master sets ``SERVER_SOFTWARE`` (``gunicorn/<version>``) for its workers.
    Without a multiprocess directory each worker counts alone and a scrape reads
    whichever worker answered: a mistake made silently by a plain install's command.
    """
    if multiprocess_dir(environ) or not environ.get("SERVER_SOFTWARE", "").startswith(
            "gunicorn/"):
        return None
    return ("queuelog: PROMETHEUS_MULTIPROC_DIR is not set: with more than one gunicorn "
            "worker, /metrics counts each worker alone; start gunicorn from the checkout "
            "(it reads gunicorn.conf.py) or add -c python:queuelog.server.gunicorn_hooks")


class _DatabaseGauges:
    """The gauges, collected from one snapshot of the database per scrape."""

    def __init__(self, store: Any, types: Sequence[str]) -> None:
        self.store = store
        self.types = list(types)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield the four gauge families, a sample for every configured type."""
        snap = self.store.gauges(self.types)
        jobs = GaugeMetricFamily("queuelog_jobs", "Jobs in the table, by status and type.",
                                 labels=["status", "type"])
        counts = dict(snap.counts)
        # Zeros too: Prometheus alerts on a series that exists; a missing one is "no data".
        for key in [(s.value, t) for s in Status for t in self.types]:
            counts.setdefault(key, 0)
        for (status, job_type), n in sorted(counts.items()):
            jobs.add_metric([status, job_type], n)
        yield jobs
        types = sorted(set(self.types) | set(snap.oldest_due) | set(snap.expired))
        oldest = GaugeMetricFamily(
            "queuelog_oldest_pending_seconds",
            "Age of the oldest due pending job (queue latency); 0 when none.", labels=["type"])
        expired = GaugeMetricFamily(
            "queuelog_expired_leases",
            "Running jobs whose lease has run out, not yet taken back.", labels=["type"])
        paused = GaugeMetricFamily("queuelog_type_paused", "1 while the type is paused.",
                                   labels=["type"])
        for job_type in types:
            run_at = snap.oldest_due.get(job_type)
            age = 0.0 if run_at is None else max(0, snap.now - run_at) / 1_000_000
            oldest.add_metric([job_type], age)
            expired.add_metric([job_type], snap.expired.get(job_type, 0))
        for job_type in sorted(set(self.types) | snap.paused):
            paused.add_metric([job_type], 1 if job_type in snap.paused else 0)
        yield from (oldest, expired, paused)
        yield from _flow_gauges(self.store.flow_states(self.types))


LIMITED_REASONS = ("paused", "concurrency", "rate")


def _flow_gauges(flows: Any) -> Iterator[GaugeMetricFamily]:
    """Flow control: why a claim skips each type now, and the limits in force."""
    limited = GaugeMetricFamily(
        "queuelog_type_limited", "1 while a claim skips the type, by reason.",
        labels=["type", "reason"])
    conc = GaugeMetricFamily("queuelog_type_concurrency_limit",
                             "The concurrency limit in force (types that have one).",
                             labels=["type"])
    rate = GaugeMetricFamily("queuelog_type_rate_limit",
                             "The rate limit in force, in jobs per second.", labels=["type"])
    burst = GaugeMetricFamily("queuelog_type_rate_burst", "The rate limit's burst in force.",
                              labels=["type"])
    for job_type, flow in sorted(flows.items()):
        for reason in LIMITED_REASONS:
            limited.add_metric([job_type, reason], 1 if flow.limited == reason else 0)
        if flow.limits.concurrency is not None:
            conc.add_metric([job_type], flow.limits.concurrency)
        bucket = flow.limits.bucket()
        if bucket is not None:
            rate.add_metric([job_type], bucket[1])
            burst.add_metric([job_type], bucket[0])
    yield from (limited, conc, rate, burst)


class _ScheduleGauges:
    """Each schedule's last tick, read from the database: "stopped firing" is one alert."""

    def __init__(self, store: Any, schedules: Sequence[str]) -> None:
        self.store = store
        self.schedules = list(schedules)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield ``queuelog_schedule_last_run_timestamp_seconds`` (0 before its first tick)."""
        last = self.store.last_ticks() if self.schedules else {}
        family = GaugeMetricFamily(
            "queuelog_schedule_last_run_timestamp_seconds",
            "Unix time of the schedule's newest tick that made a job; 0 before the first.",
            labels=["schedule"])
        for name in self.schedules:
            family.add_metric([name], last.get(name, 0) / 1_000_000)
        yield family


class _ProcessMetrics:
    """This process's counters and histogram (used when not in multiprocess mode)."""

    def collect(self) -> Iterator[Any]:
        """Yield what the process registry holds."""
        return _PROCESS.collect()


def exposition(store: Any, types: Sequence[str], accept: str | None,
               schedules: Sequence[str] = ()) -> tuple[bytes, str]:
    """The scrape's body and content type (the format the scraper asked for)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_DatabaseGauges(store, types))
    registry.register(_ScheduleGauges(store, schedules))
    if multiprocess_dir():
        multiprocess.MultiProcessCollector(registry)  # every worker's files, summed
    else:
        registry.register(_ProcessMetrics())
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


OUTCOMES = ("completed", "failed", "lease_expired")
RUN_OUTCOMES = (*OUTCOMES, "cancelled")  # a running job cancelled ends its attempt too


def init_app(app: Flask) -> None:
    """Time every request, and count lease take-backs as the store reports them."""
    folder = multiprocess_dir()
    if folder is not None and not os.path.isdir(folder):
        # Else the first counter fails deep in prometheus_client with a bare FileNotFoundError.
        raise ConfigError(f"PROMETHEUS_MULTIPROC_DIR is {folder!r}, which is not a directory; "
                          "create it (empty) before starting gunicorn")
    # Every configured type's counters exist from the start, at 0: rate() and alerts
    # need a series before its first event.
    for job_type in app.config["JOB_TYPES"]:
        ENQUEUED.labels(job_type)
        WAIT.labels(job_type)
        for outcome in OUTCOMES:
            ATTEMPTS.labels(job_type, outcome)
        for outcome in RUN_OUTCOMES:
            RUN.labels(job_type, outcome)
    store = app.extensions["queuelog.store"]
    store.hook(lease_expired=lease_expired,
               run_cancelled=lambda job_type, seconds: observe_run(job_type, "cancelled",
                                                                   seconds))
    # First in line, so the time includes whatever other before_request hooks do.
    app.before_request_funcs.setdefault(None, []).insert(0, _start_timer)
    app.after_request(_observe)


def _start_timer() -> None:
    g.queuelog_started = time.perf_counter()


def _observe(response: Response) -> Response:
    started = g.get("queuelog_started")
    if started is not None:
        rule = request.url_rule.rule if request.url_rule is not None else "unmatched"
        method = request.method if request.method in METHODS else "other"
        took = time.perf_counter() - started - g.get("queuelog_waited", 0.0)
        _child(REQUESTS, method, rule, str(response.status_code)).observe(max(0.0, took))
    return response
