"""Retention: ``queuelog purge`` and automatic purging of old finished jobs."""
from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import event, func, select, text

from helpers import add_job, enqueue, failing_statements, minute_rows
from queuelog import create_app
from queuelog.model.jobs import Status
from queuelog.server.retention import parse_duration
from queuelog.server.store.tables import job_attempts, jobs

HOUR = 3600
DAY = 86_400


def finish(client: Any, producer: dict[str, str], worker: dict[str, str], how: str,
           **body: Any) -> dict[str, Any]:
    """A job taken to ``how``: completed, failed or cancelled."""
    job = enqueue(client, producer, **body)
    if how == "cancelled":
        assert client.post(f"/jobs/{job['id']}/cancel", headers=producer).status_code == 200
        return job
    got = client.post("/jobs/claim", headers=worker).json
    assert got["id"] == job["id"]
    if how == "completed":
        resp = client.post(f"/jobs/{job['id']}/complete", json={"attempt": 1}, headers=worker)
    else:
        resp = client.post(f"/jobs/{job['id']}/fail",
                           json={"attempt": 1, "error": "x", "retry": False}, headers=worker)
    resp.close()
    assert resp.json["status"] == how
    return job


def ids(store: Any) -> set[int]:
    """Every job id in the table."""
    with store.engine.connect() as conn:
        return set(conn.execute(select(jobs.c.id)).scalars())


def history_rows(store: Any) -> int:
    """How many attempt rows exist."""
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(job_attempts)).scalar_one())


def purge(app: Any, *args: str) -> Any:
    """Run ``queuelog purge`` with ``args`` (the queuelog group pushes an app context)."""
    with app.app_context():
        return app.test_cli_runner().invoke(args=["purge", *args])


# -- queuelog purge ------------------------------------------------------------------
def test_purge_deletes_finished_jobs_older_than_the_duration(app, client, store, producer,
                                                             worker, clock):
    old = [finish(client, producer, worker, how)["id"]
           for how in ("completed", "failed", "cancelled")]
    clock.advance(8 * DAY)
    young = finish(client, producer, worker, "completed")["id"]
    waiting = enqueue(client, producer)["id"]
    running = enqueue(client, producer, priority="medium")["id"]
    assert client.post("/jobs/claim", headers=worker).json["id"] == running
    clock.advance(1 * DAY)  # young finished 1 day ago; pending/running are never purged
    assert history_rows(store) == 4
    result = purge(app, "--older-than", "7d")
    assert result.exit_code == 0, result.output
    assert "Deleted 3 job(s)." in result.output
    assert ids(store) == {young, waiting, running}
    assert history_rows(store) == 2  # the history of the purged jobs went with them
    assert set(old).isdisjoint(ids(store))


def test_purge_by_status(app, client, store, producer, worker, clock):
    done = finish(client, producer, worker, "completed")["id"]
    failed = finish(client, producer, worker, "failed")["id"]
    cancelled = finish(client, producer, worker, "cancelled")["id"]
    clock.advance(2 * HOUR)
    assert purge(app, "--older-than", "1h", "--status", "completed").exit_code == 0
    assert ids(store) == {failed, cancelled}
    result = purge(app, "--older-than", "1h", "--status", "failed", "--status", "cancelled")
    assert "Deleted 2 job(s)." in result.output and ids(store) == set()
    assert done not in ids(store)


@pytest.mark.parametrize("args", [["--older-than", "soon"], ["--older-than", "-1d"],
                                  ["--older-than", "7y"], [],
                                  ["--older-than", "1d", "--status", "running"],
                                  ["--older-than", "1d", "--status", "pending"]])
def test_purge_rejects_bad_arguments_and_deletes_nothing(app, client, store, producer, worker,
                                                         clock, args):
    job = finish(client, producer, worker, "completed")["id"]
    clock.advance(30 * DAY)
    result = purge(app, *args)
    assert result.exit_code == 2, result.output
    assert ids(store) == {job}


@pytest.mark.parametrize("args, would", [(["--older-than", "7d"], 3),
                                         (["--older-than", "7d", "--status", "failed"], 1),
                                         (["--older-than", "9d"], 0)])
