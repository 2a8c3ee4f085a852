"""Wake-ups across processes: a claim waiting on one app server is woken by what another does,
and so is a read waiting for a job's finish (``GET /jobs/{id}?wait=``).

Two gunicorn app servers (one worker each) share one database. Their safety-net look is set
to a minute (``LONG_POLL_LOOK_SECONDS``) and every waiting claim here waits 20 s, so a 200
can only come from a wake-up (or, for the delayed job, from the look timed by its run_at):
without it the claim would answer 204 at its deadline.
"""
from __future__ import annotations

import shutil
import threading
import time
from typing import Any, Callable, Iterator

import pytest

from conftest import BACKENDS, _empty_pg
from server_process import Server, make_keys, request, table_rows

pytestmark = pytest.mark.slow

WAIT = 20           # each waiting claim's wait; far below the safety net's 60 s
PARKED = 1.0        # time given to a claim to find nothing and go to sleep
FAST = 5.0          # a wake-up answers within this (generous: a loaded machine)


class Pair:
    """Two app servers on one database, with the keys the tests use."""

    def __init__(self, url: str, a: Server, b: Server, keys: dict[str, dict[str, str]]):
        self.url, self.a, self.b, self.keys = url, a, b, keys

    def on_b(self, method: str, path: str, body: Any = None, key: str = "producer") -> Any:
        """One request to server B; returns the decoded body (asserting a 2xx)."""
        status, got = request(self.b.port, method, path, body, self.keys[key])
        assert 200 <= status < 300, (status, got)
        return got

    def waiting_claim(self) -> tuple[threading.Thread, dict[str, Any]]:
        """A claim with ``wait`` on server A, in a thread; its answer lands in the dict."""
        answer: dict[str, Any] = {}

        def poll() -> None:
            began = time.monotonic()
            answer["status"], answer["job"] = request(
                self.a.port, "POST", "/jobs/claim", {"wait": WAIT}, self.keys["worker"],
                timeout=WAIT + 10)
            answer["at"] = time.monotonic()
            answer["took"] = answer["at"] - began

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        time.sleep(PARKED)
        return thread, answer


@pytest.fixture(scope="module", params=BACKENDS)
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         ) -> Iterator[Pair]:
    """Servers A and B on a fresh database of each backend, started once per module."""
    folder = tmp_path_factory.mktemp("wake")
    if request.param == "sqlite":
        path = folder / "queuelog.sqlite3"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        url = f"sqlite:///{path}"
    else:
        url = request.getfixturevalue("pg_ready")
        _empty_pg(url)
    keys = make_keys(url, {"producer": "producer", "worker": "worker", "root": "admin"})
    env = {"QUEUELOG_LONG_POLL_LOOK_SECONDS": "60"}
    a = Server(url, str(folder / "a.log"), workers=1, threads=4, env=env).start()
    b = Server(url, str(folder / "b.log"), workers=1, threads=4, env=env)
    try:
        b.start()
        yield Pair(url, a, b, keys)
    finally:
        a.stop()
        b.stop()


def _claim_now(pair: Pair) -> dict[str, Any]:
    """Claim a due job at once on server B (the test's own worker step)."""
    status, job = request(pair.b.port, "POST", "/jobs/claim", None, pair.keys["worker"])
    assert status == 200, status
    return job  # type: ignore[no-any-return]


def _woken_by(pair: Pair, act: Callable[[], dict[str, Any]]) -> None:
    """A claim parked on A is answered with the job ``act`` (on B) makes claimable."""
    thread, answer = pair.waiting_claim()
    acted = time.monotonic()
    job = act()
    thread.join(timeout=WAIT + 15)
    assert answer["status"] == 200, answer  # 204 after 20 s: no wake-up came
    assert answer["job"]["id"] == job["id"]
    assert answer["at"] - acted < FAST


def test_an_enqueue_on_another_server_wakes_a_waiting_claim(pair: Pair) -> None:
    _woken_by(pair, lambda: pair.on_b("POST", "/jobs", {"type": "email"}))


def test_a_fail_back_to_pending_wakes_a_waiting_claim(pair: Pair) -> None:
    pair.on_b("POST", "/jobs", {"type": "email"})
    held = _claim_now(pair)
    _woken_by(pair, lambda: pair.on_b("POST", f"/jobs/{held['id']}/fail",
                                      {"attempt": held["attempt"], "error": "x",
                                       "retry_in": 0}, key="worker"))


