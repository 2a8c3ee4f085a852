"""Password guessing: 10 failures a minute per (username, address), then 429 without a
password check; and a bound on the password hashes one process computes at once."""
from __future__ import annotations

import concurrent.futures
import http.client
import re
import time
import threading
from typing import Any

import pytest

from helpers import SQLITE_ONLY, add_user, basic, failing_statements, hash_checks, problem
from queuelog.server.store import Store
from queuelog.server.store.signins import SWEEP
from queuelog.server.throttle import HashSlots
from server_process import Server, table_rows

GUESSER, OTHER = "10.0.0.66", "10.0.0.7"


@pytest.fixture(autouse=True)
def hashes(app: Any) -> list[str]:
    """Every password check the app makes (the hashes it was asked to compare with); 30
    made-up names here: each checked against a cheap dummy hash (every test has both)."""
    return hash_checks(app)


def sign_in(client: Any, headers: dict[str, str], address: str, path: str = "/jobs") -> Any:
    """GET ``path`` with these credentials from this client address."""
    return client.get(path, headers=headers, environ_base={"REMOTE_ADDR": address})




@pytest.mark.parametrize("path", ["/jobs", "/ui/"])  # the API and the dashboard
def test_ten_failures_a_minute_then_429_without_a_password_check(client, make_user, clock,
                                                                 hashes, path):
    right = make_user("ada", "admin", "correct horse battery")
    wrong = basic("ada", "wrong password")
    for _ in range(10):
        assert sign_in(client, wrong, GUESSER, path).status_code == 401
    checks = len(hashes)
    for headers in (wrong, right):  # from now on even the right password is not checked
        got = problem(sign_in(client, headers, GUESSER, path), 429, "too-many-requests")
        assert "ada" in got["detail"]
        assert sign_in(client, headers, GUESSER, path).headers["Retry-After"] == "60"
    assert len(hashes) == checks
    # The right password from another address is not affected, nor another user here.
    assert sign_in(client, right, OTHER, path).status_code == 200
    assert sign_in(client, basic("bob", "x"), GUESSER, path).status_code == 401
    clock.advance(45)
    assert sign_in(client, right, GUESSER, path).headers["Retry-After"] == "15"
    clock.advance(15)  # the minute since the first failure has passed
    assert sign_in(client, right, GUESSER, path).status_code == 200


def test_failures_spread_over_more_than_a_minute_are_not_throttled(client, make_user, clock):
    make_user("ada", "admin", "correct horse battery")
    wrong = basic("ada", "wrong password")
    for _ in range(30):
        assert sign_in(client, wrong, GUESSER).status_code == 401
        clock.advance(6.5)  # nine failures in any minute


def test_unknown_usernames_are_throttled_alike(client, store):
    nobody = basic("nobody", "guess")
    for _ in range(10):
        assert sign_in(client, nobody, GUESSER).status_code == 401
    problem(sign_in(client, nobody, GUESSER), 429)


def test_a_success_clears_the_pairs_failures(client, make_user):
    right = make_user("ada", "admin", "correct horse battery")
    for _ in range(9):
        sign_in(client, basic("ada", "typo"), GUESSER)
    assert sign_in(client, right, GUESSER).status_code == 200
    for _ in range(9):
        assert sign_in(client, basic("ada", "typo"), GUESSER).status_code == 401


@SQLITE_ONLY
def test_bearer_keys_are_not_throttled(client, producer):
    for _ in range(20):
        assert client.get("/jobs", headers={"Authorization": "Bearer ql_wrong"},
                          environ_base={"REMOTE_ADDR": GUESSER}).status_code == 401
    assert client.get("/jobs", headers=producer,
                      environ_base={"REMOTE_ADDR": GUESSER}).status_code == 200


def test_expired_failures_are_swept_in_bounded_batches(store, clock, db_url):
    """The table keeps little beyond the last minute: each failure deletes expired rows."""
    for n in range(SWEEP + 50):
        store.sign_ins.record(f"user{n}", GUESSER, clock(), clock() - 60_000_000)
    clock.advance(61)
    store.sign_ins.record("ada", GUESSER, clock(), clock() - 60_000_000)
    assert _rows(db_url) == 51  # one batch swept, the newest row kept
    store.sign_ins.record("ada", GUESSER, clock(), clock() - 60_000_000)
    assert _rows(db_url) == 2
    assert len(store.sign_ins.latest("ada", GUESSER, 10, clock() - 60_000_000)) == 2


def test_odd_usernames_and_addresses_are_counted_not_refused(client, store):
    """NUL, lone surrogates and over-long names fit the table's key (no 500)."""
    for name in ("nul\x00name", "x" * 5000):
        nobody = basic(name, "guess")
        for _ in range(10):
            assert sign_in(client, nobody, GUESSER).status_code == 401
        problem(sign_in(client, nobody, GUESSER), 429)
    store.sign_ins.record("a\udc80", "\x00" + "1" * 300, 5, 0)
    assert store.sign_ins.latest("a\udc80", "\x00" + "1" * 300, 10, 0) == [5]