def test_purge_dry_run_counts_and_deletes_nothing(app, client, store, producer, worker, clock,
                                                  args, would):
    for how in ("completed", "failed", "cancelled"):
        finish(client, producer, worker, how)
    clock.advance(8 * DAY)
    finish(client, producer, worker, "completed")  # too young
    enqueue(client, producer)  # pending: never purged
    before, history = ids(store), history_rows(store)
    result = purge(app, *args, "--dry-run")
    assert result.exit_code == 0, result.output
    assert f"Would delete {would} job(s); nothing deleted" in result.output
    assert ids(store) == before and history_rows(store) == history
    assert f"Deleted {would} job(s)." in purge(app, *args).output  # the count was right


@pytest.mark.parametrize("older_than", ["1m", "30m", "1mo", "2months"])
def test_purge_refuses_m_and_asks_minutes_or_months(app, client, store, producer, worker,
                                                    clock, older_than):
    job = finish(client, producer, worker, "completed")["id"]
    clock.advance(90 * DAY)
    result = purge(app, "--older-than", older_than)
    assert result.exit_code == 2, result.output
    assert "min for" in result.output and "months" in result.output, result.output
    assert ids(store) == {job}


def test_purge_is_idempotent(app, client, producer, worker, clock):
    finish(client, producer, worker, "completed")
    clock.advance(DAY)
    assert "Deleted 1 job(s)." in purge(app, "--older-than", "1h").output
    assert "Deleted 0 job(s)." in purge(app, "--older-than", "1h").output


def test_purge_works_in_bounded_batches(client, store, producer, worker, clock):
    for _ in range(5):
        finish(client, producer, worker, "completed")
    clock.advance(DAY)
    deletes: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE FROM JOBS"):
            deletes.append(statement)

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        assert store.purge(HOUR * 1_000_000, batch=2, max_batches=1) == 2
        assert len(ids(store)) == 3
        assert store.purge(HOUR * 1_000_000, batch=2) == 3  # 2 + 1, one transaction each
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
    assert len(deletes) == 3


def test_idempotency_key_is_reusable_after_its_job_is_purged(app, client, producer, worker,
                                                             clock):
    first = finish(client, producer, worker, "completed", idempotency_key="nightly-1")
    replay = client.post("/jobs", json={"type": "email", "idempotency_key": "nightly-1"},
                         headers=producer)
    assert replay.status_code == 200 and replay.json["id"] == first["id"]
    clock.advance(DAY)
    purge(app, "--older-than", "1h")
    again = client.post("/jobs", json={"type": "email", "idempotency_key": "nightly-1"},
                        headers=producer)
    assert again.status_code == 201 and again.json["id"] != first["id"]


def test_purged_job_is_gone_from_the_api(app, client, producer, worker, admin, clock):
    job = finish(client, producer, worker, "failed")
    clock.advance(DAY)
    purge(app, "--older-than", "1h")
    assert client.get(f"/jobs/{job['id']}", headers=admin).status_code == 404
    assert client.post(f"/jobs/{job['id']}/retry", headers=admin).status_code == 404


# -- durations -----------------------------------------------------------------------
@pytest.mark.parametrize("text, seconds", [("30s", 30), ("15min", 900), ("12h", 43_200),
                                           ("7d", 604_800), ("2w", 1_209_600), ("1min", 60),
                                           ("3600", 3600), (90, 90), (" 1d ", DAY)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "d", "1.5d", "-1d", "7y", "1 d", -5, True, None,
                                  "15m", "1M", "2mins", "1minute", "3hd", "1sec"])
def test_parse_duration_rejects(text):
    with pytest.raises((ValueError, TypeError)):
        parse_duration(text)


# -- automatic retention -------------------------------------------------------------
# Keep completed jobs an hour, failed ones a day, cancelled ones forever.
AUTO = {"RETENTION_COMPLETED": "1h", "RETENTION_FAILED": DAY,
        "RETENTION_INTERVAL_SECONDS": 60, "RETENTION_BATCH": 2}


