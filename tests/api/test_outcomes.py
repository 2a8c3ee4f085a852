"""Outcomes: waiting for a job's finish, cancelling a running job, progress, and a worker's
loop in one request (``next`` on complete and fail). Every test runs on both backends.

Waits are woken, never found by the safety net: the net's look is set to a minute here,
so a wake-up that does not come fails the test by its timeout, not by a slow pass.
"""
from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from helpers import claim, enqueue, problem, until

from queuelog.server.longpoll import LongPolls

SLOTS = 2


@pytest.fixture
def config() -> dict[str, Any]:
    """Two long-poll slots; the safety net out of the way; one type limited to one at once."""
    return {"LONG_POLL_SLOTS": SLOTS, "LONG_POLL_LOOK_SECONDS": 60,
            "JOB_TYPES": {"email": {}, "pdf": {}, "sync": {"concurrency": 1}}}


def _waiting(app: Any, job_id: int, headers: dict[str, str], wait: float,
             answers: list[Any]) -> threading.Thread:
    """``GET /jobs/{id}?wait=`` in a thread of its own; its answer lands in ``answers``."""
    def get() -> None:
        answers.append(app.test_client().get(f"/jobs/{job_id}?wait={wait}", headers=headers))
    thread = threading.Thread(target=get, daemon=True)
    thread.start()
    return thread


# -- waiting for a job --------------------------------------------------------------------
@pytest.mark.parametrize("finish", ["complete", "fail", "cancel"])
def test_a_wait_is_answered_when_the_job_finishes(app, client, producer, worker, finish):
    polls: LongPolls = app.extensions["queuelog.longpoll"]
    job = enqueue(client, producer)
    assert claim(client, worker).json["id"] == job["id"]
    answers: list[Any] = []
    began = time.monotonic()
    thread = _waiting(app, job["id"], producer, 20, answers)
    until(lambda: polls.waiting == 1)
    assert answers == []  # still waiting: the job runs
    if finish == "complete":
        client.post(f"/jobs/{job['id']}/complete", json={"attempt": 1, "result": {"n": 7}},
                    headers=worker)
    elif finish == "fail":
        client.post(f"/jobs/{job['id']}/fail",
                    json={"attempt": 1, "error": "boom", "retry": False}, headers=worker)
    else:
        client.post(f"/jobs/{job['id']}/cancel", headers=producer)
    thread.join(10)
    assert time.monotonic() - began < 10  # woken: not its 20 s, nor the minute's look
    (got,) = answers
    assert got.status_code == 200 and "Retry-After" not in got.headers
    want = {"complete": "completed", "fail": "failed", "cancel": "cancelled"}[finish]
    assert got.json["status"] == want and got.json["id"] == job["id"]
    if finish == "complete":
        assert got.json["result"] == {"n": 7}
    assert polls.waiting == 0  # the slot is given back


def test_a_retried_fail_is_not_a_finish(app, client, producer, worker):
    """A fail back to pending does not end the wait; it runs out and shows the job then."""
    job = enqueue(client, producer)
    claim(client, worker)
    answers: list[Any] = []
    thread = _waiting(app, job["id"], producer, 0.5, answers)
    until(lambda: app.extensions["queuelog.longpoll"].waiting == 1)
    client.post(f"/jobs/{job['id']}/fail", json={"attempt": 1, "error": "again"},
                headers=worker)
    thread.join(10)
    assert answers[0].status_code == 200 and answers[0].json["status"] == "pending"


def test_a_finished_job_or_no_wait_answers_at_once(client, producer, worker):
    job = enqueue(client, producer)
    began = time.monotonic()
    assert client.get(f"/jobs/{job['id']}?wait=0", headers=producer).json["status"] == "pending"
    claim(client, worker)
    client.post(f"/jobs/{job['id']}/complete", json={"attempt": 1}, headers=worker)
    done = client.get(f"/jobs/{job['id']}?wait=30", headers=producer)
    assert done.json["status"] == "completed" and done.json["attempts"]
    assert time.monotonic() - began < 5


def test_a_wait_runs_out_and_shows_the_job_as_it_is(client, producer):
    job = enqueue(client, producer)
    began = time.monotonic()
    got = client.get(f"/jobs/{job['id']}?wait=0.3", headers=producer)
    assert 0.3 <= time.monotonic() - began < 5
    assert got.status_code == 200 and got.json["status"] == "pending"


def test_waits_share_the_long_poll_slots(app, client, producer, worker):
    """Beyond the slots (claims and waits alike) a wait answers at once with Retry-After."""
    polls: LongPolls = app.extensions["queuelog.longpoll"]
    job = enqueue(client, producer)
    answers: list[Any] = []
    threads = [_waiting(app, job["id"], producer, 20, answers)]
    threads.append(threading.Thread(target=lambda: answers.append(
        app.test_client().post("/jobs/claim", json={"wait": 20, "types": ["pdf"]},
                               headers=worker)), daemon=True))
    threads[-1].start()
    until(lambda: polls.waiting == SLOTS)
    began = time.monotonic()
    extra = client.get(f"/jobs/{job['id']}?wait=20", headers=producer)
    assert time.monotonic() - began < 5
    assert extra.status_code == 200 and extra.headers["Retry-After"] == "1"
    assert extra.json["status"] == "pending"
    client.post(f"/jobs/{job['id']}/cancel", headers=producer)  # ends the wait
    enqueue(client, producer, "pdf")                            # and the claim
    for thread in threads:
        thread.join(10)
    assert sorted(a.status_code for a in answers) == [200, 200]


