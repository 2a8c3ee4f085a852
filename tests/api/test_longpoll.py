"""Long polls: the per-process slots, a key revoked while its claim waits, and shutdown."""
from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Iterator

import pytest
from helpers import enqueue, until

from queuelog.model.problems import ConfigError
from queuelog.server.longpoll import LongPolls
from server_process import ROOT, free_port, make_keys, request

SLOTS = 2


@pytest.fixture
def config() -> dict[str, Any]:
    """Two slots, so that a third waiting claim is one too many."""
    return {"LONG_POLL_SLOTS": SLOTS}


def _polling(app: Any, headers: dict[str, str], wait: float, answers: list[Any]
             ) -> threading.Thread:
    """A claim with ``wait`` in a thread of its own; its answer lands in ``answers``."""
    def poll() -> None:
        answers.append(app.test_client().post("/jobs/claim", json={"wait": wait},
                                              headers=headers))
    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    return thread


def test_a_claim_beyond_the_slots_answers_at_once_with_retry_after(app, client, producer,
                                                                   worker):
    polls: LongPolls = app.extensions["queuelog.longpoll"]
    answers: list[Any] = []
    threads = [_polling(app, worker, 20, answers) for _ in range(SLOTS)]
    try:
        until(lambda: polls.waiting == SLOTS)
        began = time.monotonic()
        extra = client.post("/jobs/claim", json={"wait": 20}, headers=worker)
        assert time.monotonic() - began < 5  # not held for its 20 s (slack for a busy box)
        assert extra.status_code == 204 and extra.headers["Retry-After"] == "1"
        # Turned away from waiting, not from claiming: a due job is still handed out at once.
        job = enqueue(client, producer)
        until(lambda: len(answers) == 1)  # one waiting poll took it...
        assert answers[0].status_code == 200 and answers[0].json["id"] == job["id"]
        until(lambda: polls.waiting == SLOTS - 1)  # ...and gave its slot back
        enqueue(client, producer)
        enqueue(client, producer)  # one for the other waiting poll, one for this claim
        until(lambda: len(answers) == 2)
        assert client.post("/jobs/claim", json={"wait": 20}, headers=worker).status_code == 200
    finally:
        polls.stop()
        for thread in threads:
            thread.join(timeout=10)
    assert [a.status_code for a in answers] == [200, 200]


def test_a_claim_that_waits_within_the_slots_gets_no_retry_after(client, worker):
    resp = client.post("/jobs/claim", json={"wait": 0.1}, headers=worker)
    assert resp.status_code == 204 and "Retry-After" not in resp.headers
    assert "Retry-After" not in client.post("/jobs/claim", headers=worker).headers


@pytest.mark.parametrize("value", [-1, 10_001, "4", 2.5, True])
def test_long_poll_slots_out_of_range_stops_start_up(value, tmp_path):
    from queuelog import create_app
    with pytest.raises(ConfigError, match="LONG_POLL_SLOTS"):
        create_app({"DATABASE_URL": f"sqlite:///{tmp_path}/q.sqlite3", "SECRET_KEY": "x",
                    "BOOTSTRAP_ADMIN": False, "LONG_POLL_SLOTS": value})


@pytest.mark.parametrize("config", [{"LONG_POLL_SLOTS": 0}])
def test_zero_slots_means_no_claim_waits(client, worker):
    began = time.monotonic()
    resp = client.post("/jobs/claim", json={"wait": 20}, headers=worker)
    assert resp.status_code == 204 and resp.headers["Retry-After"] == "1"
    assert time.monotonic() - began < 5  # not its 20 s


def test_a_key_revoked_while_its_claim_waits_never_gets_a_job(app, client, store, producer,
                                                              worker):
    polls: LongPolls = app.extensions["queuelog.longpoll"]
    answers: list[Any] = []
    began = time.monotonic()
    thread = _polling(app, worker, 20, answers)
    try:
        until(lambda: polls.waiting == 1)
        assert store.accounts.revoke_key("mailer-1")
        job = enqueue(client, producer)  # rings the bell: the poll wakes, looks at its key
        thread.join(timeout=10)
    finally:
        polls.stop()
        thread.join(timeout=10)
    assert answers[0].status_code == 204 and time.monotonic() - began < 10
    assert client.get(f"/jobs/{job['id']}", headers=producer).json["status"] == "pending"
    assert store.list_jobs().jobs[0].worker_id is None


def test_a_revoked_key_stops_waiting_without_anyenqueue(app, store, worker):
    """No bell: the next look (the fallback poll, each LONG_POLL_LOOK_SECONDS: 1 s) sees
    the key gone and ends the wait."""
    polls: LongPolls = app.extensions["queuelog.longpoll"]
    answers: list[Any] = []
    began = time.monotonic()
    thread = _polling(app, worker, 20, answers)
    try:
        until(lambda: polls.waiting == 1)
        store.accounts.revoke_key("mailer-1")
        thread.join(timeout=10)
    finally:
        polls.stop()
    assert answers[0].status_code == 204 and time.monotonic() - began < 10


def test_stop_answers_open_polls_at_once_and_later_ones_do_not_wait(app, client, worker):
    polls: LongPolls = app.extensions["queuelog.longpoll"]
    answers: list[Any] = []
    threads = [_polling(app, worker, 20, answers) for _ in range(SLOTS)]
    until(lambda: polls.waiting == SLOTS)
    began = time.monotonic()
    polls.stop()
    for thread in threads:
        thread.join(timeout=10)
    assert time.monotonic() - began < 5  # not its 20 s
    assert [a.status_code for a in answers] == [204, 204]
    began = time.monotonic()
    assert client.post("/jobs/claim", json={"wait": 20}, headers=worker).status_code == 204
    assert time.monotonic() - began < 5  # not its 20 s