@pytest.mark.parametrize("config", [AUTO])
def test_auto_retention_purges_one_batch_per_interval_after_writes(client, store, producer,
                                                                   worker, clock):
    done = [finish(client, producer, worker, "completed")["id"] for _ in range(3)]
    failed = finish(client, producer, worker, "failed")["id"]
    cancelled = finish(client, producer, worker, "cancelled")["id"]
    clock.advance(2 * HOUR)
    trigger = enqueue(client, producer)["id"]  # after this response: one batch of 2
    assert ids(store) == {done[2], failed, cancelled, trigger}
    second = enqueue(client, producer)["id"]  # within the interval: nothing more
    assert done[2] in ids(store)
    clock.advance(61)
    third = enqueue(client, producer)["id"]
    assert ids(store) == {failed, cancelled, trigger, second, third}
    clock.advance(DAY)
    enqueue(client, producer)
    assert failed not in ids(store) and cancelled in ids(store)  # cancelled: not configured


@pytest.mark.parametrize("config", [AUTO])
def test_auto_retention_never_runs_on_the_claim_path(client, store, producer, worker, clock):
    finish(client, producer, worker, "cancelled")  # its enqueue: the first round, empty
    job = finish(client, producer, worker, "completed")["id"]
    clock.advance(2 * HOUR)
    for _ in range(3):
        with client.post("/jobs/claim", json={"wait": 0}, headers=worker) as resp:
            assert resp.status_code == 204
    assert job in ids(store)


def post(client: Any, path: str, headers: dict[str, str], body: dict[str, Any]) -> Any:
    """POST and close the response, as a server does (retention runs at the close)."""
    with client.post(path, json=body, headers=headers) as resp:
        resp.get_data()
        return resp


@pytest.mark.parametrize("config", [AUTO])
@pytest.mark.parametrize("route", ["/jobs/batch", "/jobs/complete", "/jobs/fail"])
def test_auto_retention_runs_after_the_batch_routes(client, store, producer, worker, clock,
                                                    route):
    """Bug 3: enqueue_many plus ``queuelog work`` (batch answers) use only the batch routes."""
    made = post(client, "/jobs/batch", producer, {"jobs": [{"type": "email"}] * 3}).json["jobs"]
    old, last = [j["id"] for j in made[:2]], made[2]["id"]
    # The longest lease, so the last job is still held after the clock moves on.
    held = post(client, "/jobs/claim", worker, {"max_jobs": 3, "lease_seconds": 43_200})
    assert sorted(j["id"] for j in held.json["jobs"]) == sorted(old + [last])
    done = post(client, "/jobs/complete", worker,
                {"jobs": [{"id": i, "attempt": 1} for i in old]})
    assert [r["status"] for r in done.json["results"]] == [200, 200]
    clock.advance(2 * HOUR)  # the two completed jobs are now past RETENTION_COMPLETED
    bodies = {"/jobs/batch": {"jobs": [{"type": "email"}]},
              "/jobs/complete": {"jobs": [{"id": last, "attempt": 1}]},
              "/jobs/fail": {"jobs": [{"id": last, "attempt": 1, "error": "x", "retry": False}]}}
    resp = post(client, route, producer if route == "/jobs/batch" else worker, bodies[route])
    assert resp.status_code == (201 if route == "/jobs/batch" else 200)
    if route != "/jobs/batch":
        assert resp.json["results"][0]["status"] == 200  # the item took
    assert not set(old) & ids(store)
    assert last in ids(store)


def test_retention_is_off_by_default(tmp_path, clock):
    app = create_app({"TESTING": True, "DATABASE_URL": f"sqlite:///{tmp_path}/q.sqlite3",
                      "SECRET_KEY": "x", "BOOTSTRAP_ADMIN": False})
    try:
        assert app.extensions["queuelog.retention"].rules == {}
        assert app.extensions["queuelog.retention"].maybe_run() == 0
    finally:
        app.extensions["queuelog.store"].close()


@pytest.mark.parametrize("bad", [{"RETENTION_COMPLETED": "7 days"},
                                 {"RETENTION_FAILED": -1},
                                 {"RETENTION_BATCH": 0}])
