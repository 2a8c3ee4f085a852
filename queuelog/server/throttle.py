"""Password guessing, bounded: failed sign-ins per (username, address), and hash slots.

The failures are counted in the database (``store.SignIns``), so the limit holds across every
gunicorn worker and every app server, and survives a restart. The hash slots bound one
process's CPU, so they live in the process.
"""
from __future__ import annotations

import threading

from werkzeug.security import check_password_hash, generate_password_hash

from queuelog.server.store import SignIns

FAILURES = 10                 # failed sign-ins allowed per pair ...
WINDOW_US = 60_000_000        # ... within this sliding minute


class SignInThrottle:
    """Counts failed sign-ins per (username, client address) over a sliding minute."""

    def __init__(self, failures: int = FAILURES, window_us: int = WINDOW_US) -> None:
        self.failures = failures
        self.window_us = window_us

    def recent(self, sign_ins: SignIns, username: str, address: str, now_us: int) -> list[int]:
        """The pair's failures within the window, latest first (at most ``failures``)."""
        return sign_ins.latest(username, address, self.failures, now_us - self.window_us)

    def retry_after(self, recent: list[int], now_us: int) -> int:
        """Whole seconds until the pair with these recent failures may try again; 0 now."""
        if len(recent) < self.failures:
            return 0
        # The pair is under the limit again once its ``failures``-th latest failure is
        # older than the window (counting failures that raced in beyond the limit).
        left = recent[self.failures - 1] + self.window_us - now_us
        return 0 if left <= 0 else -(-left // 1_000_000)  # rounded up: never too early

    def failed(self, sign_ins: SignIns, username: str, address: str, now_us: int) -> None:
        """Record one failed sign-in of this pair (and sweep some expired ones)."""
        sign_ins.record(username, address, now_us, now_us - self.window_us)

    def succeeded(self, sign_ins: SignIns, username: str, address: str,
                  recent: list[int]) -> None:
        """A correct password clears the pair's failures (no write if it had none)."""
        if recent:
            sign_ins.clear(username, address)


class HashSlots:
    """At most ``slots`` password hashes computed at once in this process.

    A hash is deliberately slow (tens of milliseconds of CPU). Without a bound, a handful of
    guessing clients keep every thread hashing and every core busy, and unrelated calls wait.
    A check that finds no slot within ``wait`` seconds is refused (429, Retry-After: 1),
    so its thread is free again at once instead of queueing behind the hashes.
    """

    def __init__(self, slots: int, wait: float, dummy: str | None = None) -> None:
        self._slots = threading.BoundedSemaphore(slots)
        self.wait = wait
        self._dummy = dummy
        self._dummy_made = threading.Lock()

    def acquire(self) -> bool:
        """Take a slot, waiting at most ``wait`` seconds; False if none came free."""
        return self._slots.acquire(timeout=self.wait)

    def release(self) -> None:
        """Give the slot back."""
        self._slots.release()

    def check(self, password_hash: str, password: str) -> bool | None:
        """Whether ``password`` matches ``password_hash``, checked in a slot; None if no
        slot came free within ``wait`` seconds."""
        if not self.acquire():
            return None
        try:
            return check_password_hash(password_hash, password)
        finally:
            self.release()

    def dummy(self) -> str:
        """The hash a name that is no user is checked against: of the method and cost a
        person's password gets, so the answer's time does not tell names apart. Made once,
        at the first unknown name (a slow hash: not at start)."""
        with self._dummy_made:
            if self._dummy is None:
                self._dummy = generate_password_hash("queuelog-timing-equalizer")
            return self._dummy