def test_a_remembered_password_is_throttled_too(client, make_user):
    """A password checked moments ago (AUTH_CACHE_SECONDS) still gets 429 after 10 failures:
    they may have come in through another worker, so the count is read every time."""
    right = make_user("ada", "admin", "correct horse battery")
    assert sign_in(client, right, GUESSER).status_code == 200
    for _ in range(10):
        assert sign_in(client, basic("ada", "typo"), GUESSER).status_code == 401
    problem(sign_in(client, right, GUESSER), 429, "too-many-requests")


def test_a_database_that_fails_the_throttle_read_answers_503(client, store, make_user):
    right = make_user("ada", "admin", "correct horse battery")
    with failing_statements(store.engine, "FROM signin_failures") as failed:
        problem(sign_in(client, right, GUESSER), 503, "unavailable")
    assert failed  # the throttle's read, not some other statement, failed the sign-in


def _rows(db_url: str) -> int:
    return int(table_rows(db_url, "SELECT COUNT(*) FROM signin_failures")[0][0])


@SQLITE_ONLY
def test_password_checks_beyond_the_slots_are_refused_at_once(app, client, make_user,
                                                              monkeypatch):
    """With every hash slot taken, a sign-in waits briefly, then gets 429 (its thread free)."""
    right = make_user("ada", "admin", "correct horse battery")
    slots = HashSlots(1, 0.05)
    monkeypatch.setitem(app.extensions, "queuelog.hash_slots", slots)
    assert slots.acquire()  # a long hash in progress elsewhere
    try:
        got = problem(sign_in(client, right, OTHER), 429, "too-many-requests")
        assert "at once" in got["detail"]
        assert sign_in(client, right, OTHER).headers["Retry-After"] == "1"
    finally:
        slots.release()
    assert sign_in(client, right, OTHER).status_code == 200


def test_hash_slots_bound_concurrency():
    slots = HashSlots(2, 0.0)
    held = [slots.acquire(), slots.acquire()]
    assert held == [True, True] and not slots.acquire()
    done = threading.Event()

    def later() -> None:
        slots.release()
        done.set()
    threading.Thread(target=later).start()
    assert done.wait(5) and slots.acquire()


@pytest.mark.slow
def test_the_limit_holds_across_gunicorn_workers(db_url, tmp_path):
    """10 failures then the 11th attempt is 429 (even the right password), whichever of the
    server's workers answers each: the count is shared, not one per process."""
    store = Store(db_url)
    users = [f"user{n}" for n in range(18)]
    try:
        for name in users:
            add_user(store, name, "viewer", "right password")
    finally:
        store.close()
    # One connection at a time per worker (--worker-connections 1), so concurrent clients
    # are spread over both; the access log names the worker (%(p)s) and the user (%(u)s).
    server = Server(db_url, str(tmp_path / "server.log"), workers=2, threads=1, env={
        "GUNICORN_CMD_ARGS": "--worker-connections 1 --access-logfile - "
                             "--access-logformat 'answered-by %(p)s %(u)s'",
    }).start()
    results: list[list[tuple[int, str | None]]] = []
    workers_of: dict[str, set[str]] = {}
    try:
        # gunicorn's workers boot one after the other: wait (bounded) until both answer, or
        # every attempt could land on the first one and the test would prove nothing.
        deadline = time.monotonic() + 20
        while len(set(re.findall(r"answered-by <(\d+)>", server.log()))) < 2 \
                and time.monotonic() < deadline:
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                list(pool.map(lambda _: _get(server.port, {}), range(4)))

        def attempts(name: str) -> list[tuple[int, str | None]]:
            # A new connection per request, several users at once.
            got = [_get(server.port, basic(name, "wrong password")) for _ in range(10)]
            return got + [_get(server.port, basic(name, "right password"))]
        # The kernel may keep a user's connections on one worker (the one that just answered
        # is the one accepting): up to three groups of six users, until one user was spread.
        for group in (users[:6], users[6:12], users[12:]):
            with concurrent.futures.ThreadPoolExecutor(len(group)) as pool:
                results += list(pool.map(attempts, group))
            workers_of = {name: set() for name in users}
            for pid, name in re.findall(r"answered-by <(\d+)> (\S+)", server.log()):
                workers_of.setdefault(name, set()).add(pid)
            if any(len(workers_of[name]) > 1 for name in users):
                break
    finally:
        server.stop()
    # Else a per-process count would pass too, and the test would prove nothing.
    assert any(len(workers_of[name]) > 1 for name in users), workers_of
    for got in results:
        assert [status for status, _ in got[:10]] == [401] * 10
        assert got[10][0] == 429 and got[10][1] is not None and 0 < int(got[10][1]) <= 60


def _get(port: int, headers: dict[str, str]) -> tuple[int, str | None]:
    """GET /jobs on a fresh connection; the status and Retry-After."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/jobs", headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status, resp.getheader("Retry-After")
    finally:
        conn.close()
