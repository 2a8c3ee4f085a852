"""Long polls: a claim that waits for a job, or a read that waits for a job's finish,
within a per-process budget of threads.

One ``LongPolls`` per app (per gunicorn worker process) holds two bells, the slots
(``LONG_POLL_SLOTS``) that bound how many threads may wait at once (claims and reads share
them), and the shutdown flag that ends every open poll when the process stops. ``bell``
is rung by whatever makes a job claimable, ``finished`` by the finish of a job a request
waits for, in this process or any other (wakeups.py); a waiting claim also looks when the
next delayed job comes due, and every poll every ``LONG_POLL_LOOK_SECONDS`` as a safety
net (a lost wake-up must not strand a job or a waiting reader).
"""
from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Generic, Sequence, TypeVar

from flask import Flask, current_app

T = TypeVar("T")

# The safety net's default: a poll looks at least this often, wake-up or not.
MAX_PAUSE = 1.0
# A look timed by a run_at comes this much after it, so the job is due when it looks.
DUE_MARGIN = 0.001
# How often the shutdown watcher looks at gunicorn's worker: the stop's extra latency.
WATCH_EVERY = 0.1
# What a claim turned away for want of a slot is told: look again in a second.
BUSY_RETRY_AFTER = 1


class Wakeup(threading.Condition):
    """A condition with a counter, so a long poll cannot miss a wake-up.

    A poll notes ``count`` before it claims; a job enqueued between that claim finding
    nothing and the poll going to sleep has moved the count, and the poll does not sleep.
    """

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def ring(self) -> None:
        """Wake every waiting poll: a job may have become due."""
        with self:
            self.count += 1
            self.notify_all()

    def wait_after(self, seen: int, timeout: float) -> bool:
        """Sleep up to ``timeout`` unless rung since the count was ``seen``."""
        with self:
            return self.wait_for(lambda: self.count != seen, timeout)


@dataclasses.dataclass(frozen=True)
class PollResult(Generic[T]):
    """What a (maybe waiting) claim found, and whether the caller should back off."""

    jobs: Sequence[T]
    retry_after: int | None = None   # set when no slot was free: "look again in a second"
    waited: float = 0.0              # seconds spent asleep (left out of the request's time)