def test_bad_retention_config_fails_at_start(tmp_path, bad):
    with pytest.raises(ValueError):
        create_app({"TESTING": True, "DATABASE_URL": f"sqlite:///{tmp_path}/q.sqlite3",
                    "SECRET_KEY": "x", "BOOTSTRAP_ADMIN": False, **bad})


def test_statuses_purged_are_only_finished_ones(store, clock):
    assert store.purge(0, [Status.PENDING, Status.RUNNING]) == 0


def test_purge_racing_an_admin_retry_never_deletes_the_retried_job(backend, client, store,
                                                                    producer, worker, clock):
    """PostgreSQL: a retry in flight holds the row; the purge skips it instead of deleting it."""
    if backend != "postgresql":
        pytest.skip("SQLite's write lock serializes the two: there is no interleaving")
    job = finish(client, producer, worker, "failed")["id"]
    clock.advance(DAY)
    outcome: dict[str, Any] = {}
    with store.engine.connect() as admin, store.engine.connect() as watcher:
        with admin.begin():  # the admin's retry, not yet committed
            admin.execute(text("UPDATE jobs SET status = 'pending', finished_at = NULL "
                               "WHERE id = :id"), {"id": job})
            thread = threading.Thread(
                target=lambda: outcome.update(deleted=store.purge(HOUR * 1_000_000)))
            thread.start()
            for _ in range(500):  # until the purge is done or waits on the retry's lock
                thread.join(timeout=0.01)
                waiting = watcher.execute(text(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()")).scalar_one()
                watcher.rollback()
                if not thread.is_alive() or waiting:
                    break
        thread.join(timeout=10)
    assert outcome == {"deleted": 0}
    assert job in ids(store)


def test_retention_during_an_outage_logs_one_line_not_a_traceback(tmp_path, clock, caplog):
    """A database that is gone is errors.py's incident to report; retention adds no traceback."""
    from queuelog.server.retention import Retention
    app = create_app({"TESTING": True, "DATABASE_URL": f"sqlite:///{tmp_path}/q.sqlite3",
                      "SECRET_KEY": "x", "BOOTSTRAP_ADMIN": False})
    store = app.extensions["queuelog.store"]
    retention = Retention(store, {Status.COMPLETED: 60}, interval=1, batch=10)
    with caplog.at_level("WARNING", logger="queuelog.server.retention"), \
            failing_statements(store.engine, "DELETE") as failed:
        assert retention.maybe_run() == 0
    assert failed  # the round's deletes met the outage
    records = [r for r in caplog.records if r.name == "queuelog.server.retention"]
    assert [r.levelname for r in records] == ["WARNING"] and records[0].exc_info is None
    store.close()


def delta_rows(store: Any) -> int:
    """Rows waiting in job_count_deltas (PostgreSQL's trigger-kept counts)."""
    with store.engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM job_count_deltas")).scalar_one())


@pytest.mark.parametrize("backend", [pytest.param("postgresql", marks=pytest.mark.postgresql)])
def test_the_round_folds_the_count_deltas_that_nobody_reads(client, store, producer, clock):
    """Issue 15: deltas were folded only by a read of the counts, so unscraped, they grew."""
    add_job(store), add_job(store)  # outside a request: no round, two deltas
    assert delta_rows(store) == 2
    enqueue(client, producer)  # retention is off, yet the round runs after this response
    assert delta_rows(store) == 0
    enqueue(client, producer)  # within the interval: its delta waits for the next round
    assert delta_rows(store) == 1
    clock.advance(61)
    enqueue(client, producer)
    assert delta_rows(store) == 0
    assert store.job_counts() == {("pending", "email"): 5}


def test_the_round_prunes_the_rollups_old_minutes_with_retention_off(client, store, producer,
                                                                     worker, clock):
    """The per-minute rollup (migration 0015) grows with every minute attempts end in: the
    round prunes it whether or not a retention duration is set, on every backend."""
    finish(client, producer, worker, "completed")
    assert len(minute_rows(store)) == 1
    clock.advance(2 * HOUR + 120)  # past the two hours kept, and past the round's interval
    enqueue(client, producer)  # retention is off, yet the round runs after this response
    assert minute_rows(store) == {}