def test_a_wait_sees_only_what_its_caller_may_read(client, producer, make_key):
    job = enqueue(client, producer)
    other = make_key("shop", "producer")
    problem(client.get(f"/jobs/{job['id']}?wait=1", headers=other), 404)
    problem(client.get("/jobs/999?wait=1", headers=producer), 404)


@pytest.mark.parametrize("wait", ["31", "-1", "abc", "nan", "inf", "1e400", ""])
def test_a_bad_wait_is_a_422(client, producer, wait):
    job = enqueue(client, producer)
    body = problem(client.get(f"/jobs/{job['id']}?wait={wait}", headers=producer), 422)
    assert body["errors"][0]["field"] == "wait"


def test_a_key_revoked_while_it_waits_learns_nothing_new(app, client, producer, worker, store):
    job = enqueue(client, producer)
    claim(client, worker)
    answers: list[Any] = []
    thread = _waiting(app, job["id"], producer, 20, answers)
    until(lambda: app.extensions["queuelog.longpoll"].waiting == 1)
    store.accounts.revoke_key("billing")
    client.post(f"/jobs/{job['id']}/complete", json={"attempt": 1, "result": {"secret": 1}},
                headers=worker)
    thread.join(10)
    assert answers[0].json["status"] == "running" and answers[0].json["result"] is None


# -- cancelling a running job ---------------------------------------------------------------
@pytest.mark.parametrize("who", ["producer", "admin"])
def test_a_running_job_is_cancelled_at_once_and_its_holder_fenced(client, producer, worker,
                                                                 admin, who):
    job = enqueue(client, producer)
    claim(client, worker)
    got = client.post(f"/jobs/{job['id']}/cancel",
                      headers=producer if who == "producer" else admin)
    assert got.status_code == 200 and got.json["status"] == "cancelled"
    assert got.json["lease_expires_at"] is None and got.json["finished_at"] is not None
    before = client.get(f"/jobs/{job['id']}", headers=admin).json
    assert [a["outcome"] for a in before["attempts"]] == ["cancelled"]
    assert before["attempts"][0]["finished_at"] == before["finished_at"]
    for verb, body in (("heartbeat", {}), ("complete", {"result": {"x": 1}}),
                       ("fail", {"error": "e"})):
        refused = problem(client.post(f"/jobs/{job['id']}/{verb}",
                                      json={"attempt": 1, **body}, headers=worker), 409)
        assert refused["type"].endswith("cancelled")
    assert client.get(f"/jobs/{job['id']}", headers=admin).json == before  # nothing changed
    events = client.get("/audit?action=job.cancel", headers=admin).json["events"]
    assert [e["target"] for e in events] == ([str(job["id"])] if who == "admin" else [])


def test_cancelling_a_running_job_frees_its_concurrency_slot(client, producer, worker):
    first = enqueue(client, producer, "sync")
    second = enqueue(client, producer, "sync")
    assert claim(client, worker).json["id"] == first["id"]
    assert claim(client, worker).status_code == 204  # sync runs one at a time
    client.post(f"/jobs/{first['id']}/cancel", headers=producer)
    assert claim(client, worker).json["id"] == second["id"]


def test_only_its_producer_or_an_admin_cancels_a_running_job(client, producer, worker,
                                                             make_key):
    job = enqueue(client, producer)
    claim(client, worker)
    problem(client.post(f"/jobs/{job['id']}/cancel", headers=make_key("shop", "producer")), 404)
    problem(client.post(f"/jobs/{job['id']}/cancel", headers=worker), 403)
    assert client.get(f"/jobs/{job['id']}", headers=producer).json["status"] == "running"


def test_bulk_cancel_still_leaves_running_jobs_alone(client, producer, worker, admin):
    running = enqueue(client, producer)
    pending = enqueue(client, producer)
    claim(client, worker)
    assert client.post("/jobs/cancel", json={"ids": [running["id"], pending["id"]]},
                       headers=admin).json == {"count": 1}
    assert client.get(f"/jobs/{running['id']}", headers=admin).json["status"] == "running"