class LongPolls:
    """The bell, the slots and the shutdown flag of one process's long polls."""

    def __init__(self, slots: int, look: float = MAX_PAUSE) -> None:
        self.bell = Wakeup()             # a job may have become claimable
        self.finished = Wakeup()         # a job a request waits for finished
        self.slots = slots
        self.look = look                 # the safety net: seconds between looks at most
        # Called before a poll that may wait first looks: starts this process's listener
        # (wakeups.py), so nothing committed after that look goes unheard.
        self.before_wait: Callable[[], None] = lambda: None
        self._free = threading.BoundedSemaphore(slots) if slots > 0 else None
        self.stopping = False
        self.waiting = 0            # polls holding a slot now (tests, metrics)
        self._count_lock = threading.Lock()
        self._watcher_pid: int | None = None
        self._watcher_lock = threading.Lock()

    def claim(self, try_claim: Callable[[], Sequence[T]], wait: float,
              still_allowed: Callable[[], bool],
              next_due: Callable[[], float | None] = lambda: None) -> PollResult[T]:
        """Claim now; if nothing is due, look again until ``wait`` runs out (``poll``)."""
        return self.poll(try_claim, wait, still_allowed, next_due, bell=self.bell)

    def finish(self, look: Callable[[], Sequence[T]], wait: float,
               still_allowed: Callable[[], bool]) -> PollResult[T]:
        """Look at a job now; until it has finished (``look`` returns it), look again at
        each ``finished`` wake-up until ``wait`` runs out (``poll``)."""
        return self.poll(look, wait, still_allowed, bell=self.finished)

    def poll(self, try_claim: Callable[[], Sequence[T]], wait: float,
             still_allowed: Callable[[], bool],
             next_due: Callable[[], float | None] = lambda: None, *,
             bell: Wakeup) -> PollResult[T]:
        """Look now; if nothing is found, look again at each ring of ``bell`` until
        ``wait`` runs out.

        ``try_claim`` claims and returns what it got (a list: one job, or up to
        ``max_jobs``). ``still_allowed`` is asked before and after every later look: once
        it says no (the client went away, or a look found the key revoked) the poll ends
        with nothing and claims no more.
        ``next_due`` says in how many seconds the next delayed job it may claim comes due.
        """
        deadline = time.monotonic() + wait
        if wait > 0 and not self.stopping:
            self.before_wait()
        seen = bell.count
        jobs = try_claim()
        if jobs or wait <= 0 or self.stopping:
            return PollResult(jobs)
        # Waiting holds a server thread; past the slots, answer at once so that long polls
        # can never take every thread (and the dashboard or a complete with them).
        if self._free is None or not self._free.acquire(blocking=False):
            return PollResult(jobs, retry_after=BUSY_RETRY_AFTER)
        with self._count_lock:
            self.waiting += 1
        try:
            self._watch_for_shutdown()
            return self._wait(try_claim, bell, deadline, seen, still_allowed, next_due,
                              _due_in(jobs))
        finally:
            with self._count_lock:
                self.waiting -= 1
            self._free.release()

    def _wait(self, try_claim: Callable[[], Sequence[T]], bell: Wakeup, deadline: float,
              seen: int,
              still_allowed: Callable[[], bool], next_due: Callable[[], float | None],
              token_in: float | None) -> PollResult[T]:
        waited = 0.0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return PollResult((), waited=waited)
            pause = min(self.look, remaining)
            # After the look that found nothing: a delayed job due later, or a rate-limited
            # type's next token? Look again exactly then.
            for due_in in (next_due(), token_in):
                if due_in is not None:
                    pause = min(pause, due_in + DUE_MARGIN)
            began = time.monotonic()
            bell.wait_after(seen, pause)
            waited += time.monotonic() - began
            if self.stopping or not still_allowed():
                return PollResult((), waited=waited)
            seen = bell.count
            jobs = try_claim()
            if jobs or not still_allowed():  # the look itself may find the key revoked
                return PollResult(jobs, waited=waited)
            token_in = _due_in(jobs)

    def stop(self) -> None:
        """The process is stopping: every open poll answers now, and new ones do not wait."""
        self.stopping = True
        self.bell.ring()
        self.finished.ring()

    def _watch_for_shutdown(self) -> None:
        # gunicorn's worker answers SIGTERM by setting its ``alive`` to False, then waits
        # (up to --graceful-timeout, 30 s) for open requests: a 30 s poll would hold the stop.
        # A signal handler of our own cannot be chained in: gunicorn installs its own after
        # loading the app, and with --preload the app is built in the master before the fork.
        # So one thread per process watches the worker that owns SIGTERM.
        if self._watcher_pid == os.getpid():
            return
        with self._watcher_lock:
            if self._watcher_pid == os.getpid():
                return
            self._watcher_pid = os.getpid()  # threads do not survive a fork: one per process
            worker = _gunicorn_worker()
            if worker is None:
                return
            threading.Thread(target=self._watch, args=(worker,), daemon=True,
                             name="queuelog-longpoll-shutdown").start()
            threads = getattr(getattr(worker, "cfg", None), "threads", None)
            if isinstance(threads, int) and threads <= self.slots:
                current_app.logger.warning(
                    "gunicorn runs %d thread(s) per worker and LONG_POLL_SLOTS is %d: waiting "
                    "claims can hold every thread; run gunicorn with -k gthread --threads "
                    "above LONG_POLL_SLOTS", threads, self.slots)

    def _watch(self, worker: Any) -> None:
        while getattr(worker, "alive", False):
            time.sleep(WATCH_EVERY)
        self.stop()


def _due_in(found: Sequence[Any]) -> float | None:
    """Seconds until the claim policy's next token is due (``store.Claimed``), if it said."""
    return getattr(found, "next_due_in", None)


def _gunicorn_worker() -> Any | None:
    """The gunicorn worker of this process, found through its SIGTERM handler; else None."""
    try:
        handler = signal.getsignal(signal.SIGTERM)
    except (ValueError, OSError):
        return None
    owner = getattr(handler, "__self__", None)
    base = sys.modules.get("gunicorn.workers.base")  # loaded in a gunicorn worker, only there
    return owner if base is not None and isinstance(owner, base.Worker) else None


def init_app(app: Flask) -> LongPolls:
    """Give the app its long polls, sized by ``LONG_POLL_SLOTS``."""
    polls = LongPolls(int(app.config["LONG_POLL_SLOTS"]),
                      look=float(app.config["LONG_POLL_LOOK_SECONDS"]))
    app.extensions["queuelog.longpoll"] = polls
    return polls


def long_polls() -> LongPolls:
    """The current app's long polls."""
    return current_app.extensions["queuelog.longpoll"]  # type: ignore[no-any-return]

