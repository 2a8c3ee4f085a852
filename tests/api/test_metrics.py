"""GET /metrics: database gauges at scrape time, counters, the request histogram, gunicorn."""
from __future__ import annotations

import os
import pathlib
import threading
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, multiprocess
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import insert

from helpers import SQLITE_ONLY, problem
from queuelog import create_app
from queuelog.model.problems import ConfigError
from queuelog.server.store.tables import paused_types
from server_process import Server, make_keys, request

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample of an exposition: (name, sorted labels) -> value."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(client: Any, headers: dict[str, str]) -> Samples:
    """GET /metrics and parse it."""
    resp = client.get("/metrics", headers=headers)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert resp.mimetype == "text/plain"
    return parse(resp.get_data(as_text=True))


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (0 when the series is absent, as a counter not yet touched)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def post(client: Any, path: str, headers: dict[str, str], **body: Any) -> Any:
    """POST JSON; return the response."""
    return client.post(path, json=body, headers=headers)


def test_job_gauges_count_every_status_and_type_zeros_included(client, producer, worker,
                                                               admin):
    for job_type in ("email", "email", "pdf"):
        assert post(client, "/jobs", producer, type=job_type).status_code == 201
    job = post(client, "/jobs/claim", worker, types=["pdf"]).json
    post(client, f"/jobs/{job['id']}/complete", worker, attempt=1)
    got = scrape(client, admin)
    assert value(got, "queuelog_jobs", status="pending", type="email") == 2
    assert value(got, "queuelog_jobs", status="completed", type="pdf") == 1
    zeros = [k for k in got if k[0] == "queuelog_jobs"]
    assert len(zeros) == 6 * 3  # every status of every configured type is a series
    assert value(got, "queuelog_jobs", status="blocked", type="sync") == 0
    for job_type in ("email", "pdf", "sync"):
        for name in ("queuelog_oldest_pending_seconds", "queuelog_expired_leases",
                     "queuelog_type_paused"):
            assert (name, (("type", job_type),)) in got


def test_oldest_pending_is_the_age_of_the_oldest_due_job(client, producer, admin, clock):
    """Queue latency: across priorities, due jobs only; 0 when nothing waits."""
    post(client, "/jobs", producer, type="email", priority="low")
    clock.advance(30)
    post(client, "/jobs", producer, type="email", priority="medium")  # younger, but first
    post(client, "/jobs", producer, type="pdf", delay_seconds=3600)  # not due: no latency
    clock.advance(60)
    got = scrape(client, admin)
    assert value(got, "queuelog_oldest_pending_seconds", type="email") == 90
    assert value(got, "queuelog_oldest_pending_seconds", type="pdf") == 0
    assert value(got, "queuelog_oldest_pending_seconds", type="sync") == 0
    clock.advance(3600)  # the pdf job comes due, and has waited since then
    got = scrape(client, admin)
    assert value(got, "queuelog_oldest_pending_seconds", type="pdf") == 60
    assert value(got, "queuelog_oldest_pending_seconds", type="email") == 3690


def test_expired_leases_and_their_take_back(client, producer, worker, admin, clock):
    post(client, "/jobs", producer, type="sync")
    post(client, "/jobs/claim", worker, lease_seconds=60)
    before = scrape(client, admin)
    assert value(before, "queuelog_expired_leases", type="sync") == 0
    clock.advance(61)
    got = scrape(client, admin)
    assert value(got, "queuelog_expired_leases", type="sync") == 1
    assert value(got, "queuelog_jobs", status="running", type="sync") == 1
    post(client, "/jobs/claim", worker, types=["email"])  # takes the lease back
    after = scrape(client, admin)
    assert value(after, "queuelog_expired_leases", type="sync") == 0
    counted = ("queuelog_attempts_finished_total", {"type": "sync", "outcome": "lease_expired"})
    assert value(after, counted[0], **counted[1]) - value(got, counted[0], **counted[1]) == 1


def test_type_paused_reads_the_paused_types_table(client, store, admin, clock):
    with store.engine.begin() as conn:
        conn.execute(insert(paused_types).values(type="pdf", paused_at=clock(),
                                                 paused_by="root"))
    got = scrape(client, admin)
    assert value(got, "queuelog_type_paused", type="pdf") == 1
    assert value(got, "queuelog_type_paused", type="email") == 0


