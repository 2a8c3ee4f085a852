"""Leases: how long a claim holds a job, heartbeats, take-back on expiry, fencing, long polls."""
from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import text

from helpers import claim, enqueue, sent_statements
from queuelog import create_app
from queuelog.server.longpoll import Wakeup
from queuelog.model.problems import QueuelogError
from queuelog.model.jobs import isoformat
from queuelog.server.store import NewJob

LEASE = 60  # LEASE_SECONDS in these tests; pdf and sync set their own
# The claim statement's text on both backends: each claim try sends it once.
CLAIM = "attempt=(jobs.attempt + "


@pytest.fixture
def config() -> dict[str, Any]:
    """Types with their own leases, and a default one that differs from both."""
    return {"LEASE_SECONDS": LEASE, "JOB_TYPES": {"email": {}, "pdf": {"lease_seconds": 900},
                                                  "sync": {"lease_seconds": 30}}}


@pytest.fixture
def other(make_key: Any) -> dict[str, str]:
    """A second worker, mailer-2."""
    return make_key("mailer-2", "worker")


def later(clock: Any, seconds: float) -> str:
    """The fake clock's now plus ``seconds``, as the API writes it."""
    return isoformat(clock.now + int(seconds * 1_000_000))  # type: ignore[return-value]


# -- how long a lease is -------------------------------------------------------------
def test_lease_from_the_claim_body(client, producer, worker, clock):
    enqueue(client, producer, type="pdf")
    got = claim(client, worker, lease_seconds=120).json
    assert got["lease_expires_at"] == later(clock, 120)
    assert got["claimed_at"] == later(clock, 0)


@pytest.mark.parametrize("job_type, seconds", [("pdf", 900), ("sync", 30), ("email", LEASE)])
def test_lease_defaults_to_the_claimed_jobs_type_else_lease_seconds(
        client, producer, worker, clock, job_type, seconds):
    # The claim names no type, so only the claimed job can decide: not the longest of all.
    enqueue(client, producer, type=job_type)
    assert claim(client, worker).json["lease_expires_at"] == later(clock, seconds)


@pytest.mark.parametrize("value", [0, 0.5, 43_201, -1, "60", True, None, [60]])
def test_lease_seconds_out_of_bounds_is_422_and_claims_nothing(client, producer, worker,
                                                               admin, value):
    job = enqueue(client, producer)
    resp = claim(client, worker, lease_seconds=value)
    if value is None:  # null means "not given"
        assert resp.status_code == 200
        return
    assert resp.status_code == 422
    assert resp.json["errors"][0]["field"] == "lease_seconds"
    assert client.get(f"/jobs/{job['id']}", headers=admin).json["status"] == "pending"


@pytest.mark.parametrize("value", [1, 43_200])
def test_lease_seconds_bounds_are_inclusive(client, producer, worker, clock, value):
    enqueue(client, producer)
    assert claim(client, worker, lease_seconds=value).json["lease_expires_at"] == \
        later(clock, value)


# -- heartbeats ----------------------------------------------------------------------
def test_heartbeat_extends_the_lease_from_now(client, producer, worker, clock):
    job = enqueue(client, producer, type="pdf")
    claim(client, worker)
    clock.advance(800)
    beat = client.post(f"/jobs/{job['id']}/heartbeat", json={"attempt": 1}, headers=worker)
    assert beat.status_code == 200
    assert beat.json["lease_expires_at"] == later(clock, 900)  # the type's lease again
    longer = client.post(f"/jobs/{job['id']}/heartbeat",
                         json={"attempt": 1, "lease_seconds": 3600}, headers=worker)
    assert longer.json["lease_expires_at"] == later(clock, 3600)
    clock.advance(3000)  # past the first lease, within the extended one
    assert claim(client, worker).status_code == 204
    assert client.get(f"/jobs/{job['id']}", headers=worker).json["status"] == "running"