# -- a live gunicorn stopping with open long polls ---------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite"])  # the process's shutdown, not the database
@pytest.mark.parametrize("preload", [False, True], ids=["plain", "preload"])
def test_gunicorn_stop_answers_open_long_polls_within_a_second(db_url, tmp_path, preload):
    """SIGTERM (gunicorn's graceful stop, 30 s of grace): open polls answer 204 at once."""
    headers = make_keys(db_url, {"w": "worker"})["w"]
    port = free_port()
    env = {**os.environ, "QUEUELOG_DATABASE_URL": db_url, "QUEUELOG_SECRET_KEY": "x",
           "QUEUELOG_BOOTSTRAP_ADMIN": "false", "QUEUELOG_LONG_POLL_SLOTS": "3",
           "PYTHONUNBUFFERED": "1"}
    log = open(tmp_path / "server.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-w", "1", "-k", "gthread", "--threads", "8",
         "-b", f"127.0.0.1:{port}", *(["--preload"] if preload else []), "app:app"],
        cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True)
    log.close()
    answers: list[Any] = []
    try:
        until(lambda: _healthy(port), timeout=30)
        threads = [threading.Thread(target=_poll_over_http, args=(port, headers, answers),
                                    daemon=True) for _ in range(3)]
        for thread in threads:
            thread.start()
        # All three wait once a fourth claim is turned away for want of a slot.
        until(lambda: _slots_full(port, headers), timeout=10)
        began = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
        took = time.monotonic() - began
        for thread in threads:
            thread.join(timeout=5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    print(f"\ngunicorn ({'--preload' if preload else 'plain'}) stopped in {took:.2f} s "
          "with 3 open long polls")
    assert sorted(answers) == [204, 204, 204]
    assert took < 8, took  # about a second; gunicorn's grace and the polls' wait are 30 s


def _healthy(port: int) -> bool:
    try:
        return request(port, "GET", "/healthz", timeout=1)[0] == 200
    except OSError:
        return False


def _slots_full(port: int, headers: dict[str, str]) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("POST", "/jobs/claim", body=json.dumps({"wait": 0.01}), headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status == 204 and resp.getheader("Retry-After") == "1"
    finally:
        conn.close()


def _poll_over_http(port: int, headers: dict[str, str], answers: list[Any]) -> None:
    """One 30 s poll; turned away (a probe held a slot for a moment), it tries again."""
    for _ in range(100):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=40)
        try:
            conn.request("POST", "/jobs/claim", body=json.dumps({"wait": 30}), headers=headers)
            resp = conn.getresponse()
            resp.read()
            if resp.getheader("Retry-After") is None:
                answers.append(resp.status)
                return
        except (OSError, http.client.HTTPException) as exc:
            answers.append(repr(exc))
            return
        finally:
            conn.close()
        time.sleep(0.05)


@pytest.fixture
def gunicorn_worker() -> Iterator[Any]:
    """This process made to look like a gunicorn worker, as the watcher finds one: a
    ``gunicorn.workers.base.Worker`` (not started) whose ``handle_exit`` is the SIGTERM
    handler, with as many threads as long-poll slots."""
    from gunicorn.workers.base import Worker
    worker = Worker.__new__(Worker)  # its __init__ wants an arbiter, sockets and an app
    worker.alive = True
    worker.cfg = type("Cfg", (), {"threads": SLOTS})()
    previous = signal.signal(signal.SIGTERM, worker.handle_exit)
    try:
        yield worker
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_watcher_ends_open_polls_when_the_worker_stops(app, client, worker,
                                                           gunicorn_worker, caplog):
    polls: LongPolls = app.extensions["queuelog.longpoll"]
    answers: list[Any] = []
    thread = _polling(app, worker, 20, answers)
    until(lambda: polls.waiting == 1)
    began = time.monotonic()
    os.kill(os.getpid(), signal.SIGTERM)  # gunicorn's handler: the worker is no longer alive
    assert not gunicorn_worker.alive
    thread.join(timeout=10)
    assert answers[0].status_code == 204 and time.monotonic() - began < 5
    # No more threads than slots: worth a warning.
    assert [r.getMessage() for r in caplog.records if "LONG_POLL_SLOTS is 2" in r.getMessage()]


def _watching(polls: LongPolls) -> list[threading.Thread]:
    """Live threads running one of ``polls``' own methods (a shutdown watcher's loop)."""
    return [t for t in threading.enumerate()
            if getattr(getattr(t, "_target", None), "__self__", None) is polls]


def test_outside_gunicorn_no_watcher_is_started(app, worker):
    """An app made outside gunicorn (this test process) has no worker to watch: a poll
    that waits starts no watcher, and nothing stops its polls early."""
    polls: LongPolls = app.extensions["queuelog.longpoll"]
    answers: list[Any] = []
    began = time.monotonic()
    thread = _polling(app, worker, 1.5, answers)
    until(lambda: polls.waiting == 1 or bool(answers))
    assert _watching(polls) == []
    thread.join(timeout=10)
    assert answers[0].status_code == 204 and time.monotonic() - began >= 1.5
    assert not polls.stopping and _watching(polls) == []
    assert "queuelog-longpoll-shutdown" not in [t.name for t in threading.enumerate()]