def test_counters_count_events_not_replays(client, producer, worker, admin):
    before = scrape(client, admin)
    for _ in range(2):
        post(client, "/jobs", producer, type="email", idempotency_key="once")
    post(client, "/jobs", producer, type="email")
    first = post(client, "/jobs/claim", worker).json
    post(client, f"/jobs/{first['id']}/complete", worker, attempt=1)
    second = post(client, "/jobs/claim", worker).json
    post(client, f"/jobs/{second['id']}/fail", worker, attempt=1, error="x")
    post(client, f"/jobs/{second['id']}/fail", worker, attempt=1, error="x")  # 409: no count
    after = scrape(client, admin)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)
    assert delta("queuelog_jobs_enqueued_total", type="email") == 2
    assert delta("queuelog_attempts_finished_total", type="email", outcome="completed") == 1
    assert delta("queuelog_attempts_finished_total", type="email", outcome="failed") == 1
    # Series exist before their first event, for every configured type and outcome.
    assert ("queuelog_attempts_finished_total",
            (("outcome", "lease_expired"), ("type", "pdf"))) in after


def change(before: Samples, after: Samples, name: str, **labels: str) -> float:
    """How much one series moved between two scrapes."""
    return value(after, name, **labels) - value(before, name, **labels)


def test_a_batch_enqueue_counts_its_new_jobs_per_type_not_its_replays(client, producer,
                                                                      admin):
    post(client, "/jobs/batch", producer, jobs=[{"type": "email", "idempotency_key": "k"}])
    before = scrape(client, admin)
    resp = post(client, "/jobs/batch", producer, jobs=[
        {"type": "email", "idempotency_key": "k"},  # a replay of the first batch's job
        {"type": "email"}, {"type": "pdf"}, {"type": "pdf"}, {"type": "pdf"}])
    assert resp.status_code == 201 and resp.json["replayed"] == [0]
    after = scrape(client, admin)
    enqueued = "queuelog_jobs_enqueued_total"
    assert change(before, after, enqueued, type="email") == 1
    assert change(before, after, enqueued, type="pdf") == 3
    assert change(before, after, enqueued, type="sync") == 0


def test_a_batch_complete_or_fail_counts_only_the_attempts_it_ended(client, admin, worker):
    post(client, "/jobs/batch", admin, jobs=[{"type": "email", "max_retries": 1}] * 3
         + [{"type": "pdf", "max_retries": 1}] * 3)
    held = post(client, "/jobs/claim", worker, max_jobs=6).json["jobs"]
    mails = [j for j in held if j["type"] == "email"]
    pdfs = [j for j in held if j["type"] == "pdf"]
    before = scrape(client, admin)
    done = post(client, "/jobs/complete", worker, jobs=[
        {"id": mails[0]["id"], "attempt": 1}, {"id": mails[1]["id"], "attempt": 1},
        {"id": mails[2]["id"], "attempt": 2}]).json["results"]  # stale attempt: 409
    assert [r["status"] for r in done] == [200, 200, 409]
    failed = post(client, "/jobs/fail", worker, jobs=[
        {"id": pdfs[0]["id"], "attempt": 1, "error": "x"},  # retried: back to pending
        {"id": pdfs[1]["id"], "attempt": 1, "error": "x", "retry": False},
        {"id": pdfs[2]["id"], "attempt": 2, "error": "x"}]).json["results"]  # 409
    assert [r["status"] for r in failed] == [200, 200, 409]
    assert [r.get("job_status") for r in failed[:2]] == ["pending", "failed"]
    after = scrape(client, admin)
    attempts = "queuelog_attempts_finished_total"
    assert change(before, after, attempts, type="email", outcome="completed") == 2
    assert change(before, after, attempts, type="pdf", outcome="failed") == 2
    for job_type, outcome in (("email", "failed"), ("pdf", "completed")):
        assert change(before, after, attempts, type=job_type, outcome=outcome) == 0


def test_request_histogram_labels_the_url_rule_never_an_id(client, producer, admin):
    job = post(client, "/jobs", producer, type="email").json
    client.get(f"/jobs/{job['id']}", headers=producer)
    client.get("/no/such/path/12345", headers=producer)
    client.open("/jobs", method="BREW", headers=producer)
    got = scrape(client, admin)
    routes = {dict(k[1]).get("route") for k in got
              if k[0] == "queuelog_http_request_duration_seconds_count"}
    assert {"/jobs", "/jobs/<job_id:job_id>", "unmatched"} <= routes
    assert not any(str(job["id"]) in r for r in routes if r != "unmatched")
    assert value(got, "queuelog_http_request_duration_seconds_count", method="GET",
                 route="/jobs/<job_id:job_id>", status="200") >= 1
    methods = {dict(k[1]).get("method") for k in got
               if k[0] == "queuelog_http_request_duration_seconds_count"}
    assert "BREW" not in methods and "other" in methods