def test_a_resume_wakes_a_waiting_claim(pair: Pair) -> None:
    pair.on_b("POST", "/types/pdf/pause", key="root")
    job = pair.on_b("POST", "/jobs", {"type": "pdf"})
    _woken_by(pair, lambda: (pair.on_b("POST", "/types/pdf/resume", key="root"), job)[1])


def test_an_admin_retry_wakes_a_waiting_claim(pair: Pair) -> None:
    pair.on_b("POST", "/jobs", {"type": "sync", "max_retries": 0})
    held = _claim_now(pair)
    pair.on_b("POST", f"/jobs/{held['id']}/fail", {"attempt": held["attempt"], "error": "x"},
              key="worker")
    _woken_by(pair, lambda: pair.on_b("POST", f"/jobs/{held['id']}/retry", key="root"))


def _wait_woken_by(pair: Pair, finish: Callable[[dict[str, Any]], Any], status: str) -> None:
    """A ``GET /jobs/{id}?wait=`` parked on A is answered when ``finish`` (on B) ends the
    job: within FAST, where without the wake-up it would wait its 20 s."""
    pair.on_b("POST", "/jobs", {"type": "email"})
    held = _claim_now(pair)
    answer: dict[str, Any] = {}

    def get() -> None:
        answer["status"], answer["job"] = request(
            pair.a.port, "GET", f"/jobs/{held['id']}?wait={WAIT}", None,
            pair.keys["producer"], timeout=WAIT + 10)
        answer["at"] = time.monotonic()

    thread = threading.Thread(target=get, daemon=True)
    thread.start()
    time.sleep(PARKED)
    acted = time.monotonic()
    finish(held)
    thread.join(timeout=WAIT + 15)
    assert answer["status"] == 200 and answer["job"]["status"] == status, answer
    assert answer["at"] - acted < FAST


def test_a_complete_on_another_server_answers_a_waiting_read(pair: Pair) -> None:
    _wait_woken_by(pair, lambda held: pair.on_b(
        "POST", f"/jobs/{held['id']}/complete", {"attempt": held["attempt"]}, key="worker"),
        "completed")


def test_a_cancel_on_another_server_answers_a_waiting_read(pair: Pair) -> None:
    _wait_woken_by(pair, lambda held: pair.on_b("POST", f"/jobs/{held['id']}/cancel"),
                   "cancelled")


def test_a_delayed_job_is_claimed_at_its_run_at(pair: Pair) -> None:
    """Not at the next safety-net look (a minute here): at its run_at."""
    thread, answer = pair.waiting_claim()
    enqueued = time.monotonic()
    job = pair.on_b("POST", "/jobs", {"type": "email", "delay_seconds": 2})
    thread.join(timeout=WAIT + 15)
    assert answer["status"] == 200 and answer["job"]["id"] == job["id"], answer
    late = answer["at"] - enqueued - 2
    assert -0.05 < late < FAST - 2  # never early; late by far less than any look


@pytest.mark.postgresql
def test_the_listener_reconnects_after_its_connection_is_killed(pair: Pair) -> None:
    if not pair.url.startswith("postgresql"):
        pytest.skip("LISTEN is PostgreSQL's")
    _woken_by(pair, lambda: pair.on_b("POST", "/jobs", {"type": "email"}))  # A listens
    listeners = "SELECT pid FROM pg_stat_activity WHERE application_name = 'queuelog-listen' " \
                "AND datname = current_database()"
    # Every server process that ever waited keeps one listener (earlier tests of the module
    # may have made B wait too): cut them all, and each must come back as a new one.
    old = {pid for (pid,) in table_rows(pair.url, listeners)}
    assert old
    for pid in old:
        assert table_rows(pair.url, f"SELECT pg_terminate_backend({int(pid)})") == [(True,)]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        now = {pid for (pid,) in table_rows(pair.url, listeners)}
        if len(now) >= len(old) and not now & old:
            break
        time.sleep(0.05)
    assert len(now) >= len(old) and not now & old, "the listeners did not reconnect"
    _woken_by(pair, lambda: pair.on_b("POST", "/jobs", {"type": "email"}))