# -- progress ----------------------------------------------------------------------------------
def test_progress_is_stored_shown_and_kept(client, producer, worker):
    job = enqueue(client, producer)
    claim(client, worker)
    assert client.get(f"/jobs/{job['id']}", headers=producer).json["progress"] is None
    beat = client.post(f"/jobs/{job['id']}/heartbeat",
                       json={"attempt": 1, "progress": {"percent": 40, "step": "resize"}},
                       headers=worker)
    assert beat.status_code == 200 and beat.json["progress"] == {"percent": 40,
                                                                "step": "resize"}
    client.post(f"/jobs/{job['id']}/heartbeat", json={"attempt": 1}, headers=worker)
    assert client.get(f"/jobs/{job['id']}", headers=producer).json["progress"]["percent"] == 40
    client.post(f"/jobs/{job['id']}/complete", json={"attempt": 1}, headers=worker)
    assert client.get(f"/jobs/{job['id']}", headers=producer).json["progress"]["percent"] == 40


@pytest.mark.parametrize("progress", [{"pad": "x" * 1020}, [1, 2], "half", 50])
def test_bad_progress_is_a_422_and_changes_nothing(client, producer, worker, admin, progress):
    job = enqueue(client, producer)
    claim(client, worker)
    before = client.get(f"/jobs/{job['id']}", headers=admin).json
    body = problem(client.post(f"/jobs/{job['id']}/heartbeat",
                               json={"attempt": 1, "progress": progress}, headers=worker), 422)
    assert body["errors"][0]["field"] == "progress"
    assert client.get(f"/jobs/{job['id']}", headers=admin).json == before


def test_progress_of_1_kib_is_taken(client, producer, worker):
    job = enqueue(client, producer)
    claim(client, worker)
    progress = {"pad": "x" * (1024 - len('{"pad":""}'))}
    assert client.post(f"/jobs/{job['id']}/heartbeat", json={"attempt": 1, "progress": progress},
                       headers=worker).status_code == 200


# -- a worker's loop in one request ----------------------------------------------------------
@pytest.mark.parametrize("verb", ["complete", "fail"])
def test_a_finish_with_next_claims_the_next_job(client, producer, worker, verb):
    first, second = enqueue(client, producer), enqueue(client, producer, "pdf")
    claim(client, worker)
    body = {"attempt": 1, "next": {"types": ["pdf"], "lease_seconds": 60}}
    if verb == "fail":
        body.update(error="boom", retry=False)
    got = client.post(f"/jobs/{first['id']}/{verb}", json=body, headers=worker)
    assert got.status_code == 200 and set(got.json) == {"job", "next"}
    assert got.json["job"]["id"] == first["id"]
    assert got.json["job"]["status"] == ("completed" if verb == "complete" else "failed")
    nxt = got.json["next"]
    assert (nxt["id"], nxt["status"], nxt["attempt"], nxt["worker_id"]) == (
        second["id"], "running", 1, "mailer-1")
    # Nothing more due: next is null (and {} asks with the defaults).
    done = client.post(f"/jobs/{second['id']}/complete", json={"attempt": 1, "next": {}},
                       headers=worker)
    assert done.json["job"]["status"] == "completed" and done.json["next"] is None


def test_a_refused_finish_claims_nothing(client, producer, worker, admin):
    job = enqueue(client, producer)
    waiting = enqueue(client, producer)
    claim(client, worker)
    stale = problem(client.post(f"/jobs/{job['id']}/complete",
                                json={"attempt": 2, "next": {}}, headers=worker), 409)
    assert stale["type"].endswith("stale-attempt")
    assert client.get(f"/jobs/{waiting['id']}", headers=admin).json["status"] == "pending"


def test_next_of_types_outside_the_key_is_a_403_before_the_finish(client, producer, make_key,
                                                                   admin):
    mailer = make_key("mailer-2", "worker", types=["email"])
    job = enqueue(client, producer)
    claim(client, mailer)
    problem(client.post(f"/jobs/{job['id']}/complete",
                        json={"attempt": 1, "next": {"types": ["pdf"]}}, headers=mailer), 403)
    assert client.get(f"/jobs/{job['id']}", headers=admin).json["status"] == "running"


@pytest.mark.parametrize("bad", [{"max_jobs": 2}, {"wait": 31}, {"types": []}, [], "x"])
def test_a_bad_next_is_a_422_and_finishes_nothing(client, producer, worker, admin, bad):
    job = enqueue(client, producer)
    claim(client, worker)
    problem(client.post(f"/jobs/{job['id']}/complete", json={"attempt": 1, "next": bad},
                        headers=worker), 422)
    assert client.get(f"/jobs/{job['id']}", headers=admin).json["status"] == "running"


def test_next_with_wait_waits_for_a_job_after_the_finish(app, client, producer, worker):
    job = enqueue(client, producer)
    claim(client, worker)
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(app.test_client().post(
        f"/jobs/{job['id']}/complete", json={"attempt": 1, "next": {"wait": 20}},
        headers=worker)), daemon=True)
    thread.start()
    until(lambda: app.extensions["queuelog.longpoll"].waiting == 1)
    # The finish committed before the claim began to wait: it is visible now.
    assert client.get(f"/jobs/{job['id']}", headers=producer).json["status"] == "completed"
    later = enqueue(client, producer)
    thread.join(10)
    assert answers[0].json["next"]["id"] == later["id"]