def test_a_heartbeat_without_a_lease_keeps_the_one_the_job_holds(client, producer, worker,
                                                                  clock):
    """A worker that claimed for 30 s keeps 30 s leases by heartbeating (not the type's
    900): if it dies, its job comes back within 30 s, as it asked. A heartbeat that names
    a lease sets the one the next keep."""
    job = enqueue(client, producer, type="pdf")
    assert claim(client, worker, lease_seconds=30).json["lease_expires_at"] == later(clock, 30)

    def beat(**body: Any) -> str:
        resp = client.post(f"/jobs/{job['id']}/heartbeat", json={"attempt": 1, **body},
                           headers=worker)
        assert resp.status_code == 200
        return resp.json["lease_expires_at"]

    for _ in range(3):
        clock.advance(20)
        assert beat() == later(clock, 30)
    clock.advance(20)
    assert beat(lease_seconds=120, progress={"done": 1}) == later(clock, 120)
    clock.advance(60)
    assert beat() == later(clock, 120)
    clock.advance(119)
    claim(client, worker)  # within the held lease: still the worker's
    assert client.get(f"/jobs/{job['id']}", headers=worker).json["status"] == "running"
    clock.advance(2)  # the held lease ran out: taken back by the next claim
    claim(client, worker)
    seen = client.get(f"/jobs/{job['id']}", headers=worker).json
    assert seen["status"] == "pending" and seen["attempts"][-1]["outcome"] == "lease_expired"


def test_heartbeat_lease_bounds_are_422(client, producer, worker):
    job = enqueue(client, producer)
    claim(client, worker)
    for value in (0, 43_201):
        resp = client.post(f"/jobs/{job['id']}/heartbeat",
                           json={"attempt": 1, "lease_seconds": value}, headers=worker)
        assert resp.status_code == 422


# -- expiry and take-back --------------------------------------------------------------
def test_expired_lease_is_taken_back_by_the_next_claim_as_a_failed_attempt(
        client, producer, worker, other, admin, clock):
    job = enqueue(client, producer)
    claim(client, worker, lease_seconds=10)
    clock.advance(10)
    assert claim(client, other).status_code == 204  # exactly at the end: still held
    clock.advance(0.001)
    assert claim(client, other).status_code == 204  # taken back, but backing off first
    seen = client.get(f"/jobs/{job['id']}", headers=admin).json
    assert seen["status"] == "pending" and seen["retry_count"] == 1
    assert seen["error"] == "lease expired" and seen["lease_expires_at"] is None
    assert seen["run_at"] > later(clock, 0)  # backoff: never immediate
    assert [(a["outcome"], a["error"]) for a in seen["attempts"]] == \
        [("lease_expired", "lease expired")]
    clock.advance(2)  # RETRY_BACKOFF_SECONDS: the first backoff is at most 2 s
    again = claim(client, other).json
    assert (again["id"], again["attempt"], again["worker_id"]) == (job["id"], 2, "mailer-2")


def test_expired_lease_without_retries_left_fails_the_job(client, producer, worker, admin,
                                                          clock):
    job = enqueue(client, producer, max_retries=0)
    claim(client, worker, lease_seconds=5)
    clock.advance(6)
    claim(client, worker)
    seen = client.get(f"/jobs/{job['id']}", headers=admin).json
    assert seen["status"] == "failed" and seen["finished_at"] == later(clock, 0)
    assert seen["attempts"][0]["outcome"] == "lease_expired"


@pytest.mark.parametrize("verb, body", [("heartbeat", {}), ("complete", {"result": {"a": 1}}),
                                        ("fail", {"error": "late"})])
def test_stale_holder_is_refused_after_take_back_and_changes_nothing(
        client, producer, worker, other, admin, clock, verb, body):
    job = enqueue(client, producer)
    claim(client, worker, lease_seconds=5)
    clock.advance(6)
    claim(client, other)  # takes the lease back (the job backs off)
    before = client.get(f"/jobs/{job['id']}", headers=admin).json
    late = client.post(f"/jobs/{job['id']}/{verb}", json={"attempt": 1, **body}, headers=worker)
    assert late.status_code == 409
    assert client.get(f"/jobs/{job['id']}", headers=admin).json == before
    clock.advance(3)
    assert claim(client, other).json["attempt"] == 2  # now the other worker holds it
    before = client.get(f"/jobs/{job['id']}", headers=admin).json
    for attempt in (1, 2):  # neither its old attempt nor the new one is the stale worker's
        late = client.post(f"/jobs/{job['id']}/{verb}", json={"attempt": attempt, **body},
                           headers=worker)
        assert late.status_code == 409
    assert client.get(f"/jobs/{job['id']}", headers=admin).json == before


