"""Password guessing, bounded: failed sign-ins per (username, address), and hash slots.

Both live in the process (each gunicorn worker keeps its own): cheap, with nothing to share,
at the price that N workers allow up to N x the limit, and a restart forgets. The README says so.
"""
from __future__ import annotations

import collections
import threading

FAILURES = 10                 # failed sign-ins allowed per pair ...
WINDOW_US = 60_000_000        # ... within this sliding minute
MAX_PAIRS = 100_000           # pairs remembered at once; beyond, the stalest are forgotten


class SignInThrottle:
    """Counts failed sign-ins per (username, client address) over a sliding minute."""

    def __init__(self, failures: int = FAILURES, window_us: int = WINDOW_US,
                 max_pairs: int = MAX_PAIRS) -> None:
        self.failures = failures
        self.window_us = window_us
        self.max_pairs = max_pairs
        # pair -> times of its latest failures (at most ``failures``), oldest first; the
        # dict's order is least recently failed first, so eviction drops the stalest pair.
        self._seen: collections.OrderedDict[tuple[str, str], collections.deque[int]] = \
            collections.OrderedDict()
        self._lock = threading.Lock()

    def retry_after(self, username: str, address: str, now_us: int) -> int:
        """Whole seconds until this pair may try again; 0 when it may now."""
        with self._lock:
            times = self._seen.get((username, address))
            if times is None or len(times) < self.failures:
                return 0
            left = times[0] + self.window_us - now_us
        return 0 if left <= 0 else -(-left // 1_000_000)  # rounded up: never too early

    def failed(self, username: str, address: str, now_us: int) -> None:
        """Record one failed sign-in of this pair."""
        key = (username, address)
        with self._lock:
            times = self._seen.pop(key, None)
            if times is None:
                times = collections.deque(maxlen=self.failures)
            times.append(now_us)
            self._seen[key] = times
            while len(self._seen) > self.max_pairs:
                self._seen.popitem(last=False)

    def succeeded(self, username: str, address: str) -> None:
        """A correct password clears the pair's failures."""
        with self._lock:
            self._seen.pop((username, address), None)


class HashSlots:
    """At most ``slots`` password hashes computed at once in this process.

    A hash is deliberately slow (tens of milliseconds of CPU). Without a bound, a handful of
    guessing clients keep every thread hashing and every core busy, and unrelated calls wait.
    A check that finds no slot within ``wait`` seconds is refused (429, Retry-After: 1),
    so its thread is free again at once instead of queueing behind the hashes.
    """

    def __init__(self, slots: int, wait: float) -> None:
        self._slots = threading.BoundedSemaphore(slots)
        self.wait = wait

    def acquire(self) -> bool:
        """Take a slot, waiting at most ``wait`` seconds; False if none came free."""
        return self._slots.acquire(timeout=self.wait)

    def release(self) -> None:
        """Give the slot back."""
        self._slots.release()