def test_metrics_is_for_admin_and_metrics_keys(client, producer, worker, make_key):
    scraper = make_key("prom", "metrics")
    assert client.get("/metrics", headers=scraper).status_code == 200
    for headers in (producer, worker):
        problem(client.get("/metrics", headers=headers), 403)
    problem(client.get("/metrics"), 401)


def test_openmetrics_when_the_scraper_asks_for_it(client, admin):
    resp = client.get("/metrics", headers={**admin, "Accept": "application/openmetrics-text"})
    assert resp.status_code == 200
    assert resp.mimetype == "application/openmetrics-text"
    assert resp.get_data(as_text=True).rstrip().endswith("# EOF")


def test_a_missing_multiprocess_directory_is_named_at_start(tmp_path, monkeypatch):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="PROMETHEUS_MULTIPROC_DIR"):
        create_app({"TESTING": True, "DATABASE_URL": f"sqlite:///{tmp_path}/q.sqlite3",
                    "SECRET_KEY": "x", "BOOTSTRAP_ADMIN": False})


def per_process(folder: pathlib.Path, name: str, **labels: str) -> list[float]:
    """A counter's value in each worker's multiprocess files, read one process at a time."""
    out = []
    for path in sorted(folder.glob("counter_*.db")):
        single = folder.parent / f"one-{path.stem}"
        single.mkdir(exist_ok=True)
        link = single / path.name
        if not link.exists():
            link.symlink_to(path)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=str(single))
        out.append(sum(s.value for f in registry.collect() for s in f.samples
                       if s.name == name and all(s.labels.get(k) == v
                                                 for k, v in labels.items())))
    return out