@pytest.mark.parametrize("verb", ["heartbeat", "complete", "fail"])
def test_same_identity_reclaiming_fences_its_own_stale_attempt(client, producer, worker, admin,
                                                              clock, verb):
    # Two processes of one worker key share an identity: only the attempt tells them apart.
    job = enqueue(client, producer)
    claim(client, worker, lease_seconds=5)
    clock.advance(6)
    claim(client, worker)
    clock.advance(2)
    assert claim(client, worker).json["attempt"] == 2
    before = client.get(f"/jobs/{job['id']}", headers=admin).json
    late = client.post(f"/jobs/{job['id']}/{verb}", json={"attempt": 1, "error": "late"}
                       if verb == "fail" else {"attempt": 1}, headers=worker)
    assert late.status_code == 409
    assert late.json["type"].endswith("stale-attempt")
    assert client.get(f"/jobs/{job['id']}", headers=admin).json == before


def test_holder_may_still_finish_after_expiry_until_taken_back(client, producer, worker,
                                                               admin, clock):
    job = enqueue(client, producer)
    claim(client, worker, lease_seconds=5)
    clock.advance(100)  # expired, but nobody claimed since
    done = client.post(f"/jobs/{job['id']}/complete", json={"attempt": 1}, headers=worker)
    assert done.status_code == 200 and done.json["status"] == "completed"
    assert [a["outcome"] for a in client.get(f"/jobs/{job['id']}",
                                             headers=admin).json["attempts"]] == ["completed"]


def test_heartbeat_after_expiry_revives_the_lease_before_take_back(client, producer, worker,
                                                                   other, clock):
    job = enqueue(client, producer)
    claim(client, worker, lease_seconds=5)
    clock.advance(100)
    beat = client.post(f"/jobs/{job['id']}/heartbeat", json={"attempt": 1}, headers=worker)
    assert beat.status_code == 200
    assert claim(client, other).status_code == 204
    assert client.get(f"/jobs/{job['id']}", headers=worker).json["status"] == "running"


def test_worker_death_history_shows_both_attempts(client, producer, worker, other, admin,
                                                  clock):
    job = enqueue(client, producer)
    assert claim(client, worker, lease_seconds=30).json["attempt"] == 1
    started = later(clock, 0)
    clock.advance(31)  # mailer-1 died: no heartbeat, no answer
    assert claim(client, other).status_code == 204
    expired_at = later(clock, 0)
    clock.advance(2)
    assert claim(client, other).json["attempt"] == 2
    done = client.post(f"/jobs/{job['id']}/complete", json={"attempt": 2}, headers=other)
    assert done.status_code == 200
    late = client.post(f"/jobs/{job['id']}/complete", json={"attempt": 1}, headers=worker)
    assert late.status_code == 409
    attempts = client.get(f"/jobs/{job['id']}", headers=admin).json["attempts"]
    assert attempts == [
        {"attempt": 1, "worker_id": "mailer-1", "started_at": started,
         "finished_at": expired_at, "outcome": "lease_expired", "error": "lease expired"},
        {"attempt": 2, "worker_id": "mailer-2", "started_at": later(clock, 0),
         "finished_at": later(clock, 0), "outcome": "completed", "error": None}]
    # A non-admin reader sees the history without error text (V-10).
    assert all("error" not in a for a in client.get(
        f"/jobs/{job['id']}", headers=other).json["attempts"])


# -- long poll -----------------------------------------------------------------------
@pytest.mark.parametrize("config", [{"LONG_POLL_LOOK_SECONDS": 60}])
def test_long_poll_returns_as_soon_as_a_job_is_enqueued(app, client, producer, worker, store):
    # The poll's own looks come a minute apart here: only the enqueue's wake-up can end the
    # wait early, and it does so with exactly one more claim try.
    polls = app.extensions["queuelog.longpoll"]
    answer: dict[str, Any] = {}

    def poll() -> None:
        answer["resp"] = app.test_client().post("/jobs/claim", json={"wait": 30},
                                                headers=worker)

    with sent_statements(store.engine, CLAIM) as tries:
        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while polls.waiting == 0 and time.monotonic() < deadline:
            time.sleep(0.01)  # until the poll has found nothing and parked
        job = enqueue(client, producer)
        thread.join(timeout=10)
        woken = not thread.is_alive()
        polls.stop()  # ends the poll if the wake-up never came
        thread.join(timeout=10)
    assert woken, "the enqueue did not wake the waiting claim"
    assert answer["resp"].status_code == 200 and answer["resp"].json["id"] == job["id"]
    assert len(tries) == 2  # the try that found nothing, and the one the wake-up made


