"""Password guessing: 10 failures a minute per (username, address), then 429 without a
password check; and a bound on the password hashes one process computes at once."""
from __future__ import annotations

import threading
from typing import Any

import pytest

from helpers import SQLITE_ONLY, basic, problem
from queuelog import auth
from queuelog.throttle import HashSlots, SignInThrottle

GUESSER, OTHER = "10.0.0.66", "10.0.0.7"


def sign_in(client: Any, headers: dict[str, str], address: str, path: str = "/jobs") -> Any:
    """GET ``path`` with these credentials from this client address."""
    return client.get(path, headers=headers, environ_base={"REMOTE_ADDR": address})


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every password check the app makes (the hashes it was asked to compare with)."""
    seen: list[str] = []
    real = auth.check_password_hash

    def counting(pwhash: str, password: str) -> bool:
        seen.append(pwhash)
        return real(pwhash, password)
    monkeypatch.setattr(auth, "check_password_hash", counting)
    return seen


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


def test_the_throttle_remembers_a_bounded_number_of_pairs():
    throttle = SignInThrottle(failures=2, window_us=60_000_000, max_pairs=3)
    for name in ("a", "b", "c", "d"):
        throttle.failed(name, "x", 0)
        throttle.failed(name, "x", 0)
    assert throttle.retry_after("a", "x", 0) == 0  # the stalest pair was forgotten
    assert throttle.retry_after("d", "x", 1) == 60


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