@pytest.mark.slow
@SQLITE_ONLY  # the summing is prometheus_client's, not SQL
def test_gunicorn_workers_are_summed(db_url: str, tmp_path: pathlib.Path) -> None:
    """Counters live in each worker; any worker's scrape reports the sum over all of them,
    with no setting: the shipped gunicorn.conf.py makes the multiprocess directory."""
    keys = make_keys(db_url, {"producer": "producer", "prom": "metrics", "w": "worker"})
    assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ
    # TMPDIR only so the test can find the directory gunicorn.conf.py makes (mkdtemp).
    server = Server(db_url, str(tmp_path / "server.log"), workers=3, threads=2,
                    env={"TMPDIR": str(tmp_path)}).start()
    sent = 0
    try:
        [folder] = tmp_path.glob("queuelog-metrics-*")
        # Concurrent clients, a new connection per request: the workers share the accepts.
        lock = threading.Lock()

        def produce(n: int) -> None:
            nonlocal sent
            for _ in range(n):
                status, _ = request(server.port, "POST", "/jobs", {"type": "email"},
                                    keys["producer"])
                assert status == 201
                with lock:
                    sent += 1

        # Rounds until at least two workers took some (the kernel picks who accepts).
        per_worker: list[float] = []
        for _ in range(8):
            threads = [threading.Thread(target=produce, args=(6,)) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            per_worker = per_process(folder, "queuelog_jobs_enqueued_total", type="email")
            if sum(1 for v in per_worker if v) >= 2:
                break
        assert sent % 24 == 0 and sent >= 24  # every request answered 201
        assert sum(per_worker) == sent
        assert sum(1 for v in per_worker if v) >= 2, per_worker  # really several workers
        for _ in range(sent):  # the jobs' histograms: observed in whichever worker answered
            status, job = request(server.port, "POST", "/jobs/claim", None, keys["w"])
            assert status == 200
            status, _ = request(server.port, "POST", f"/jobs/{job['id']}/complete",
                                {"attempt": 1}, keys["w"])
            assert status == 200
        for _ in range(6):  # whichever worker answers, the same sums
            status, text = request(server.port, "GET", "/metrics", None, keys["prom"])
            assert status == 200
            got = parse(text)
            assert value(got, "queuelog_jobs_enqueued_total", type="email") == sent
            assert value(got, "queuelog_http_request_duration_seconds_count", method="POST",
                         route="/jobs", status="201") == sent
            assert value(got, "queuelog_jobs", status="completed", type="email") == sent
            assert value(got, "queuelog_job_wait_seconds_count", type="email") == sent
            assert value(got, "queuelog_job_run_seconds_count", type="email",
                         outcome="completed") == sent
    finally:
        server.stop()
    assert not folder.exists()  # on_exit removed the directory it made
    assert "PROMETHEUS_MULTIPROC_DIR is not set" not in (tmp_path / "server.log").read_text()


def test_a_gunicorn_worker_counting_alone_says_so() -> None:
    """Under gunicorn without a multiprocess directory (a plain install's command without
    our hooks) the start prints how to fix it; with the directory, or outside gunicorn,
    nothing."""
    from queuelog.server.metrics import per_worker_warning
    gunicorn = {"SERVER_SOFTWARE": "gunicorn/23.0.0"}
    warning = per_worker_warning(gunicorn)
    assert warning is not None and "-c python:queuelog.server.gunicorn_hooks" in warning
    assert per_worker_warning({}) is None  # queuelog run, a test client
    assert per_worker_warning({**gunicorn, "PROMETHEUS_MULTIPROC_DIR": "/somewhere"}) is None


# -- the jobs' run and wait histograms ------------------------------------------------------
RUN, WAIT = "queuelog_job_run_seconds", "queuelog_job_wait_seconds"


def test_run_time_is_claim_to_the_attempts_end_per_outcome(client, producer, worker, admin,
                                                            clock):
    before = scrape(client, admin)
    for _ in range(2):
        post(client, "/jobs", producer, type="email")
    first = post(client, "/jobs/claim", worker).json
    clock.advance(3)
    post(client, f"/jobs/{first['id']}/complete", worker, attempt=1)
    second = post(client, "/jobs/claim", worker).json
    clock.advance(40)
    post(client, f"/jobs/{second['id']}/fail", worker, attempt=1, error="x")  # retried later
    after = scrape(client, admin)
    done = {"type": "email", "outcome": "completed"}
    assert change(before, after, f"{RUN}_count", **done) == 1
    assert change(before, after, f"{RUN}_sum", **done) == 3
    assert change(before, after, f"{RUN}_bucket", **done, le="2.5") == 0
    assert change(before, after, f"{RUN}_bucket", **done, le="5.0") == 1
    assert change(before, after, f"{RUN}_sum", type="email", outcome="failed") == 40
    # Series exist before their first event, every outcome a running job can end with.
    for outcome in ("lease_expired", "cancelled"):
        assert (f"{RUN}_count", (("outcome", outcome), ("type", "pdf"))) in after


def test_a_batch_complete_observes_each_run(client, producer, worker, admin, clock):
    post(client, "/jobs/batch", producer, jobs=[{"type": "pdf"}] * 2)
    held = post(client, "/jobs/claim", worker, max_jobs=2).json["jobs"]
    clock.advance(7)
    before = scrape(client, admin)
    post(client, "/jobs/complete", worker, jobs=[{"id": j["id"], "attempt": 1} for j in held])
    after = scrape(client, admin)
    assert change(before, after, f"{RUN}_count", type="pdf", outcome="completed") == 2
    assert change(before, after, f"{RUN}_sum", type="pdf", outcome="completed") == 14


def test_wait_time_is_from_due_to_claim(client, producer, worker, admin, clock):
    before = scrape(client, admin)
    post(client, "/jobs", producer, type="sync", delay_seconds=10)
    clock.advance(25)  # due for the last 15 s
    assert post(client, "/jobs/claim", worker).status_code == 200
    post(client, "/jobs", producer, type="sync")
    assert post(client, "/jobs/claim", worker).status_code == 200  # claimed as it came
    assert post(client, "/jobs/claim", worker).status_code == 204  # nothing: no observation
    after = scrape(client, admin)
    assert change(before, after, f"{WAIT}_count", type="sync") == 2
    assert change(before, after, f"{WAIT}_sum", type="sync") == 15
    assert change(before, after, f"{WAIT}_bucket", type="sync", le="0.005") == 1
    assert (f"{WAIT}_count", (("type", "pdf"),)) in after  # zeros for every type


def test_a_lease_taken_back_and_a_running_cancel_observe_their_runs(client, producer, worker,
                                                                    admin, clock):
    before = scrape(client, admin)
    post(client, "/jobs", producer, type="pdf")
    cancelled = post(client, "/jobs/claim", worker, lease_seconds=600).json
    clock.advance(12)
    post(client, f"/jobs/{cancelled['id']}/cancel", admin)
    post(client, "/jobs", producer, type="pdf")
    post(client, "/jobs/claim", worker, lease_seconds=30)
    clock.advance(31)  # its lease runs out: the next claim takes it back
    assert post(client, "/jobs/claim", worker, types=["email"]).status_code == 204
    after = scrape(client, admin)
    assert change(before, after, f"{RUN}_count", type="pdf", outcome="cancelled") == 1
    assert change(before, after, f"{RUN}_sum", type="pdf", outcome="cancelled") == 12
    assert change(before, after, f"{RUN}_count", type="pdf", outcome="lease_expired") == 1
    assert change(before, after, f"{RUN}_sum", type="pdf", outcome="lease_expired") == 31