def test_long_poll_answers_204_at_the_deadline_without_spinning(app, client, worker, store):
    began = time.monotonic()
    with sent_statements(store.engine, CLAIM) as tries:
        resp = client.post("/jobs/claim", json={"wait": 1.5}, headers=worker)
    took = time.monotonic() - began
    assert resp.status_code == 204 and resp.data == b""
    assert 1.5 <= took < 5  # the deadline, not the 30 s maximum; slack for a busy CI box
    assert 2 <= len(tries) <= 10  # backs off between tries: no busy loop


def test_a_wake_up_between_the_claim_and_the_sleep_is_not_lost():
    bell = Wakeup()
    seen = bell.count       # the poll notes the count, claims, finds nothing...
    bell.ring()             # ...an enqueue commits and rings before the poll sleeps...
    began = time.monotonic()
    assert bell.wait_after(seen, 5)  # ...so it does not sleep at all
    assert time.monotonic() - began < 0.5
    assert not bell.wait_after(bell.count, 0.01)  # nothing new: it sleeps the timeout


@pytest.mark.parametrize("value", [-0.1, 30.001, 31, "5", False, [1]])
def test_wait_out_of_bounds_is_422(client, worker, value):
    resp = client.post("/jobs/claim", json={"wait": value}, headers=worker)
    assert resp.status_code == 422 and resp.json["errors"][0]["field"] == "wait"


@pytest.mark.parametrize("value", [0, 30])
def test_wait_bounds_are_inclusive(client, producer, worker, value):
    enqueue(client, producer)  # due now: even wait=30 answers at once
    began = time.monotonic()
    assert client.post("/jobs/claim", json={"wait": value}, headers=worker).status_code == 200
    assert time.monotonic() - began < 2


# -- races ---------------------------------------------------------------------------
def test_fail_racing_a_take_back_is_refused_not_500(backend, store):
    """PostgreSQL: the holder's fail blocks on a take-back's row lock, then matches nothing."""
    if backend != "postgresql":
        pytest.skip("SQLite's write lock serializes the two: there is no interleaving")
    job, _ = store.enqueue(NewJob(producer="p", type="email", payload_json="{}", priority=0,
                                  max_retries=3))
    store.claim("mailer-1", lease_seconds=5)
    outcome: dict[str, Any] = {}

    def fail() -> None:
        try:
            outcome["job"] = store.fail(job.id, "mailer-1", 1, "boom")
        except Exception as exc:  # noqa: BLE001 - the test inspects what it was
            outcome["error"] = exc

    with store.engine.connect() as taker, store.engine.connect() as watcher:
        with taker.begin():
            taker.execute(text("SELECT id FROM jobs WHERE id = :id FOR UPDATE"), {"id": job.id})
            thread = threading.Thread(target=fail)
            thread.start()
            for _ in range(500):  # until the fail's UPDATE waits on our row lock
                if watcher.execute(text(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND datname = current_database()")).scalar_one():
                    break
                watcher.rollback()
                time.sleep(0.01)
            taker.execute(text("UPDATE jobs SET status = 'pending', lease_expires_at = NULL "
                               "WHERE id = :id"), {"id": job.id})
        thread.join(timeout=10)
    assert isinstance(outcome.get("error"), QueuelogError), outcome
    assert outcome["error"].status == 409


@pytest.mark.parametrize("lease", [0, -5, 43_201, "300", True])
def test_a_type_lease_out_of_bounds_is_refused_at_start(tmp_path, lease):
    with pytest.raises(ValueError):
        create_app({"TESTING": True, "DATABASE_URL": f"sqlite:///{tmp_path}/q.sqlite3",
                    "SECRET_KEY": "x", "BOOTSTRAP_ADMIN": False,
                    "JOB_TYPES": {"email": {"lease_seconds": lease}}})
